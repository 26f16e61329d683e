"""Bad input, through the CLI as a user types it: one clear error naming the file or key and the value (and what
is allowed), a non-zero exit, no traceback, nothing registered and nothing written. Each class has several
examples; the program's own `__main__.py` path (what `pulumi up` runs) is checked for the stack-file cases."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml
from conftest import ROOT

from kimi_k3 import data
from kimi_k3.commands.main import main
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import StackError, read_stack_config
from kimi_k3.errors import UserError
from kimi_k3.facts import aws as facts_aws
from kimi_k3.facts import model, platforms
from kimi_k3.facts.platforms import load_platforms
from kimi_k3.graph.build import build_graph
from kimi_k3.graph.topology import allowed_tps
from kimi_k3.offline.synth import render_stack

PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "components")
RAW_REGEX = ("^", "\\d", "\\w", "[0-9", "$")


# ------------------------------------------------------------------------------------- stack-file mutations
def append(snippet: str) -> Callable[[str], str]:
    return lambda text: text.rstrip("\n") + "\n" + snippet


def replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, f"{old!r} not in the stack file"
        return text.replace(old, new)

    return edit


@dataclass
class StackCase:
    base: str  # the shipped stack the bad one is derived from
    edit: Callable[[str], str]  # what the user got wrong
    expect: list[str]  # fragments the one message must hold (key, value, what is allowed)
    commands: tuple[str, ...] = ("render", "check", "plan")


STACK_CASES = {
    # TP decided in one place, with a truthful list of what is allowed (tp 12 works, so it is listed).
    "tp not dividing the heads": StackCase(
        "gb300",
        append("  kimi-k3:serving:\n    roles:\n      decode:\n        tp: 20\n"),
        ["kimi-k3:serving.roles.decode.tp = 20", "allowed on gb300: 8, 12, 16, 24, 32, 48"],
    ),
    "tp not whole nodes": StackCase(
        "gb300",
        append("  kimi-k3:serving:\n    roles:\n      decode:\n        tp: 6\n"),
        ["kimi-k3:serving.roles.decode.tp = 6", "allowed on gb300: 8, 12"],
    ),
    "tp beyond one NVLink domain": StackCase(
        "gb300-disagg",
        append("  kimi-k3:serving:\n    roles:\n      prefill:\n        tp: 76\n"),
        ["kimi-k3:serving.roles.prefill.tp = 76", "19 nodes", "allowed on gb300: 8"],
    ),
    "tp too small to fit": StackCase(
        "gb200",
        append("  kimi-k3:serving:\n    roles:\n      decode:\n        tp: 8\n"),
        ["kimi-k3:serving.roles.decode.tp = 8", "does not fit", "allowed on gb200: 12, 16"],
    ),
    # YAML syntax errors name the file and the line.
    "stack file: unclosed bracket": StackCase(
        "gb300",
        replace("availabilityZones: [us-east-1a, us-east-1b]", "availabilityZones: [us-east-1a, us-east-1b"),
        ["Pulumi.bad.yaml line", "not valid YAML"],
    ),
    "stack file: tab indentation": StackCase(
        "gb300", replace("    mode: eks", "\tmode: eks"), ["Pulumi.bad.yaml line", "not valid YAML"]
    ),
    "stack file: not a mapping": StackCase(
        "gb300",
        lambda text: "- kimi-k3:recipe\n- gb300\n",
        ["Pulumi.bad.yaml", "allowed: a mapping with a `config:` mapping"],
    ),
    # A misspelt namespace would drop a whole block (the storage kind, and with it the fetch at t=0).
    "namespace typo kimik3": StackCase(
        "gb300",
        replace("kimi-k3:storage:", "kimik3:storage:"),
        ["kimik3:storage", "unknown config namespace 'kimik3'", "did you mean 'kimi-k3'", "allowed: kimi-k3"],
    ),
    "namespace typo kimi_k3": StackCase(
        "gb300",
        replace("kimi-k3:pricing:", "kimi_k3:pricing:"),
        ["kimi_k3:pricing", "unknown config namespace 'kimi_k3'", "allowed: kimi-k3"],
    ),
    # YAML turns unquoted numbers-like text into numbers: say so.
    "kubernetesVersion 1.30 unquoted": StackCase(
        "gb300",
        replace('kubernetesVersion: "1.34"', "kubernetesVersion: 1.30"),
        ["kimi-k3:cluster.kubernetesVersion = 1.3", "YAML read", "1.30 becomes 1.3", "quote it"],
    ),
    "revision as a number": StackCase(
        "gb300",
        append("  kimi-k3:model:\n    revision: 1234567\n"),
        ["kimi-k3:model.revision = 1234567", "YAML read", "quote it"],
    ),
    # A role with no replicas is silently an outage.
    "0 decode replicas": StackCase(
        "gb300-disagg",
        append("  kimi-k3:serving:\n    roles:\n      decode:\n        replicas: 0\n"),
        ["kimi-k3:serving.roles.decode.replicas = 0", "at least 1 replica", "allowed: 1 or more"],
    ),
    "pdRatio 1:0": StackCase(
        "gb300-disagg",
        append("  kimi-k3:serving:\n    pdRatio: '1:0'\n"),
        ["kimi-k3:serving.pdRatio = '1:0'", "decode has 0", "allowed: 1 or more"],
    ),
    "0 workers in an aggregated stack": StackCase(
        "gb200",
        append("  kimi-k3:serving:\n    roles:\n      decode:\n        replicas: 0\n"),
        ["kimi-k3:serving.roles.decode.replicas = 0", "allowed: 1 or more"],
    ),
    # Patterns are explained in words, never as a regex.
    "namespace not a DNS label": StackCase(
        "gb300",
        append("  kimi-k3:serving:\n    namespace: Kimi_K3\n"),
        ['kimi-k3:serving.namespace = "Kimi_K3"', "allowed: a DNS label"],
    ),
    "reservation id malformed": StackCase(
        "gb300",
        replace(
            "      capacityType: CAPACITY_BLOCK",
            "      capacityType: CAPACITY_BLOCK\n      capacityReservationId: r-123",
        ),
        ['capacityReservationId = "r-123"', "allowed: cr- then 8-17"],
    ),
    "shared memory not a quantity": StackCase(
        "gb300",
        append("  kimi-k3:serving:\n    roles:\n      decode:\n        sharedMemorySize: 16GB\n"),
        ['kimi-k3:serving.roles.decode.sharedMemorySize = "16GB"', "allowed: a Kubernetes quantity"],
    ),
    # The SLA planner (kimi-k3:serving.autoscaling): targets, a budget beyond the Capacity Block, minimums over it.
    "autoscaling without targets": StackCase(
        "gb300-disagg",
        append("  kimi-k3:serving:\n    autoscaling:\n      enabled: true\n"),
        ["Pulumi.bad.yaml", "kimi-k3:serving.autoscaling.ttftMs: required", "allowed: a target in milliseconds"],
    ),
    "autoscaling budget above the block": StackCase(
        "gb300-disagg",
        append("  kimi-k3:serving:\n    autoscaling: {enabled: true, ttftMs: 30000, itlMs: 50, maxGpuBudget: 80}\n"),
        ["Pulumi.bad.yaml", "kimi-k3:serving.autoscaling.maxGpuBudget = 80", "Capacity Block", "allowed: 1..72"],
    ),
    "autoscaling minimums above the budget": StackCase(
        "gb300-disagg",
        append(
            "  kimi-k3:serving:\n    autoscaling: {enabled: true, ttftMs: 30000, itlMs: 50, "
            "maxGpuBudget: 24, minReplicas: {decode: 3}}\n"
        ),
        ["Pulumi.bad.yaml", "kimi-k3:serving.autoscaling.minReplicas", "32 GPUs", "allowed: minimums within 24 GPUs"],
    ),
    "unknown nested key, misspelt": StackCase(
        "gb300",
        replace("ultraServerNodes:", "ultraServerNode:"),
        ["kimi-k3:cluster.gpuNodes.ultraServerNode", "unknown key", "did you mean 'ultraServerNodes'"],
    ),
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project (links to its program and components) to hold bad stack files; cwd is there."""
    proj = tmp_path / "project"
    proj.mkdir()
    for name in PROJECT_FILES:
        (proj / name).symlink_to(ROOT / name)
    for stack_file in ROOT.glob("Pulumi.*.yaml"):
        (proj / stack_file.name).write_text(stack_file.read_text())
    monkeypatch.chdir(proj)
    return proj


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_clear(code: int, err: str, expect: list[str]) -> None:
    assert code not in (0, None), f"exit status {code}: {err}"
    assert "Traceback" not in err and "Error:" not in err.split(":", 1)[0], err
    for part in expect:
        assert part in err, f"{part!r} not in {err!r}"
    assert 1 <= len(err.strip().splitlines()) <= 2, err
    assert not any(r in err for r in RAW_REGEX), f"a raw regex in {err!r}"
    assert "None" not in err.replace("(not set)", ""), err


@pytest.mark.parametrize("name", list(STACK_CASES))
def test_bad_stack_file(name, project, tmp_path, capsys):
    case = STACK_CASES[name]
    text = (project / f"Pulumi.{case.base}.yaml").read_text()
    (project / "Pulumi.bad.yaml").write_text(case.edit(text))
    out_dir = tmp_path / "out"
    for command in case.commands:
        argv = {"render": ["render", "bad", "--out", str(out_dir)], "check": ["check", "bad"], "plan": ["plan", "bad"]}[
            command
        ]
        code, out, err = run_cli(argv, capsys)
        assert_clear(code, err, case.expect)
        assert not out_dir.exists(), f"{command} wrote {out_dir}"
    # What `pulumi up` runs: __main__.py under the engine, stopped by one RunError before anything registers.
    with pytest.raises(StackError) as info:
        render_stack("bad", project)
    assert getattr(info.value, "registered", []) == []
    assert all(part in str(info.value) for part in case.expect), str(info.value)


def test_project_files_the_fixture_links_exist():
    assert all((ROOT / name).exists() for name in PROJECT_FILES)


# ------------------------------------------------------------------------------------------- recipe files
@pytest.fixture
def recipes(tmp_path, monkeypatch):
    """A private copy of recipes/ that the code reads instead (the parse cache cleared around the test)."""
    copy_dir = tmp_path / "recipes"
    copy_dir.mkdir()
    for f in data.RECIPES.glob("*/*.yaml"):  # recipes/<kind>/<name>.yaml (recipes/README.md)
        (copy_dir / f.relative_to(data.RECIPES)).parent.mkdir(exist_ok=True)
        (copy_dir / f.relative_to(data.RECIPES)).write_text(f.read_text())
    caches = [data._parsed, model.load_model_facts, platforms.load_platforms, facts_aws.load_aws_facts]
    for cached in caches:
        cached.cache_clear()
    monkeypatch.setattr(data, "RECIPES", copy_dir)
    yield copy_dir
    for cached in caches:
        cached.cache_clear()


@pytest.mark.parametrize(
    "recipe, edit, stack",
    [
        ("profiles/gb300.yaml", replace("roles:", "roles: [\n"), "gb300"),
        ("facts/model.yaml", lambda text: text + "\n  bad: [unclosed\n", "gb300-disagg"),
    ],
)
def test_recipe_yaml_syntax_error_names_the_file(recipe, edit, stack, recipes, project, capsys):
    (recipes / recipe).write_text(edit((recipes / recipe).read_text()))
    for argv in (["render", stack, "--out", str(project / "out")], ["plan", stack]):
        code, _, err = run_cli(argv, capsys)
        assert_clear(code, err, [f"recipes/{recipe} line", "not valid YAML"])
    assert not (project / "out").exists()
    with pytest.raises(StackError) as info:  # inside the program: a RunError, nothing registered
        render_stack(stack, project)
    assert f"recipes/{recipe}" in str(info.value) and getattr(info.value, "registered", []) == []


# ---------------------------------------------------------------------------------------- TP: one truth
@pytest.mark.parametrize("stack", ["gb200", "gb300", "gb300-disagg"])
def test_allowed_tp_list_is_exactly_what_the_graph_accepts(stack):
    """Every TP the error message offers renders, and every other TP is refused (the list is the truth)."""
    stack_file = read_stack_config(stack, ROOT)
    cfg = parse_stack_config(stack_file.config, stack_file.secrets)
    role = "decode"
    platform = load_platforms()["gb200" if stack.startswith("gb200") else "gb300"]
    graph = build_graph(stack, cfg)
    r = next(r for r in graph.roles if r.key == role)
    offered = allowed_tps(platform, r.gpu_memory_utilization, r.kv_cache_dtype, r.max_model_len)
    accepted = []
    for tp in range(1, 80):
        raw = dict(stack_file.config)
        raw["kimi-k3:serving"] = json.dumps({"roles": {role: {"tp": tp}}})
        try:
            build_graph(stack, parse_stack_config(raw, stack_file.secrets))
            accepted.append(tp)
        except UserError as err:
            assert f"tp = {tp}:" in str(err) and "allowed" in str(err)
    assert accepted == offered and accepted


# ------------------------------------------------------------------------------------------ check inputs
def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "make_target, expect",
    [
        (lambda d: _write(d / "empty.yaml", ""), ["empty.yaml", "no Kubernetes objects", "allowed"]),
        (lambda d: _write(d / "list.yaml", "- 1\n- 2\n"), ["list.yaml", "no Kubernetes objects"]),
        (
            lambda d: _write(d / "values.yaml", "replicas: 3\nimage: x\n"),
            ["values.yaml", "no Kubernetes objects", "without apiVersion/kind"],
        ),
        (lambda d: _write(d / "broken.yaml", "kind: Pod\n  metadata: x\n"), ["broken.yaml line", "not valid YAML"]),
        (lambda d: str(d / "nope.yaml.yaml"), ["nope.yaml.yaml", "no such file", "allowed: a YAML file"]),
        (lambda d: str(d / "missing-dir") + "/", ["missing-dir", "no such file or directory"]),
        (lambda d: str(d), ["not a render directory (no manifests.yaml)"]),
        (lambda d: "gb300-disag", ["no stack 'gb300-disag'", "did you mean 'gb300-disagg'", "allowed: gb200"]),
        (lambda d: "Pulumi.gb300.yaml", ["Pulumi.gb300.yaml", "stack file", "kimi-k3 check gb300"]),
    ],
)
def test_check_bad_target(make_target, expect, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(["check", make_target(tmp_path)], capsys)
    assert_clear(code, err, expect)
    assert out == ""


POLICY_CONFIG_CASES = {
    "misspelt rule": (
        "startup-budget-covers-loads:\n  min_startup_seconds: 60\n",
        [
            "startup-budget-covers-loads",
            "unknown rule",
            "did you mean 'startup-budget-covers-load'",
            "allowed: all, tp-spans-whole-nodes",
        ],
    ),
    "another misspelt rule": (
        '{"graph-fits-nodepool": {"gpu_node_pool_nodes": 4}}',
        ["graph-fits-nodepool", "did you mean 'graph-fits-node-pool'"],
    ),
    "unknown setting": (
        "startup-budget-covers-load:\n  min_startup_secs: 60\n",
        [
            "startup-budget-covers-load.min_startup_secs",
            "unknown setting",
            "allowed: enforcementLevel, min_startup_seconds",
        ],
    ),
    "wrong type": (
        "graph-fits-node-pool:\n  gpu_node_pool_nodes: six\n",
        ['graph-fits-node-pool.gpu_node_pool_nodes = "six"', "allowed: a whole number >= 0"],
    ),
    "negative": (
        "graph-fits-node-pool:\n  gpu_node_pool_nodes: -1\n",
        ["graph-fits-node-pool.gpu_node_pool_nodes = -1", "allowed: a whole number >= 0"],
    ),
    "bad level": (
        "images-pinned: strict\n",
        ['images-pinned.enforcementLevel = "strict"', "allowed: advisory, mandatory"],
    ),
    "syntax error": ("images-pinned: [\n", ["line", "not valid YAML"]),
    "not a mapping": ("- images-pinned\n", ["allowed: a mapping of rule name"]),
}


@pytest.mark.parametrize("name", list(POLICY_CONFIG_CASES))
def test_check_bad_policy_config(name, tmp_path, capsys, monkeypatch):
    text, expect = POLICY_CONFIG_CASES[name]
    config = tmp_path / "policy.yaml"
    config.write_text(text)
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(["check", "--config", str(config), str(ROOT / "tests" / "missing-target.yaml")], capsys)
    assert_clear(code, err, ["--config", str(config), *expect])  # the config is read before any target


def test_check_missing_policy_config(tmp_path, capsys):
    code, _, err = run_cli(["check", "--config", str(tmp_path / "nope.yaml"), "gb300"], capsys)
    assert_clear(code, err, [f"--config {tmp_path / 'nope.yaml'}", "no such file"])


def test_policy_config_levels_are_honoured(tmp_path, capsys, monkeypatch):
    """A valid config does what it says: `disabled` removes a failing rule, `advisory` stops it failing the run."""
    monkeypatch.chdir(ROOT)
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "busybox:latest"}]},
            }
        )
    )
    assert run_cli(["check", str(deploy)], capsys)[0] == 1
    for level, status in (("disabled", 0), ("advisory", 0), ("mandatory", 1)):
        (tmp_path / "c.yaml").write_text(f"images-pinned: {level}\n")
        code, out, _ = run_cli(["check", "--config", str(tmp_path / "c.yaml"), str(deploy)], capsys)
        assert code == status, (level, out)
        assert any(line.startswith("images-pinned  ") for line in out.splitlines()) == (level != "disabled"), out


# --------------------------------------------------------------------------------------- CLI flags, outputs
@pytest.mark.parametrize(
    "argv, expect",
    [
        (
            ["plan", "gb300", "--output-tokens-per-second", "-5"],
            ["--output-tokens-per-second", "-5", "allowed: a number > 0"],
        ),
        (
            ["plan", "gb300", "--output-tokens-per-second", "0"],
            ["--output-tokens-per-second", "0", "allowed: a number > 0"],
        ),
        (
            [
                "plan",
                "--gpu",
                "gb300",
                "--tp",
                "8",
                "--instance-hour-usd",
                "-1",
                "--price-source",
                "x",
                "--price-as-of",
                "2026-10",
            ],
            ["--instance-hour-usd", "-1", "allowed: a number > 0"],
        ),
        (["plan", "--gpu", "gb300", "--tp", "-8"], ["--tp", "-8", "allowed: 1 or more"]),
        (["plan", "--gpu", "gb300", "--tp", "8", "--replicas", "0"], ["--replicas", "0", "allowed: 1 or more"]),
        (
            ["plan", "--gpu", "gb300", "--tp", "8", "--gpu-memory-utilization", "1.5"],
            ["--gpu-memory-utilization", "1.5", "(0, 1]"],
        ),
        (
            ["plan", "--gpu", "gb300", "--tp", "8", "--max-model-len", "1M"],
            ["--max-model-len", "'1M'", "not a whole number"],
        ),
        (
            ["plan", "--gpu", "gb300", "--tp", "8", "--kv-budget-gib", "nan"],
            ["--kv-budget-gib", "'nan'", "not a finite number"],
        ),
        (["plan", "--gpu", "gb300", "--tp", "20"], ["--tp 20", "allowed: 4, 8, 12, 16, 24, 32, 48"]),
        (["plan", "--gpu", "gb301", "--tp", "8"], ["--gpu 'gb301'", "allowed: b200, gb200, gb300, h200"]),
        (["render", "gb300-disag"], ["no stack 'gb300-disag'", "did you mean 'gb300-disagg'"]),
        (["render", "Pulumi.gb300.yaml"], ["'Pulumi.gb300.yaml' is a stack file", "give the stack name: gb300"]),
        (
            ["plan", "nope"],
            [
                "no stack 'nope'",
                "allowed: gb200, gb200-disagg, gb200-v1.5, gb300, gb300-disagg, gb300-disagg-v1.5, gb300-v1.5",
            ],
        ),
    ],
)
def test_bad_flag_or_argument(argv, expect, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(argv, capsys)
    assert_clear(code, err, expect)
    assert out == ""


@pytest.mark.parametrize(
    "make_path, expect",
    [
        (lambda d: d / "missing" / "plan.png", ["--plot", "directory", "does not exist"]),
        (
            lambda d: d / "plan.txt",
            ["--plot", "plan.txt", "unsupported file type '.txt'", "allowed: a file name ending in .png"],
        ),
        (lambda d: d / "plan", ["--plot", "unsupported file type '(none)'"]),
        (lambda d: d, ["--plot", "unsupported file type"]),
    ],
)
def test_plot_path_checked_before_anything_is_written(make_path, expect, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = sorted(tmp_path.rglob("*"))
    code, out, err = run_cli(["plan", "gb300", "--plot", str(make_path(tmp_path))], capsys)
    assert_clear(code, err, expect)
    assert out == "" and sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "make_out, expect",
    [
        (lambda d: _write(d / "a-file", "") + "/out", ["--out", "a-file", "is a file, not a directory"]),
        (lambda d: _write(d / "manifests", ""), ["--out", "manifests", "exists and is not a directory"]),
    ],
)
def test_render_out_not_writable(make_out, expect, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = make_out(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run_cli(["render", "gb300", "--out", out], capsys)
    assert_clear(code, err, expect)
    assert sorted(tmp_path.rglob("*")) == before


def test_broken_pipe_is_quiet():
    """`kimi-k3 plan gb300 | head -n 1`: the reader leaves early; no traceback, no 'Exception ignored'."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kimi_k3", "plan", "gb300"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert first.startswith(b"Kimi K3 plan")
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err


# ---------------------------------------------------------------------------------- rule messages: no None
def test_rule_messages_never_say_none(rendered, tmp_path, capsys, monkeypatch):
    """A disaggregated graph missing its flags and names: findings say `(not set)` / `(unnamed)`, never None."""
    monkeypatch.chdir(ROOT)
    objects = copy.deepcopy(rendered["gb300-disagg"].objects)
    dgd = next(o for o in objects if o["kind"] == "DynamoGraphDeployment")
    for comp in dgd["spec"]["components"]:
        for c in comp["podTemplate"]["spec"]["containers"]:
            args = c.get("args") or []
            for flag in ("--disaggregation-mode", "--kv-transfer-config", "--served-model-name"):
                if flag in args:
                    i = args.index(flag)
                    del args[i : i + 2]
        if comp.get("type") == "prefill":
            comp["name"] = ""  # empty, not absent: the CRD requires the key (an absent one is a shape violation)
    target = tmp_path / "deploy.yaml"
    target.write_text(yaml.safe_dump_all(objects))
    code, out, err = run_cli(["check", str(target)], capsys)
    assert code == 1
    assert "(not set)" in out and "(unnamed)" in out
    assert "None" not in out, out
