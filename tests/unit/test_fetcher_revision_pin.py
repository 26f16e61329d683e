"""Issue 19 finding 6: the weights are pinned to a commit, and every check compares content. A stack without a
40-hex commit is refused by the program `pulumi up` runs (offline tools assume a placeholder and say so); the
fetchers refuse a moving ref, a placeholder, or a ref the Hub resolves to another commit; and the fetchers write the
revision's objects where the workers, the verify Job and the node-local copy read them (MODEL_PATH ends in
@<revision>; the fetchers used to write <repo>/ while everything else read <repo>@<revision>/)."""

from __future__ import annotations

import base64
import json
import sys
import types

import pytest
import yaml
from conftest import ROOT, STACKS, by_kind, env_of, render_with

from kimi_k3.blueprint import load_stack
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import REVISION_PLACEHOLDER, read_stack_config
from kimi_k3.k8s import node_local
from kimi_k3.pods import fetch_checkpoint as fc

PIN = "0123456789abcdef0123456789abcdef01234567"


def _engine_config(stack: str, **model) -> dict[str, str]:
    """The config as `pulumi up` passes it: the stack file, with no placeholder filled in (secrets set)."""
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    out = {k: v if isinstance(v, str) else json.dumps(v) for k, v in doc.items()}
    out["kimi-k3:hfToken"] = "hf_x"
    cluster = json.loads(out["kimi-k3:cluster"])
    cluster["gpuNodes"]["capacityReservationId"] = "cr-0123456789abcdef0"
    cluster["publicAccessCidrs"] = ["198.51.100.0/24"]
    out["kimi-k3:cluster"] = json.dumps(cluster)
    if model:
        out["kimi-k3:model"] = json.dumps(model)
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_up_refuses_a_stack_that_pins_no_commit(stack):
    with pytest.raises(ConfigError) as err:
        parse_stack_config(_engine_config(stack), {"kimi-k3:hfToken"})
    assert "kimi-k3:model.revision: required but not set" in str(err.value) and "40-hex commit sha" in str(err.value)
    assert parse_stack_config(_engine_config(stack, revision=PIN), {"kimi-k3:hfToken"}).model.revision == PIN


@pytest.mark.parametrize("ref", ["main", "v1.0", PIN[:12], PIN.upper()])
def test_a_moving_or_abbreviated_ref_is_refused_naming_what_is_allowed(ref):
    with pytest.raises(ConfigError) as err:
        parse_stack_config(_engine_config("gb300", revision=ref), {"kimi-k3:hfToken"})
    msg = str(err.value)
    assert f"kimi-k3:model.revision = {json.dumps(ref)}" in msg and "40-hex commit sha" in msg, msg


def test_offline_tools_assume_the_placeholder_and_say_so():
    sf = read_stack_config("gb300", ROOT)
    assert json.loads(sf.config["kimi-k3:model"])["revision"] == REVISION_PLACEHOLDER == "0" * 40
    assert any(a.startswith(f"kimi-k3:model.revision = {REVISION_PLACEHOLDER}") and "refuses" in a for a in sf.assumed)


@pytest.mark.parametrize("revision", ["main", REVISION_PLACEHOLDER, "abc"])
def test_the_fetcher_refuses_a_ref_that_is_no_commit_before_asking_the_hub(revision, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # importing it would fail: it is never reached
    for k, v in {
        "MODEL_REPO": "moonshotai/Kimi-K3",
        "MODEL_REVISION": revision,
        "BUCKET": "b",
        "PREFIX": "p",
        "FETCHER_INDEX": "0",
        "FETCHERS": "1",
    }.items():
        monkeypatch.setenv(k, v)
    assert fc.main() == 2 and "refusing" in capsys.readouterr().out


def test_the_fetcher_refuses_a_ref_the_hub_resolves_to_another_commit(monkeypatch, capsys):
    hub = types.ModuleType("huggingface_hub")

    class Api:
        def __init__(self, token=None):
            pass

        def model_info(self, repo, revision, files_metadata):
            return types.SimpleNamespace(sha="f" * 40, siblings=[])

    hub.HfApi, hub.hf_hub_download = Api, None
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    for k, v in {
        "MODEL_REPO": "moonshotai/Kimi-K3",
        "MODEL_REVISION": PIN,
        "BUCKET": "b",
        "PREFIX": "p",
        "FETCHER_INDEX": "0",
        "FETCHERS": "1",
    }.items():
        monkeypatch.setenv(k, v)
    assert fc.main() == 2 and f"resolved to commit {'f' * 40}" in capsys.readouterr().out


def test_the_fetchers_write_where_the_verify_job_and_the_pods_read():
    r = render_with("gb300", model={"revision": PIN})
    cfg, graph = load_stack("gb300", ROOT)
    graph_path = env_of(
        next(c for c in by_kind(r.objects, "Job") if c["metadata"]["name"] == "kimi-k3-model-download")["spec"][
            "template"
        ]["spec"]["containers"][0]
    )["MODEL_PATH"]
    assert graph_path.endswith(f"@{PIN}")
    for f in [x for x in r.resources if x["type"] == "aws:ec2/instance:Instance"]:
        text = base64.b64decode(f["inputs"]["userDataBase64"]).decode()
        (prefix,) = [w.split("=", 1)[1] for line in text.splitlines() for w in line.split() if w.startswith("PREFIX=")]
        assert f"/model-cache/{prefix}" == graph_path, "the objects land in the directory everything else reads"
        assert f"MODEL_REVISION={PIN}" in text
    (ds,) = [d for d in by_kind(r.objects, "DaemonSet") if d["metadata"]["name"] == "kimi-k3-weights-prefetch"]
    env = env_of(ds["spec"]["template"]["spec"]["containers"][0])
    assert (
        env["SOURCE"].endswith(f"/{node_local.model_dir_name(graph).split('@')[0]}@{PIN}")
        and env["MODEL_REVISION"] == PIN
    )
