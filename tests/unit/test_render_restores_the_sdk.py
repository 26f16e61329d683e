"""The offline render swaps three SDK internals for its run only (kimi_k3/offline/synth.py: no per-resource stack
trace, the mock monitor's calls inline instead of through a thread pool, its plain answers serialized at once instead
of by pumping the running loop). One process renders many stacks (`kimi-k3 render` of several, `diff`, the test
session) and may run the real SDK after: all must be back after every render, refused ones included."""

from __future__ import annotations

import asyncio

import pytest
from conftest import ROOT
from pulumi.runtime import mocks, rpc
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime import sync_await as sdk_sync_await
from pulumi.runtime.sync_await import _ensure_event_loop

from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.offline.synth import RenderError, _serialized_now, render_config


def _sdk_as_shipped(capture) -> None:
    loop = _ensure_event_loop()
    assert "run_in_executor" not in vars(loop), "the loop still runs executor calls inline"
    assert runtime_resource._get_stack_trace is capture, "registrations still carry no stack trace"
    assert mocks._sync_await is sdk_sync_await._sync_await, "the mock monitor still serializes without the SDK's pump"


def test_the_sdk_is_itself_again_after_a_render_and_after_a_refused_one():
    capture = runtime_resource._get_stack_trace
    stack = read_stack_config("gb300", ROOT)
    rendered = render_config("gb300", dict(stack.config), set(stack.secrets), ROOT)
    assert rendered.objects, "the render registered nothing"
    _sdk_as_shipped(capture)
    with pytest.raises(RenderError):
        render_config("gb300", {**stack.config, "kimi-k3:cluster": '{"mode": "nowhere"}'}, set(stack.secrets), ROOT)
    _sdk_as_shipped(capture)


def test_no_registration_runs_inside_another(monkeypatch):
    """Inline calls that pumped the running loop stepped the other ready registrations from inside one (135-223
    frames deep on the shipped stacks, deeper the more are ready): each mock registration now ends before the next."""
    register, depth, deepest = mocks.MockMonitor.RegisterResource, [0], [0]

    def counted(self, request):
        depth[0] += 1
        deepest[0] = max(deepest[0], depth[0])
        try:
            return register(self, request)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(mocks.MockMonitor, "RegisterResource", counted)
    stack = read_stack_config("gb300-disagg", ROOT)
    rendered = render_config("gb300-disagg", dict(stack.config), set(stack.secrets), ROOT)
    assert len(rendered.resources) > 50 and deepest[0] == 1, f"registrations nested {deepest[0]} deep"


def test_only_the_mocks_plain_serializations_skip_the_pump():
    pumped = []
    sync_await = _serialized_now(lambda aw: pumped.append(aw) or "pumped")
    assert sync_await(rpc.serialize_properties({"a": {"b": [1, "x"]}}, {})).fields["a"].struct_value["b"][1] == "x"
    assert pumped == []
    other = object()
    assert sync_await(other) == "pumped" and pumped == [other], "anything else goes to the SDK's pump"

    async def waits():
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="kimi-k3 bug"):  # a serialization that waits is named, never half-run
        sync_await(rpc.serialize_properties({"a": waits()}, {}))
