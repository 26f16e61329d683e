"""`kimi-k3 render` resolves a stack once: the stack file is read by one call of its reader (issue 26)."""

from __future__ import annotations

import sys


def test_render_reads_the_stack_file_once(tmp_path, monkeypatch):
    import kimi_k3.blueprint  # noqa: F401  (every module that could read the stack file, loaded before counting)
    import kimi_k3.commands.render  # noqa: F401
    import kimi_k3.offline.synth  # noqa: F401
    from kimi_k3.commands.main import main
    from kimi_k3.config import stack_files

    real = stack_files.read_stack_config
    calls = []

    def counting(stack, root=None):
        calls.append(stack)
        return real(stack, root)

    for module in list(sys.modules.values()):  # wherever the reader was imported by name
        # its own dict: getattr() ran the SDKs' lazy-module __getattr__ (their submodules imported, ~30 s)
        if getattr(module, "__dict__", {}).get("read_stack_config") is real:
            monkeypatch.setattr(module, "read_stack_config", counting)
    assert main(["render", "gb300", "--out", str(tmp_path / "out"), "--no-critical-path"]) == 0
    assert (tmp_path / "out" / "manifests.yaml").is_file()
    assert calls == ["gb300"], f"the stack file was read {len(calls)} times during one render"
