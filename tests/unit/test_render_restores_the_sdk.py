"""The offline render swaps two SDK internals for its run only (kimi_k3/offline/synth.py: no per-resource stack trace,
the mock monitor's calls inline instead of through a thread pool). One process renders many stacks (`kimi-k3 render`
of several, `diff`, the test session) and may run the real SDK after: both must be back after every render, refused
ones included."""

from __future__ import annotations

import pytest
from conftest import ROOT
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime.sync_await import _ensure_event_loop

from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.offline.synth import RenderError, render_config


def _sdk_as_shipped(capture) -> None:
    loop = _ensure_event_loop()
    assert "run_in_executor" not in vars(loop), "the loop still runs executor calls inline"
    assert runtime_resource._get_stack_trace is capture, "registrations still carry no stack trace"


def test_the_sdk_is_itself_again_after_a_render_and_after_a_refused_one():
    capture = runtime_resource._get_stack_trace
    stack = read_stack_config("gb300", ROOT)
    rendered = render_config("gb300", dict(stack.config), set(stack.secrets), ROOT)
    assert rendered.objects, "the render registered nothing"
    _sdk_as_shipped(capture)
    with pytest.raises(RenderError):
        render_config("gb300", {**stack.config, "kimi-k3:cluster": '{"mode": "nowhere"}'}, set(stack.secrets), ROOT)
    _sdk_as_shipped(capture)
