"""`python -m kimi_k3`: the same CLI as the `kimi-k3` console script."""

import sys

from kimi_k3.commands.main import console

sys.exit(console())
