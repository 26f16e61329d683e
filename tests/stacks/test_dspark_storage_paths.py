"""DSpark on every weights path (issue 22): the drafter travels where the weights do. For each path a v1.5 stack with
speculation on renders and passes `kimi-k3 check`, no pod but the download Job (the stager) names the Hub repo or a
Hub URL, the drafter's files are verified before any worker starts, and the critical path counts its bytes."""

from __future__ import annotations

import base64
import dataclasses
import json
import re

import pytest
from conftest import by_kind, env_of, main_container, render_with, workers
from support import pod_specs

from kimi_k3 import flags as argv_flags
from kimi_k3.commands.check_targets import resource_infos
from kimi_k3.graph import durations
from kimi_k3.offline import critical_path as cp
from policies import rules

REV = "1" * 40
REV2 = "2" * 40
DRAFTER = "Inferact/Kimi-K3-DSpark"
DRAFTER_BYTES = 3.56e9 * 2  # recipes/facts/speculation.yaml: ~3.56B BF16 parameters (lightseekorg/tokenspeed#879)
IMPORT = {"kind": "fsx-lustre", "fsx": {"storageCapacityGiB": 14400, "s3ImportPath": "s3://my-weights/kimi-k3/"}}
# path -> (stack, kimi-k3:storage override or None = the stack's own, node-local copy?, fetched by EC2 fetchers?)
PATHS = {
    # The default of the v1.5 stacks: EC2 fetchers fill the bucket, Mountpoint, node-local copy.
    "s3-fetchers+node-local": ("gb300-v1.5", None, True, True),
    "s3-fetchers": ("gb300-disagg-v1.5", {"kind": "s3", "nodeLocalWeights": False}, False, True),
    "fsx-s3-import+node-local": ("gb200-v1.5", IMPORT, True, False),
}
# (efs / fsx-lustre without an import and no node-local copy: tests/unit/test_dspark.py.)


def _render(path: str, rev: str = REV):
    stack, storage, _, _ = PATHS[path]
    overrides = {"serving": {"speculation": {"method": "dspark", "drafterRevision": rev}}}
    if storage is not None:
        overrides["storage"] = storage
    return render_with(stack, **overrides)


@pytest.fixture(scope="module")
def renders():
    return {path: _render(path) for path in PATHS}


def _job(r):
    (job,) = [j for j in by_kind(r.objects, "Job") if j["metadata"]["name"] == "kimi-k3-model-download"]
    return job["spec"]["template"]["spec"]["containers"][0]


def _drafter_path(path: str, rev: str = REV) -> str:
    node_local = PATHS[path][2]
    return f"/model-cache/drafter/{rev}/{DRAFTER}@{rev}" if node_local else f"/model-cache/{DRAFTER}@{rev}"


def _fetcher_user_data(r) -> list[str]:
    out = []
    for x in r.resources:
        if x["type"] == "aws:ec2/instance:Instance" and "fetcher" in x["name"]:
            out.append(base64.b64decode(x["inputs"]["userDataBase64"]).decode())
    return out


@pytest.mark.parametrize("path", PATHS)
def test_renders_and_check_passes(renders, path):
    r = renders[path]
    violations, _ = rules.run_all(r.objects, resource_infos(r.resources))
    assert violations == [], violations
    dgd = by_kind(r.objects, "DynamoGraphDeployment")[0]
    for c in workers(dgd):
        m = main_container(c)
        spec = json.loads(argv_flags.flag_value(m["args"], "--speculative-config"))
        assert (spec["method"], spec["model"]) == ("dspark", _drafter_path(path)), c["name"]
        assert env_of(m)["HF_HUB_OFFLINE"] == "1"
        assert all(v.get("readOnly") for v in m["volumeMounts"] if v["mountPath"].startswith("/model-cache")), c["name"]


@pytest.mark.parametrize("path", PATHS)
def test_only_the_stager_names_the_hub(renders, path):
    r = renders[path]
    stagers = []
    for name, pod in pod_specs(r.objects):
        text = json.dumps(pod)
        assert "huggingface.co" not in text and "hf://" not in text and "snapshot_download" not in text, name
        if DRAFTER in text.replace(f"{DRAFTER}@{REV}", ""):  # the repo id itself, not a revision-keyed local dir
            stagers.append(name)
    assert stagers == ["kimi-k3-model-download (Job)"], stagers
    # Outside the cluster only the EC2 fetchers (kind s3) fetch it: at the pinned commit, before the weights.
    fetchers = _fetcher_user_data(r)
    assert bool(fetchers) == PATHS[path][3]
    for text in fetchers:
        drafter_step = text.index(f"MODEL_REPO={DRAFTER} MODEL_REVISION={REV} PREFIX={DRAFTER}@{REV} ")
        assert drafter_step < text.index("step='fetch_checkpoint.py'; bounded python3.12"), "drafter first"
        assert text[:drafter_step].endswith("bounded env "), "under the fetchers' deadline"


@pytest.mark.parametrize("path", PATHS)
def test_the_drafter_is_verified_before_any_worker_starts(renders, path):
    r = renders[path]
    _, _, node_local, fetched = PATHS[path]
    c = _job(r)
    env, script = env_of(c), c["args"][0]
    assert (env["DRAFTER_REPO"], env["DRAFTER_REVISION"], env["DRAFTER_PATH"]) == (
        DRAFTER,
        REV,
        f"/model-cache/{DRAFTER}@{REV}",
    )
    verify = 'MODEL_REPO="$DRAFTER_REPO" MODEL_REVISION="$DRAFTER_REVISION" MODEL_PATH="$DRAFTER_PATH" python3'
    assert verify in script
    downloads = 'hf download "$DRAFTER_REPO" --revision "$DRAFTER_REVISION" --local-dir "$DRAFTER_PATH"' in script
    # Fetched by the fetchers: the Job checks their manifests of it; else it downloads and hashes it itself.
    assert (downloads, env["VERIFY_MODE"]) == ((False, "manifest") if fetched else (True, "hash"))
    assert script.index(verify) < script.index("exec python3 /scripts/verify_checkpoint.py")
    by_name = {x["name"]: x for x in r.resources}
    dgd, job = by_name["kimi-k3-serving-deployment"], by_name["kimi-k3-model-cache-download"]
    if not node_local:
        assert job["urn"] in dgd["dependsOn"]
        return
    ds = by_name["kimi-k3-serving-weights-prefetch"]
    assert ds["urn"] in dgd["dependsOn"] and job["urn"] in ds["dependsOn"]
    (obj,) = [d for d in by_kind(r.objects, "DaemonSet") if d["metadata"]["name"] == "kimi-k3-weights-prefetch"]
    containers = {x["name"]: x for x in obj["spec"]["template"]["spec"]["containers"]}
    e = env_of(containers["prefetch-drafter"])
    rev = r.blueprint.graph.model_revision
    assert (e["SOURCE"], e["MODEL_REPO"], e["MODEL_REVISION"]) == (
        f"/model-cache-remote/{DRAFTER}@{REV}",
        f"{DRAFTER}@{REV}",
        REV,
    )
    # Ready only when its copy is complete, in the weights revision's directory the workers mount at /model-cache.
    probe = containers["prefetch-drafter"]["readinessProbe"]["exec"]["command"]
    assert probe[-1].startswith(f"/node-local/{rev}/drafter/{REV}/")
    assert e["LOCAL_ROOT"] == f"/node-local/{rev}/drafter" and e["PORT"] != env_of(containers["prefetch"])["PORT"]
    policy = next(p for p in by_kind(r.objects, "NetworkPolicy") if p["metadata"]["name"] == "kimi-k3-weights-peers")
    assert {p["port"] for p in policy["spec"]["ingress"][0]["ports"]} == {8080, int(e["PORT"])}


@pytest.mark.parametrize("path", PATHS)
def test_the_critical_path_counts_the_drafters_bytes(renders, path):
    r = renders[path]
    _, _, node_local, fetched = PATHS[path]
    cfg, graph = r.blueprint.config, r.blueprint.graph
    est, plain = durations.estimates(cfg, graph), durations.estimates(cfg, dataclasses.replace(graph, drafter=None))
    assert est.drafter_bytes == pytest.approx(DRAFTER_BYTES)
    assert est.load_seconds > plain.load_seconds, "workers load the drafter too"
    job = next(x for x in r.resources if x["name"] == "kimi-k3-model-cache-download")
    seconds, what = cp.duration(job, est)
    if fetched:
        share = DRAFTER_BYTES / cfg.storage.s3.fetchers / (est.fetch_gbps * 1e9)
        assert est.fetch_seconds - plain.fetch_seconds == pytest.approx(share)
        assert cp.duration(job, plain) == (seconds, what), "the Job only checks the fetchers' manifests"
    else:
        assert "drafter 7.1 GB" in what
        assert seconds - cp.duration(job, plain)[0] == pytest.approx(DRAFTER_BYTES / (est.download_gbps * 1e9))
    if node_local:
        assert est.prefetch_seconds > plain.prefetch_seconds and "TB once" in est.prefetch_what


def test_a_changed_drafter_revision_is_a_planned_change(renders):
    """A new drafter commit: new fetchers (user data replaces them), a new download Job, new prefetch pods, new
    workers; nothing keeps the old revision's directory, and the weights' paths stay as they are."""
    old, new = renders["s3-fetchers+node-local"], _render("s3-fetchers+node-local", REV2)
    assert [t.replace(REV, REV2) for t in _fetcher_user_data(old)] == _fetcher_user_data(new)
    job_old, job_new = _job(old), _job(new)
    assert env_of(job_new)["DRAFTER_PATH"] == f"/model-cache/{DRAFTER}@{REV2}"
    assert env_of(job_old)["MODEL_PATH"] == env_of(job_new)["MODEL_PATH"]
    text_old, text_new = json.dumps(old.objects), json.dumps(new.objects)
    assert REV not in text_new
    # Nothing else changes but the digests over what did (the graph spec's, the compile cache's flag key).
    digests = re.compile(r"\b[0-9a-f]{16,64}\b")
    assert digests.sub("#", text_old.replace(REV, REV2)) == digests.sub("#", text_new)
    inst = [x for x in new.resources if x["type"] == "aws:ec2/instance:Instance" and "fetcher" in x["name"]]
    assert inst and all(x["inputs"].get("userDataReplaceOnChange") for x in inst)
