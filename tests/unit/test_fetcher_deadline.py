"""Issue 19 review, finding 5: a fetcher whose step hangs (a stalled Hub transfer, a dnf mirror or pip that never
answers) has no exit path, so the EXIT trap never runs: the instance bills on after `up` has failed and the verify Job
only learns of it at its own deadline. The user data bounds every step by the stack's download timeout, and the
timed-out step is recorded like a failed one. Runs the real bash with stubs, as tests/unit/test_fetcher_user_data.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from support import command_stub

from kimi_k3.aws import storage


def test_a_hung_fetch_is_cut_at_the_deadline_recorded_and_powered_off(tmp_path: Path):
    bin_, calls, record = tmp_path / "bin", tmp_path / "calls", tmp_path / "record"
    bin_.mkdir()

    stub = command_stub(bin_, calls)

    for name in ("mount", "dnf", "shutdown"):
        stub(name)
    stub("logger", "cat > /dev/null")
    stub("python3.12", '[ "$1" = "-m" ] && exit 0\nsleep 600')  # the fetch hangs
    stub("aws", f'[[ "$*" == "s3 cp --only-show-errors - "* ]] && cat > {record}\necho token')
    text = storage.fetcher_user_data(
        bucket="bkt",
        prefix="moonshotai/Kimi-K3@" + "a" * 40,
        repo="moonshotai/Kimi-K3",
        revision="a" * 40,
        secret_arn="arn:s",
        region="us-east-1",
        index=0,
        count=2,
        hub_version="1.16.4",
        deadline_seconds=1,
    )
    script = tmp_path / "user-data.sh"
    script.write_text(text.replace("/var/log/", f"{tmp_path}/").replace("/opt/", f"{tmp_path}/"))
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(script)], env={"PATH": f"{bin_}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - t0
    lines = calls.read_text().splitlines()
    assert proc.returncode != 0 and lines[-1] == "shutdown -h now", lines
    assert took < 30, f"powered off after {took:.0f} s, the deadline was 1 s"
    assert record.read_text().startswith("fetcher 1/2 failed (exit 124) at: fetch_checkpoint.py"), record.read_text()
    assert "timed out" in record.read_text()


def test_the_stack_passes_its_download_timeout_to_the_fetchers():
    """The fetchers' bound is the one the verify Job waits for (kimi-k3:serving.downloadTimeoutSeconds)."""
    root = Path(__file__).resolve().parents[2]
    main = (root / "__main__.py").read_text()
    assert "fetch_deadline_seconds=cfg.serving.download_timeout_seconds" in main
    assert "deadline_seconds=args.fetch_deadline_seconds" in (root / "components/aws/fetchers.py").read_text()
