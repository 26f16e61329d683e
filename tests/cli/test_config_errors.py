"""Bad input ends the run with one message naming the key, the value and what is allowed, registering nothing."""

from __future__ import annotations

import pytest
from conftest import assert_one_clear_error

from kimi_k3.offline.synth import RenderError

CASES = {
    "unknown recipe": (
        "gb300",
        {"recipe": "gb400"},
        [
            "kimi-k3:recipe",
            "gb400",
            "allowed: gb200, gb200-disagg, gb300, gb300-disagg, gb200-v1.5, gb300-v1.5, gb300-disagg-v1.5, "
            "gb200-sglang, gb200-disagg-sglang, gb300-sglang, gb300-disagg-sglang or h200",
        ],
    ),
    "TP not in whole 4-GPU nodes": (
        "gb300",
        {"serving": {"roles": {"decode": {"tp": 6}}}},
        ["kimi-k3:serving.roles.decode.tp", "6", "multiple of 4"],
    ),
    "TP8 on GB200": (
        "gb200",
        {"serving": {"roles": {"decode": {"tp": 8}}}},
        ["kimi-k3:serving.roles.decode.tp", "8", "does not fit", "larger TP"],
    ),
    "nodeCount 1": (
        "gb300-disagg",
        {"serving": {"roles": {"prefill": {"tp": 4}}}},
        ["kimi-k3:serving.roles.prefill.tp", "4", "nodeCount 1", ">= 2"],
    ),
    "nodesPerReplica disagreeing with TP": (
        "gb300",
        {"serving": {"roles": {"decode": {"tp": 8, "nodesPerReplica": 3}}}},
        ["kimi-k3:serving.roles.decode.nodesPerReplica", "3", "tp = nodesPerReplica x 4"],
    ),
    "negative replicas": (
        "gb300-disagg",
        {"serving": {"roles": {"decode": {"replicas": -1}}}},
        ["kimi-k3:serving.roles.decode.replicas", "-1", "greater than or equal to 0"],
    ),
    "negative migration limit": (
        "gb300-disagg",
        {"serving": {"frontend": {"migrationLimit": -1}}},
        ["kimi-k3:serving.frontend.migrationLimit", "-1", "greater than or equal to 0"],
    ),
    "migration limit beyond Dynamo's u32": (
        "gb300",
        {"serving": {"frontend": {"migrationLimit": 2**32}}},
        ["kimi-k3:serving.frontend.migrationLimit", "4294967296", "less than or equal to 4294967295"],
    ),
    "migration limit through extraArgs": (
        "gb300",
        {"serving": {"frontend": {"extraArgs": {"--migration-limit": "0"}}}},
        ["kimi-k3:serving.frontend.extraArgs", "--migration-limit", "kimi-k3:serving.frontend.migrationLimit"],
    ),
    "missing HF token": (
        "gb300",
        {"hfToken": None},
        ["kimi-k3:hfToken", "not set", "pulumi config set --secret kimi-k3:hfToken"],
    ),
    "block-storage class": (
        "gb300",
        {"storage": {"storageClass": "gp3"}},
        ["kimi-k3:storage", "gp3", "not ReadWriteMany-capable"],
    ),
    "block-storage provisioner": (
        "gb300",
        {"storage": {"storageClass": "fast", "provisioner": "ebs.csi.aws.com"}},
        ["kimi-k3:storage", "fast", "ebs.csi.aws.com", "not ReadWriteMany-capable"],
    ),
    "unknown top-level key": ("gb300", {"replicas": 3}, ["kimi-k3:replicas", "unknown key"]),
    "unknown nested key": (
        "gb300",
        {"serving": {"role": {"decode": {"replicas": 1}}}},
        ["kimi-k3:serving.role", "unknown key"],
    ),
    "unknown role": (
        "gb300",
        {"serving": {"roles": {"prefill": {"replicas": 1}}}},
        ["kimi-k3:serving.roles.prefill", "allowed: decode"],
    ),
    "P:D ratio on an aggregated recipe": (
        "gb200",
        {"serving": {"pdRatio": "1:2"}},
        ["kimi-k3:serving.pdRatio", "1:2", "only for disaggregated"],
    ),
    "empty image (an empty value is a value, not malformed JSON)": (
        "gb300",
        {"serving": {"image": ""}},
        ["kimi-k3:serving.image", '""', "at least 1 character"],
    ),
    "unpinned image": (
        "gb300",
        {"serving": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"}},
        ["kimi-k3:serving.image", "latest", "pin a version"],
    ),
    "non-semver image without runtimeVersion": (
        "gb300",
        {"serving": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-dev.2"}},
        ["kimi-k3:serving.runtimeVersion", "1.5.0-dev.2", "not semver"],
    ),
    "derived flag in extraArgs": (
        "gb300",
        {"serving": {"roles": {"decode": {"extraArgs": {"--tensor-parallel-size": "4"}}}}},
        ["kimi-k3:serving.roles.decode.extraArgs", "--tensor-parallel-size", "kimi-k3:serving.roles.<role>.tp"],
    ),
    "cluster mode": (
        "gb300",
        {"cluster": {"mode": "kind"}},
        ["kimi-k3:cluster.mode", "kind", "allowed: eks, gke, existing or render"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_one_clear_error_and_nothing_registered(name):
    assert_one_clear_error(*CASES[name])


def test_token_set_without_secret_is_rejected():
    from conftest import ROOT, stack_config

    from kimi_k3.offline.synth import render_config

    config, secrets = stack_config("gb300", hfToken="hf_abc")
    secrets.discard("kimi-k3:hfToken")
    with pytest.raises(RenderError, match=r"kimi-k3:hfToken: stored in plaintext.*--secret") as info:
        render_config("gb300", config, secrets, ROOT)
    assert "hf_abc" not in str(info.value)
    assert info.value.registered == []


@pytest.mark.parametrize("value", ["3", -1, True, None])
def test_bad_migration_limit_in_recipe_data_names_file_key_value(monkeypatch, value):
    from conftest import render_with

    from kimi_k3 import data
    from kimi_k3.graph import build as graph

    real = data.recipe_file
    monkeypatch.setattr(
        graph,
        "recipe_file",
        lambda name: {"migrationLimit": value} if name == "defaults/request-migration.yaml" else real(name),
    )
    with pytest.raises(RenderError) as info:
        render_with("gb300-disagg")
    message = str(info.value)
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert f"recipes/defaults/request-migration.yaml: migrationLimit = {value!r}: allowed: an integer from 0" in message
    assert info.value.registered == []
