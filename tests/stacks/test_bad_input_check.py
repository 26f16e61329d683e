"""Bad input to the gate (issue 25, classes 1 and 4), through the CLI as a user types it.

Class 1: `kimi-k3 check` on malformed objects ends in one violation per problem naming the file, the document,
the JSON path and the value (or one error naming the file), a non-zero exit, no traceback, nothing written.
Class 4: secrets and per-user values are refused by the offline commands CI runs (`render`, `check`), naming the
file and key but never a secret's value, and `render` writes nothing when it refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from conftest import ROOT
from support import render_stack_once as render_stack  # one render per stack per session
from support import sweep

from kimi_k3.commands.main import main
from policies import rules
from policies.rules import base

STACK = "gb300-disagg"
SHAPE = "object-shape-valid"  # the rule that reports malformed objects (policies/rules/base.py)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture(scope="module")
def good() -> list[dict]:
    """A shipped stack's rendered objects: what every malformed case below is derived from."""
    return render_stack(STACK, ROOT).objects


def of_kind(objects: list[dict], kind: str) -> dict:
    return next(o for o in objects if o["kind"] == kind)


def component(objects: list[dict], name: str) -> dict:
    """A graph component by its name or type (Frontend, decode, prefill)."""
    return next(
        c for c in of_kind(objects, "DynamoGraphDeployment")["spec"]["components"] if name in (c["name"], c.get("type"))
    )


def main_of(objects: list[dict], name: str) -> dict:
    return component(objects, name)["podTemplate"]["spec"]["containers"][0]


def job(objects: list[dict]) -> dict:
    return of_kind(objects, "Job")


def dump(objects: list[Any]) -> str:  # libyaml's emitter: the file is input to check, its layout is not asserted
    return yaml.dump_all(objects, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def edit(fn: Callable[[list[dict]], Any]) -> Callable[[list[dict]], str]:
    """A case: change a copy of the good objects, dump them as one multi-document file."""

    def make(good: list[dict]) -> str:
        objects = copy.deepcopy(good)
        fn(objects)
        return dump(objects)

    return make


def dgd_path(objects: list[dict], name: str) -> str:
    index = of_kind(objects, "DynamoGraphDeployment")["spec"]["components"].index(component(objects, name))
    return f"spec.components[{index}]"


def doc_no(objects: list[dict], kind: str) -> str:
    return f"document {[o['kind'] for o in objects].index(kind) + 1}"


# (make the file's text from the good objects, fragments the output must hold: file, document, path, value)
CLASS_1 = {
    "container env as a mapping (DGD)": (
        edit(lambda o: main_of(o, "decode").update(env={"UCX_TLS": "rc", "NCCL_DEBUG": "INFO"})),
        lambda o: [
            doc_no(o, "DynamoGraphDeployment"),
            f"{dgd_path(o, 'decode')}.podTemplate.spec.containers[0].env",
            "a mapping {'UCX_TLS': 'rc'",
            "allowed: a list of mappings (name, value, valueFrom)",
        ],
    ),
    "container env as a mapping (Job)": (
        edit(lambda o: job(o)["spec"]["template"]["spec"]["containers"][0].update(env={"A": "b"})),
        lambda o: [doc_no(o, "Job"), "spec.template.spec.containers[0].env", "a mapping {'A': 'b'}"],
    ),
    "containers as strings (DGD)": (
        edit(lambda o: component(o, "Frontend")["podTemplate"]["spec"].update(containers=["main"])),
        lambda o: [
            f"{dgd_path(o, 'Frontend')}.podTemplate.spec.containers[0]",
            "a string 'main'",
            "allowed: a mapping (name, image",
        ],
    ),
    "containers as one string (Job)": (
        edit(lambda o: job(o)["spec"]["template"]["spec"].update(containers="python:3.12")),
        lambda o: ["spec.template.spec.containers", "a string 'python:3.12'", "allowed: a list of mappings"],
    ),
    "components as a string": (
        edit(lambda o: of_kind(o, "DynamoGraphDeployment")["spec"].update(components="Frontend, decode")),
        lambda o: [
            doc_no(o, "DynamoGraphDeployment"),
            "spec.components",
            "a string 'Frontend, decode'",
            "allowed: a list of mappings (name, type",
        ],
    ),
    "components as a list of names": (
        edit(lambda o: of_kind(o, "DynamoGraphDeployment")["spec"].update(components=["Frontend", "decode"])),
        lambda o: ["spec.components[1]", "a string 'decode'"],
    ),
    "kind: 5": (
        edit(lambda o: job(o).update(kind=5)),
        lambda o: [doc_no(o, "Job"), "kind: a whole number 5", "allowed: a string"],
    ),
    "kind lower case": (
        edit(lambda o: job(o).update(kind="job")),
        lambda o: [doc_no(o, "Job"), "kind: a string 'job'", "allowed: a CamelCase kind"],
    ),
    "apiVersion missing": (
        edit(lambda o: job(o).pop("apiVersion")),
        lambda o: [doc_no(o, "Job"), "(Job/", "apiVersion: missing; required: a string"],
    ),
    "apiVersion a number": (
        edit(lambda o: job(o).update(apiVersion=1)),
        lambda o: [doc_no(o, "Job"), "apiVersion: a whole number 1"],
    ),
    "metadata a string": (
        edit(lambda o: job(o).update(metadata="kimi-k3-download")),
        lambda o: [doc_no(o, "Job"), "metadata: a string 'kimi-k3-download'", "allowed: a mapping (name"],
    ),
    "label value a number": (
        edit(lambda o: job(o)["metadata"].update(labels={"version": 1})),
        lambda o: ["metadata.labels.version: a whole number 1", "allowed: a string"],
    ),
    "env value a number": (
        edit(lambda o: main_of(o, "decode")["env"].append({"name": "NCCL_NVLS_ENABLE", "value": 1})),
        lambda o: [f"{dgd_path(o, 'decode')}.podTemplate.spec.containers[0].env[", "value: a whole number 1"],
    ),
    "env entry without a name": (
        edit(lambda o: main_of(o, "decode")["env"].append({"value": "x"})),
        lambda o: [".env[", "].name: missing; required: a string"],
    ),
    "args one string": (
        edit(lambda o: main_of(o, "decode").update(args="--tensor-parallel-size 8")),
        lambda o: [".containers[0].args", "a string '--tensor-parallel-size 8'", "allowed: a list of a string"],
    ),
    "replicas a word": (
        edit(lambda o: component(o, "decode").update(replicas="two")),
        lambda o: [f"{dgd_path(o, 'decode')}.replicas: a string 'two'", "allowed: a whole number"],
    ),
    "nodeCount quoted": (
        edit(lambda o: component(o, "decode")["multinode"].update(nodeCount="2")),
        lambda o: [f"{dgd_path(o, 'decode')}.multinode.nodeCount: a string '2'", "allowed: a whole number"],
    ),
    "resource limits a list": (
        edit(lambda o: main_of(o, "decode")["resources"].update(limits=["nvidia.com/gpu=4"])),
        lambda o: [".resources.limits: a list", "allowed: a mapping of name -> a quantity"],
    ),
    "volumeMount without mountPath": (
        edit(lambda o: main_of(o, "decode")["volumeMounts"][0].pop("mountPath")),
        lambda o: [".volumeMounts[0].mountPath: missing"],
    ),
    "startup probe threshold quoted": (
        edit(lambda o: main_of(o, "decode")["startupProbe"].update(failureThreshold="720")),
        lambda o: [".startupProbe.failureThreshold: a string '720'", "allowed: a whole number"],
    ),
    "podTemplate a list": (
        edit(lambda o: component(o, "prefill").update(podTemplate=[])),
        lambda o: [f"{dgd_path(o, 'prefill')}.podTemplate: a list []"],
    ),
    "document a list": (
        lambda g: dump([*g, ["apiVersion: v1", "kind: Pod"]]),
        lambda o: [f"document {len(o) + 1}", "(document): a list", "allowed: a Kubernetes object"],
    ),
    "document a scalar": (
        lambda g: dump([g[0], "kind: Pod", *g[1:]]),
        lambda o: ["document 2", "(document): a string 'kind: Pod'"],
    ),
    "List with items a string": (
        lambda g: dump([*g, {"apiVersion": "v1", "kind": "List", "items": "none"}]),
        lambda o: [f"document {len(o) + 1}", "items: a string 'none'", "allowed: a list of Kubernetes objects"],
    ),
    "List item malformed": (
        lambda g: dump([{"apiVersion": "v1", "kind": "List", "items": [g[0], {"apiVersion": "v1", "kind": 7}]}]),
        lambda o: ["document 1 items[1]", "kind: a whole number 7"],
    ),
    "metadata without name": (
        edit(lambda o: job(o)["metadata"].pop("name")),
        lambda o: [doc_no(o, "Job"), "metadata.name: missing"],
    ),
}


@pytest.mark.parametrize("name", sweep(CLASS_1, fast=3))
def test_check_reports_malformed_objects_with_their_path(name, good, tmp_path, capsys, monkeypatch):
    make, expect = CLASS_1[name]
    path = tmp_path / "objects.yaml"
    path.write_text(make(good))
    before = listing(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["check", str(path)], capsys)
    assert code == 1, (code, out, err)
    assert "Traceback" not in out + err and "could not evaluate" not in out, out + err
    lines = [line for line in out.splitlines() if line.startswith(SHAPE)]
    assert lines, out
    for part in [str(path), *expect(good)]:
        assert any(part in line for line in lines), f"{part!r} not in {lines}"
    assert "1 with violations" in out.splitlines()[-1] and "malformed document" in out.splitlines()[-1]
    assert listing(tmp_path) == before


def test_one_bad_document_leaves_the_others_checked(good, tmp_path, capsys):
    """The other documents still reach every rule: a real violation in them is reported beside the shape one."""
    objects = copy.deepcopy(good)
    main_of(objects, "Frontend")["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"
    path = tmp_path / "mixed.yaml"
    path.write_text(dump([*objects, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 3}}]))
    code, out, _ = run_cli(["check", str(path)], capsys)
    assert code == 1
    assert f"{path}: document {len(objects) + 1} (ConfigMap/?)  metadata.name: a whole number 3" in out
    assert any(line.startswith("images-pinned  DynamoGraphDeployment/") for line in out.splitlines()), out
    assert f"{len(objects)} Kubernetes objects and 1 malformed documents" in out


# Files that are no objects at all: one error naming the file, exit 2.
def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(data)


FILE_CASES = {
    "empty file": (_bytes(b""), ["no Kubernetes objects", "no YAML documents"]),
    "only comments and separators": (_bytes(b"# nothing\n---\n---\n"), ["no Kubernetes objects"]),
    "non-UTF-8 bytes": (
        _bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff\xfe}\n"),
        ["cannot be read", "utf-8"],
    ),
    "YAML syntax error": (_bytes(b"apiVersion: v1\nkind: Pod\n  metadata: x\n"), ["line 3", "not valid YAML"]),
    "unclosed flow mapping": (_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: x\n"), ["not valid YAML"]),
    "only scalars": (_bytes(b"--- 5\n--- true\n"), ["no Kubernetes objects", "2 non-mapping document(s)"]),
    "kind: 5 without apiVersion": (_bytes(b"kind: 5\n"), ["no Kubernetes objects", "without apiVersion/kind"]),
}


@pytest.mark.parametrize("name", list(FILE_CASES))
def test_check_refuses_files_that_hold_no_objects(name, tmp_path, capsys):
    write, expect = FILE_CASES[name]
    path = tmp_path / "input.yaml"
    write(path)
    code, out, err = run_cli(["check", str(path)], capsys)
    assert code == 2 and out == "", (code, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for part in [str(path), *expect]:
        assert part in err, f"{part!r} not in {err!r}"
    assert listing(tmp_path) == ["input.yaml"]


@pytest.fixture(scope="module")
def render_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render") / STACK
    render_stack(STACK, ROOT).write(out)
    return out


def _state(doc: Any) -> Callable[[Path], Path]:
    def write(d: Path) -> Path:
        (d / "state.json").write_text(json.dumps(doc))
        return d / "state.json"

    return write


AGAINST_CASES = {
    "deployment a list": (_state({"deployment": []}), ["deployment: a list []", "allowed: `pulumi stack export`"]),
    "deployment.resources a mapping": (
        _state({"deployment": {"resources": {"urn": "x"}}}),
        ["deployment.resources: a mapping", "allowed: a list of mappings (urn"],
    ),
    "resources as strings": (
        _state({"deployment": {"resources": ["urn:pulumi:a::b::c::d"]}}),
        ["deployment.resources[0]: a string 'urn:pulumi:a::b::c::d'"],
    ),
    "resource without urn": (
        _state({"deployment": {"resources": [{"type": "kubernetes:batch/v1:Job"}]}}),
        ["deployment.resources[0].urn: missing"],
    ),
    "inputs a string": (
        _state({"deployment": {"resources": [{"urn": "u", "type": "t", "inputs": "x"}]}}),
        ["deployment.resources[0].inputs: a string 'x'"],
    ),
    "render resources a mapping": (
        _state({"resources": {"a": 1}}),
        ["resources: a mapping", "allowed: a kimi-k3 render's resources.json"],
    ),
    "render record protect a word": (
        _state({"resources": [{"urn": "u", "type": "t", "name": "n", "protect": "yes"}]}),
        ["resources[0].protect: a string 'yes'", "allowed: true or false"],
    ),
    "JSON top level a list": (_state([1, 2]), ["no `resources` (render) or `deployment` (state export)"]),
}


@pytest.mark.parametrize("name", list(AGAINST_CASES))
def test_check_against_a_state_of_the_wrong_shape(name, render_dir, tmp_path, capsys):
    write, expect = AGAINST_CASES[name]
    state = write(tmp_path)
    code, out, err = run_cli(["check", str(render_dir), "--against", str(state)], capsys)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for part in [f"--against {state}", *expect]:
        assert part in err, f"{part!r} not in {err!r}"
    assert listing(tmp_path) == ["state.json"]


def test_render_dir_with_malformed_resources_json(render_dir, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifests.yaml").write_text((render_dir / "manifests.yaml").read_text())
    doc = json.loads((render_dir / "resources.json").read_text())
    doc["resources"][3]["inputs"] = ["not", "a", "mapping"]
    (bad / "resources.json").write_text(json.dumps(doc))
    code, out, err = run_cli(["check", str(bad)], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{bad / 'resources.json'}: resources[3].inputs: a list ['not', 'a', 'mapping']" in err, err


def test_a_rule_that_raises_is_a_violation_naming_rule_and_object():
    """Runner robustness: whatever a rule trips on, the check goes on and says which rule and which object."""

    def boom(obj, ctx):
        yield from ()
        raise KeyError("volumeMounts")

    rule = base.Rule("boom-rule", "raises", base.MANDATORY, "object", boom)
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    violations, skipped = base.evaluate(rule, [obj], base.Context())
    assert skipped == [] and len(violations) == 1
    v = violations[0]
    assert (v.rule, v.target, v.level) == ("boom-rule", "Pod/p", base.MANDATORY)
    assert "rule boom-rule could not evaluate this object (KeyError: 'volumeMounts')" in v.message
    stack_rule = base.Rule("boom-stack", "raises", base.MANDATORY, "stack", lambda objs, ctx: [][0])
    (sv,), _ = base.evaluate(stack_rule, [obj], base.Context())
    assert sv.target == "stack" and "IndexError" in sv.message


def test_a_value_valid_in_shape_that_a_rule_cannot_read_fails_that_rule(good, tmp_path, capsys):
    """A GPU count no rule can parse (a Quantity string, so the shape passes): the rules that read it fail, named."""
    objects = copy.deepcopy(good)
    main_of(objects, "decode")["resources"]["limits"]["nvidia.com/gpu"] = "four"
    path = tmp_path / "gpus.yaml"
    path.write_text(dump(objects))
    code, out, err = run_cli(["check", str(path)], capsys)
    assert code == 1 and "Traceback" not in out + err
    crashed = [line for line in out.splitlines() if "could not evaluate" in line]
    assert crashed and all(
        line.split()[1].startswith("DynamoGraphDeployment/") or line.split()[1] == "stack" for line in crashed
    ), out
    assert any("ValueError" in line and "'four'" in line for line in crashed), crashed


@pytest.mark.parametrize("stack", ["gb200", "gb200-disagg", "gb300", "gb300-disagg"])
def test_shipped_stacks_are_well_formed_and_hold_no_literal_secret(stack, rendered):
    from kimi_k3 import shape
    from policies.rules.secrets import check_env_secrets_from_secret

    assert [(o["kind"], shape.problems(o)) for o in rendered[stack].objects if shape.problems(o)] == []
    assert [r for o in rendered[stack].objects for r in check_env_secrets_from_secret(o, base.Context())] == []


def test_upstream_recipes_are_well_formed(shared_reference):
    """NVIDIA's four K3 deploy.yaml files (the consumer's own objects) raise no shape problem: no false positive."""
    from kimi_k3 import shape

    files = sorted((shared_reference / "dynamo" / "recipes" / "kimi-k3").rglob("deploy.yaml"))
    assert len(files) == 4
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert docs and [(path.name, shape.problems(d)) for d in docs if shape.problems(d)] == []


# ------------------------------------------------------------------------------------------------ class 4
SECRET_VALUES = {
    "HF_TOKEN": "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "OPENAI_API_KEY": "sk-" + "x" * 40,
    "DB_PASSWORD": "hunter2hunter2",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "EXTRA_HEADERS": "hf_" + "Z" * 34,  # an innocuous name, a Hugging Face token's format
    "AWS_ACCESS_KEY_ID": "AKIA" + "ABCDEFGHIJKLMNOP",  # the key id's format (AWS docs: AKIA + 16)
    "NGC_CLI_API_KEY": "nvapi-" + "q" * 40,
}


def _serving_env(section: str, name: str) -> Callable[[str], str]:
    value = SECRET_VALUES[name]
    where = "roles:\n      decode:\n        " if section == "role" else "frontend:\n        "
    indent = "          " if section == "role" else "          "
    return lambda text: text.rstrip("\n") + f"\n  kimi-k3:serving:\n    {where}env:\n{indent}{name}: {value!r}\n"


def _cluster_key(key: str, line: str) -> Callable[[str], str]:
    return lambda text: (
        text.replace("      availabilityZone: us-east-1-dfw-2a\n", f"      availabilityZone: us-east-1-dfw-2a\n{line}")
        if key == "gpuNodes"
        else text.replace("    kubernetesVersion:", f"{line}    kubernetesVersion:")
    )


# (edit of the shared stack file, fragments the one message holds, the value that must never be printed)
CLASS_4 = {
    "capacity reservation id in the shared file": (
        _cluster_key("gpuNodes", "      capacityReservationId: cr-0123456789abcdef0\n"),
        [
            "Pulumi.bad.yaml",
            "kimi-k3:cluster.gpuNodes.capacityReservationId = 'cr-0123456789abcdef0'",
            "per-user value",
            "--config-file .pulumi-user/Pulumi.bad.yaml",
        ],
        None,
    ),
    "public access CIDRs in the shared file": (
        _cluster_key("cluster", "    publicAccessCidrs: [198.51.100.7/32]\n"),
        ["Pulumi.bad.yaml", "kimi-k3:cluster.publicAccessCidrs = ['198.51.100.7/32']", "per-user value"],
        None,
    ),
    "parked in the shared file": (
        _cluster_key("cluster", "    parked: true\n"),
        ["Pulumi.bad.yaml", "kimi-k3:cluster.parked (value not shown)", "per-user value"],
        None,
    ),
    "hfToken secret in the shared file": (
        lambda text: text.rstrip("\n") + "\n  kimi-k3:hfToken:\n    secure: v1:AAAAAAAAAAAAAAAA:BBBBBBBBBBBB\n",
        ["Pulumi.bad.yaml", "kimi-k3:hfToken (value not shown)", "per-user value"],
        "v1:AAAAAAAAAAAAAAAA",
    ),
    "kubeconfig in the shared file": (
        lambda text: (
            text.rstrip("\n") + "\n  kimi-k3:kubeconfig: 'apiVersion: v1\\nusers: [{user: {token: t0ps3cret}}]'\n"
        ),
        # the program's own check comes first here (a plaintext secret), naming the same file and key
        ["Pulumi.bad.yaml", "kimi-k3:kubeconfig", "plaintext"],
        "t0ps3cret",
    ),
    **{
        f"{name} literal in the {section} env": (
            _serving_env(section, name),
            [
                "Pulumi.bad.yaml",
                f"env {name} = <literal, {len(SECRET_VALUES[name])} characters, not shown>",
                "literal secret value",
                "kimi-k3:serving.roles.<role>.env",
                "nothing was written",
            ],
            SECRET_VALUES[name],
        )
        for name, section in [
            ("HF_TOKEN", "role"),
            ("AWS_SECRET_ACCESS_KEY", "frontend"),
            ("OPENAI_API_KEY", "role"),
            ("DB_PASSWORD", "frontend"),
            ("WANDB_API_KEY", "role"),
            ("EXTRA_HEADERS", "role"),
            ("AWS_ACCESS_KEY_ID", "frontend"),
            ("NGC_CLI_API_KEY", "frontend"),
        ]
    },
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project (links to its program and components) to hold bad stack files; cwd is there."""
    proj = tmp_path / "project"
    proj.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "components"):
        (proj / name).symlink_to(ROOT / name)
    for stack_file in ROOT.glob("Pulumi.*.yaml"):
        (proj / stack_file.name).write_text(stack_file.read_text())
    monkeypatch.chdir(proj)
    return proj


@pytest.mark.parametrize(
    "name", sweep(CLASS_4, ["hfToken secret in the shared file", "HF_TOKEN literal in the role env"])
)
def test_secrets_and_per_user_values_are_refused_offline(name, project, tmp_path, capsys):
    change, expect, never = CLASS_4[name]
    text = (project / "Pulumi.gb300.yaml").read_text()
    bad = change(text)
    assert bad != text
    (project / "Pulumi.bad.yaml").write_text(bad)
    before = listing(project)
    out_dir = tmp_path / "out"
    for argv in (["render", "bad", "--out", str(out_dir)], ["render", "bad"], ["check", "bad"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 2, (argv, code, out, err)
        assert "Traceback" not in out + err and len(err.strip().splitlines()) == 1, err
        for part in expect:
            assert part in err, f"{argv[0]}: {part!r} not in {err!r}"
        if never:
            assert never not in out + err, f"{argv[0]} printed the secret"
        assert not out_dir.exists() and listing(project) == before, f"{argv[0]} wrote something"


# A manifest file given to check: the rule family, by container and source of env.
def _with_env(where: str, entry: dict) -> Callable[[list[dict]], Any]:
    def change(o: list[dict]) -> None:
        if where == "init":
            spec = job(o)["spec"]["template"]["spec"]
            spec.setdefault("initContainers", []).append({"name": "fetch", "image": "busybox:1.37", "env": [entry]})
        elif where == "graph":
            of_kind(o, "DynamoGraphDeployment")["spec"]["env"] = [entry]
        else:
            main_of(o, where)["env"].append(entry)

    return change


RULE_CASES = {
    "GITHUB_TOKEN in an init container": (
        _with_env("init", {"name": "GITHUB_TOKEN", "value": "ghp_" + "k" * 36}),
        "Job/",
        "pod container fetch: env GITHUB_TOKEN = <literal, 40 characters",
    ),
    "NGC_API_KEY in the graph-wide env": (
        _with_env("graph", {"name": "NGC_API_KEY", "value": "abc123abc123"}),
        "DynamoGraphDeployment/",
        "spec.env: env NGC_API_KEY = <literal, 12",
    ),
    "AWS_SESSION_TOKEN in a worker": (
        _with_env("prefill", {"name": "AWS_SESSION_TOKEN", "value": "FwoGZXIvYXdzE"}),
        "DynamoGraphDeployment/",
        "component PrefillWorker container main: env AWS_SESSION_TOKEN = <literal, 13",
    ),
    "a token from a ConfigMap": (
        _with_env("Frontend", {"name": "HF_TOKEN", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "t"}}}),
        "DynamoGraphDeployment/",
        "component Frontend container main: env HF_TOKEN comes from ConfigMap 'cfg'",
    ),
}


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_check_fails_literal_credentials_in_any_env(name, good, tmp_path, capsys):
    change, target, message = RULE_CASES[name]
    path = tmp_path / "objects.yaml"
    path.write_text(edit(change)(good))
    code, out, err = run_cli(["check", str(path)], capsys)
    assert code == 1 and "Traceback" not in out + err
    lines = [line for line in out.splitlines() if line.startswith("env-secrets-from-secret  " + target)]
    assert any(message in line for line in lines), out
    for v in ("ghp_" + "k" * 36, "abc123abc123", "FwoGZXIvYXdzE"):
        assert v not in out + err


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "HF_TOKEN", "value": ""},  # explicitly empty: nothing to leak
        {"name": "API_KEY", "value": "$(HF_TOKEN)"},  # a reference to another entry, not a value
        {"name": "MAX_NUM_BATCHED_TOKENS", "value": "8192"},  # a count, not a token
        {"name": "DYN_TOKENIZER_PATH", "value": "/model-cache/kimi-k3"},
    ],
)
def test_what_is_not_a_literal_secret_passes(entry, good, tmp_path, capsys):
    path = tmp_path / "objects.yaml"
    path.write_text(edit(_with_env("decode", entry))(good))
    code, out, err = run_cli(["check", str(path)], capsys)
    assert "env-secrets-from-secret  " not in out and "Traceback" not in out + err, out


# ------------------------------------------------------------------------------------------------ the pack
from test_policy_pack import analyze, analyzer, by_policy, resource  # noqa: E402,F401 - the real pack over gRPC
from test_rules import dgd_of, good_objects  # noqa: E402
from test_rules import main as main_container  # noqa: E402


def test_pack_reports_malformed_objects_and_crashing_rules(analyzer):
    """CrossGuard runs the same rules: a malformed object is one violation with its path, a rule that cannot read
    a value fails naming itself, the analyzer keeps answering, and the well-formed objects still pass."""
    from pulumi.runtime.proto import analyzer_pb2

    objects = good_objects()
    main_container(objects, "decode")["env"] = {"UCX_TLS": "rc"}
    response = analyze(analyzer, dgd_of(objects))
    assert by_policy(response) == [(SHAPE, analyzer_pb2.MANDATORY)]
    (diagnostic,) = response.diagnostics
    assert (
        "DynamoGraphDeployment/" in diagnostic.message
        and ".podTemplate.spec.containers[0].env: a mapping {'UCX_TLS': 'rc'}; allowed: a list of mappings"
        in diagnostic.message
    )
    stack = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[resource(o) for o in objects]))
    assert "could not evaluate" not in "\n".join(d.message for d in stack.diagnostics)

    objects = good_objects()
    main_container(objects, "decode")["resources"]["limits"]["nvidia.com/gpu"] = "four"
    response = analyze(analyzer, dgd_of(objects))
    crashed = [d for d in response.diagnostics if "could not evaluate" in d.message]
    assert crashed and all("ValueError" in d.message and "'four'" in d.message for d in crashed)
    for obj in good_objects():  # whole numbers arrive as doubles over the wire: still well-formed
        assert by_policy(analyze(analyzer, obj)) == [], obj["kind"]


def test_values_unknown_during_preview_stay_the_packs_to_report():
    """pulumi_policy raises UnknownValueError when a rule reads a value computed during preview, and reports that
    itself (an advisory "can't run policy during preview"): the runner must not turn it into a violation."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE as UNKNOWN
    from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

    obj = unknown_checking_proxy(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": UNKNOWN}]},
        }
    )
    for name in ("images-pinned", SHAPE):
        with pytest.raises(UnknownValueError):
            base.evaluate(rules.RULES_BY_NAME[name], [obj], base.Context())
    # a rule that reads nothing unknown still runs on the object (the shape filter does not hide it)
    assert base.evaluate(rules.RULES_BY_NAME["serving-containers-unprivileged"], [obj], base.Context()) == ([], [])
