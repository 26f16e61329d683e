"""gke mode's typed config and pure plan: bad input is one message naming the key, value and what is allowed; the
node facts the cloud hands the graph are what NVIDIA/aicr's A4X Max / A4X wiring needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.gcp import plan as gke
from policies.rules.engine_form import resource_info
from policies.rules.gke_pool import gke_gpu_pool

ROOT = Path(__file__).resolve().parents[2]


def config(stack="gke-gb300", cluster=None, storage=None):
    sf = read_stack_config(stack, ROOT)
    raw = dict(sf.config)
    c = json.loads(raw["kimi-k3:cluster"])
    if cluster:
        c = cluster(c) or c
    raw["kimi-k3:cluster"] = json.dumps(c)
    if storage is not None:
        raw["kimi-k3:storage"] = json.dumps(storage)
    return raw, sf.secrets


def parse(**kw):
    raw, secrets = config(**kw)
    return parse_stack_config(raw, secrets)


def test_gke_stack_parses_with_offline_placeholders():
    cfg = parse()
    assert cfg.cluster.mode == "gke" and cfg.storage.resolved_kind == "gcs"
    assert cfg.storage.resolved_compile_cache("gke") == "filestore"


@pytest.mark.parametrize(
    "storage, key, allowed",
    [
        ({"kind": "s3"}, "kimi-k3:storage.kind = 's3'", "allowed: gcs"),
        ({"kind": "gcs", "compileCache": "efs"}, "kimi-k3:storage.compileCache = 'efs'", "allowed here: none"),
    ],
)
def test_aws_storage_in_gke_mode_is_refused(storage, key, allowed):
    with pytest.raises(ConfigError) as info:
        parse(storage=storage)
    assert key in str(info.value) and allowed in str(info.value)


def test_gcs_outside_gke_is_refused():
    with pytest.raises(ConfigError) as info:
        parse(stack="gb300", storage={"kind": "gcs"})
    assert "kimi-k3:storage.kind = 'gcs'" in str(info.value) and "cluster.mode gke" in str(info.value)


def test_gke_block_in_eks_mode_is_refused():
    with pytest.raises(ConfigError) as info:
        parse(stack="gb300", cluster=lambda c: {**c, "gke": {"region": "us-central1"}})
    assert "kimi-k3:cluster.gke" in str(info.value) and "mode gke" in str(info.value)


def test_control_plane_open_to_the_internet_is_refused():
    def open_all(c):
        c["gke"]["authorizedNetworks"] = ["0.0.0.0/0"]

    with pytest.raises(ConfigError) as info:
        parse(cluster=open_all)
    assert "0.0.0.0/0" in str(info.value) and "authorizedNetworks" in str(info.value)


def test_per_user_value_missing_names_its_key():
    raw, secrets = config()
    c = json.loads(raw["kimi-k3:cluster"])
    del c["gke"]["projectNumber"]
    raw["kimi-k3:cluster"] = json.dumps(c)
    with pytest.raises(ConfigError) as info:
        parse_stack_config(raw, secrets)
    assert "kimi-k3:cluster.gke.projectNumber: required" in str(info.value)


def test_a4x_max_node_facts_select_the_profile_and_claim_dranet():
    cfg = parse()
    p = gke.gpu_node_plan(cfg, "gb300", 4)
    f = gke.node_facts(p, weights_on_gcs=True)
    assert dict(f.gpu_node_labels)["gke.networks.io/accelerator-network-profile"] == "auto"
    ((claim),) = f.device_claims
    assert (claim.device_class, claim.count) == ("mrdma.google.com", 8)  # AICR "all-mrdma"
    assert dict(f.weights_pod_annotations) == {"gke-gcsfuse/volumes": "true"}


def test_a4x_node_facts_use_multi_networking():
    cfg = parse(stack="gke-gb200")
    f = gke.node_facts(gke.gpu_node_plan(cfg, "gb200", 4), weights_on_gcs=True)
    assert f.device_claims == ()
    nets = json.loads(dict(f.gpu_pod_annotations)["networking.gke.io/interfaces"])
    assert [n["network"] for n in nets] == ["default", "gvnic-1", "rdma-0", "rdma-1", "rdma-2", "rdma-3"]


def test_recipe_larger_than_the_nvlink_domain_is_refused():
    cfg = parse()
    with pytest.raises(ConfigError) as info:
        gke.gpu_node_plan(cfg, "gb300", 19)
    assert "kimi-k3:cluster.gke.gpuNodes.reservationNodes = 18" in str(info.value) and "at most 18" in str(info.value)


def test_gke_gpu_pool_size_reaches_graph_fits_node_pool():
    gpu = {"nodeCount": 6.0, "nodeConfig": {"guestAccelerators": [{"type": "nvidia-gb300", "count": 4}]}}
    info = resource_info("gcp:container/nodePool:NodePool", "gpu", gpu, False, None)
    assert gke_gpu_pool(info.type, info.aws_inputs) == (6, None)
    system = {"nodeCount": 2.0, "nodeConfig": {"machineType": "n2-standard-16"}}
    assert gke_gpu_pool("gcp:container/nodePool:NodePool", system) == (None, None)
