"""`kimi-k3 diff`: a temporary git repository of this project with one-change commits, diffed end to end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from kimi_k3.commands import diff, diff_compare
from kimi_k3.offline import revisions

pytestmark = pytest.mark.slow  # beyond the `make test` budget: git worktrees and two renders per case

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
DGD = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
DECODE_ARGS = "spec.components[DecodeWorker].podTemplate.spec.containers[main].args"
READY_HASH = 'spec.template.metadata.annotations["kimi-k3.io/graph-spec-sha256"]'


def graph_ready_job_follows(changed):
    """Any graph change also changes the graph-ready Job's spec hash (only that), so `up` waits for it again."""
    (job,) = [r for r in changed if r["type"] == "kubernetes:batch/v1:Job" and r["name"] == "kimi-k3-serving-ready"]
    assert [c["path"] for c in job["inputs"]] == [READY_HASH]
    return job


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def edit(repo: Path, path: str, old: str, new: str) -> None:
    f = repo / path
    text = f.read_text()
    assert text.count(old) == 1, f"{old!r} is not unique in {path}"  # the edit must be the one line we mean
    f.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """This project's committed files at tag `base`, plus one tag per change (all children of `base`)."""
    repo = tmp_path_factory.mktemp("repo")
    # HEAD, not the working tree: others' half-done edits must not decide whether these tests pass.
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive.stdout, check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    changes = {
        "max-num-seqs": [("recipes/profiles/gb300-disagg.yaml", '--max-num-seqs: "256"', '--max-num-seqs: "128"')],
        "replicas": [("recipes/profiles/gb300-disagg.yaml", "    replicas: 2\n", "    replicas: 3\n")],
        "ucx": [("recipes/profiles/gb200-disagg.yaml", "UCX_TLS: cuda_copy,cuda_ipc,tcp", "UCX_TLS: ^cuda_ipc")],
        # Code, not data: only visible if each side is rendered by its own revision's code.
        "code": [("kimi_k3/names.py", '"app.kubernetes.io/part-of": "kimi-k3"', '"app.kubernetes.io/part-of": "kimi"')],
        "no-render": [
            (
                "kimi_k3/commands/render.py",
                "from __future__ import annotations\n",
                'from __future__ import annotations\nraise ImportError("no render at this revision")\n',
            )
        ],
    }
    for tag, edits in changes.items():
        git(repo, "checkout", "-q", "--detach", "base")
        for path, old, new in edits:
            edit(repo, path, old, new)
        git(repo, "commit", "-qam", tag)
        git(repo, "tag", tag)
    git(repo, "checkout", "-q", "--detach", "base")
    shutil.copy2(repo / "Pulumi.gb300.yaml", repo / "Pulumi.gb300-copy.yaml")
    git(repo, "add", "Pulumi.gb300-copy.yaml")
    git(repo, "commit", "-qm", "a fifth stack")
    git(repo, "tag", "new-stack")
    git(repo, "checkout", "-q", "--detach", "base")
    return repo


def price_of(stack: str) -> float:
    import yaml

    return yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]["kimi-k3:pricing"]["instanceHourUsd"]


def kimi_k3_cli(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """This venv's `kimi-k3` run from the project directory, as CI runs it."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "kimi-k3"), *args], cwd=repo, capture_output=True, text=True, timeout=120
    )


def recipe_chain(stack: str) -> list[str]:
    """The profiles a stack reads: its `kimi-k3:recipe` and what each `extends:`."""
    recipe = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]["kimi-k3:recipe"]
    chain = []
    while recipe and recipe not in chain:
        chain.append(recipe)
        recipe = (yaml.safe_load((ROOT / "recipes/profiles" / f"{recipe}.yaml").read_text()) or {}).get("extends")
    return chain


def by_stack(report):
    return {s["stack"]: s for s in report["stacks"]}


SMOKE_RERUN = 'spec.template.metadata.annotations["kimi-k3.io/graph-sha256"]'


def smoke_rerun_split(changed):
    """The smoke test Job changes with every graph change (its pod template carries the graph's hash, so it runs
    again): check that is all that changed about it, and return the other changes."""
    smoke = [r for r in changed if r["type"] == "kubernetes:batch/v1:Job" and r["name"].endswith("-smoke-test")]
    assert len(smoke) == 1 and [c["path"] for c in smoke[0]["inputs"]] == [SMOKE_RERUN], smoke
    return [r for r in changed if r is not smoke[0]]


def test_one_recipe_value_is_exactly_the_change(repo):
    report = diff.run_diff(repo, "base", "max-num-seqs", [])
    stacks = by_stack(report)
    assert sorted(stacks) == sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
    # Every stack on that profile changes, none that does not read it; one that extends it changes unless its own
    # profile sets the value (gb300-disagg-v1.5 states its decode args).
    changed_stacks = {s for s, r in stacks.items() if r["status"] != "unchanged"}
    on_it = {s for s in stacks if recipe_chain(s)[0] == "gb300-disagg"}
    readers = {s for s in stacks if "gb300-disagg" in recipe_chain(s)}
    assert "gb300-disagg" in on_it and on_it <= changed_stacks <= readers, (on_it, changed_stacks, readers)
    assert {stacks[s]["status"] for s in changed_stacks} == {"changed"}
    res = stacks["gb300-disagg"]["resources"]
    assert res["added"] == res["removed"] == []
    graph_ready_job_follows(res["changed"])
    (changed,) = [r for r in smoke_rerun_split(res["changed"]) if r["name"] != "kimi-k3-serving-ready"]
    assert (changed["type"], changed["options"]) == (DGD, [])
    # A changed flag also moves the role to its own compile-cache directory (keyed by image + flags, issue 15).
    flag_change, cache_dir = changed["inputs"]
    assert flag_change == {"path": DECODE_ARGS, "flag": "--max-num-seqs", "before": ["256"], "after": ["128"]}
    assert (
        cache_dir["path"]
        == "spec.components[DecodeWorker].podTemplate.spec.containers[main].volumeMounts[compile-cache].subPath"
    )
    assert cache_dir["before"] != cache_dir["after"]
    price = price_of("gb300-disagg")  # the stack file's instance price; a Capacity Block bills its 18 instances
    changed = stacks["gb300-disagg"]["resources"]["changed"]
    (dgd,) = [r for r in changed if r["type"] == DGD]
    assert dgd["action"] == "update"  # a flag change updates the graph in place
    replaced = sorted(r["name"] for r in changed if r["action"] == "replace")
    assert replaced and all(r["type"] == "kubernetes:batch/v1:Job" for r in changed if r["action"] == "replace")
    assert stacks["gb300-disagg"]["summary"] == (
        f"gb300-disagg: {len(replaced)} REPLACED ({', '.join(f'Job {n}' for n in replaced)}), 1 updated; "
        f"GPUs 24; nodes 6; cost/h ${price * 18:,.2f} (its nodes ${price * 6:,.2f}); "
        f"time to first token {stacks['gb300-disagg']['summary'].split('time to first token ')[1].split(';')[0]}; "
        "violations 0"
    )
    assert "->" not in stacks["gb300-disagg"]["summary"]  # a batch limit changes neither cost nor time to first token
    md = diff.markdown(report)
    assert f"- `{DECODE_ARGS}`: `--max-num-seqs: 256 -> 128`" in md
    # the graph, and the Jobs that re-run against it
    assert sum(md.count(t) for t in ("**REPLACED**", "**Updated in place**", "**Not applied by pulumi up")) == 3 * len(
        changed_stacks
    )  # per changed stack


def test_replicas_change_moves_gpu_and_node_totals(repo):
    (stack,) = diff.run_diff(repo, "base", "replicas", ["gb300-disagg"])["stacks"]
    assert "; GPUs 24 -> 32; nodes 6 -> 8; " in stack["summary"]
    (dgd,) = [r for r in stack["resources"]["changed"] if r["type"] == DGD]
    assert {c["path"]: (c["before"], c["after"]) for c in dgd["inputs"]} == {
        'metadata.annotations["kimi-k3.io/gpus"]': ("24", "32"),
        'metadata.annotations["kimi-k3.io/nodes"]': ("6", "8"),
        "spec.components[DecodeWorker].replicas": (2, 3),
    }
    # Whatever else changes is capacity outside Kubernetes (e.g. the GPU node group sized from the node count),
    # and the graph-ready Job that waits for the changed graph.
    job = graph_ready_job_follows(stack["resources"]["changed"])
    # The node-local weights prefetch splits the checkpoint among the GPU nodes: it learns their new count.
    (prefetch,) = [r for r in stack["resources"]["changed"] if r["name"] == "kimi-k3-serving-weights-prefetch"]
    assert [(c["before"], c["after"]) for c in prefetch["inputs"]] == [("6", "8")], prefetch["inputs"]
    assert all(
        not r["type"].startswith("kubernetes:")
        for r in smoke_rerun_split(stack["resources"]["changed"])
        if r not in (dgd, job, prefetch)
    )


def test_policy_breaking_change_shows_the_new_violation_first(repo):
    report = diff.run_diff(repo, "base", "ucx", ["gb200-disagg"])
    (stack,) = report["stacks"]
    assert [v["rule"] for v in stack["policy"]["new"]] == ["ucx-settings-consistent"] * len(stack["policy"]["new"])
    assert stack["policy"]["new"] and stack["policy"]["resolved"] == []
    assert f"({len(stack['policy']['new'])} new, 0 resolved)" in stack["summary"]
    graph_ready_job_follows(stack["resources"]["changed"])
    (dgd,) = [r for r in stack["resources"]["changed"] if r["type"] == DGD]
    changes = dgd["inputs"]
    assert {(c["before"], c["after"]) for c in changes} == {("cuda_copy,cuda_ipc,tcp", "^cuda_ipc")}
    assert all(c["path"].endswith(".env[UCX_TLS].value") for c in changes)
    md = diff.markdown(report)
    assert md.index("**New violations**") < min(
        md.index(t) for t in ("**REPLACED**", "**Updated in place**") if t in md
    )
    assert "`ucx-settings-consistent` (mandatory)" in md


def test_each_revision_is_rendered_by_its_own_code(repo):
    """The label lives in kimi_k3/k8s/deployment.py: rendering the base with the head's code would show nothing."""
    report = diff.run_diff(repo, "base", "code", ["gb300"])
    changes = [c for r in report["stacks"][0]["resources"]["changed"] for c in r["inputs"] if c["path"] != SMOKE_RERUN]
    assert changes and {(c["before"], c["after"]) for c in changes} == {("kimi-k3", "kimi")}
    assert all(c["path"].endswith('labels["app.kubernetes.io/part-of"]') for c in changes)


def test_a_base_that_cannot_render_is_reported_not_raised(repo):
    report = diff.run_diff(repo, "no-render", "base", ["gb200", "gb300"])
    for stack in report["stacks"]:
        assert stack["status"] == "error"
        assert stack["summary"].startswith(f"{stack['stack']}: base did not render: ")
        assert "no render at this revision" in stack["summary"]
    assert "base did not render" in diff.markdown(report)


def test_stacks_on_one_side_only_are_added_or_removed(repo):
    (added,) = diff.run_diff(repo, "base", "new-stack", ["gb300-copy"])["stacks"]
    (removed,) = diff.run_diff(repo, "new-stack", "base", ["gb300-copy"])["stacks"]
    assert (added["status"], removed["status"]) == ("added", "removed")
    price = price_of("gb300")
    assert added["summary"].startswith(
        "gb300-copy: new stack; GPUs - -> 16; nodes - -> 4; "
        f"cost/h - -> ${price * 18:,.2f} (its nodes - -> ${price * 4:,.2f}); "
        "time to first token - -> "
    )
    assert added["summary"].endswith("; violations - -> 0")
    assert len(added["resources"]["added"]) == len(removed["resources"]["removed"]) > 0


def test_cli_diffs_the_working_tree_and_is_deterministic(repo):
    """Default head: the uncommitted working tree, run as CI runs it (from the project directory)."""
    edit(repo, "recipes/profiles/gb300-disagg.yaml", '--max-num-seqs: "256"', '--max-num-seqs: "64"')
    try:
        runs = [kimi_k3_cli(repo, "diff", "--base", "main", "gb300-disagg") for _ in range(2)]
    finally:
        git(repo, "checkout", "-q", "--", "recipes/profiles/gb300-disagg.yaml")
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stdout.startswith("## kimi-k3 diff: `main` (")
    assert f"- `{DECODE_ARGS}`: `--max-num-seqs: 256 -> 64`" in runs[0].stdout
    assert not list(Path(repo).glob(".git/worktrees/*"))  # the base worktree is cleaned up


def test_a_commit_rendered_once_is_read_from_the_render_cache(repo, monkeypatch):
    """Renders of a commit are cached by its tree and the environment: the second diff renders nothing."""
    first = diff.run_diff(repo, "base", "replicas", ["gb300-disagg"])
    for ref in ("base", "replicas"):  # one entry per tree: the two revisions differ, so do their keys
        assert (revisions.cache_dir(repo, revisions.resolve(repo, ref)) / "gb300-disagg" / "resources.json").is_file()
    assert revisions.cache_dir(repo, revisions.resolve(repo, "base")) != revisions.cache_dir(
        repo, revisions.resolve(repo, "replicas")
    )

    def no_render(*args, **kwargs):
        raise AssertionError("rendered although cached")

    monkeypatch.setattr(diff, "render_dirs", no_render)
    monkeypatch.setattr(revisions, "worktree", no_render)
    assert diff.run_diff(repo, "base", "replicas", ["gb300-disagg"]) == first


def test_unknown_revision_and_stack_exit_2(repo):
    for args in (["--base", "no-such-ref"], ["--base", "main", "no-such-stack"]):
        proc = kimi_k3_cli(repo, "diff", *args)
        assert proc.returncode == 2 and proc.stderr.startswith("kimi-k3 diff: "), proc.stderr


def test_kubernetes_objects_are_diffed_from_the_redacted_manifests(tmp_path):
    from kimi_k3.offline.synth import render_stack

    render_stack("gb200", ROOT).write(tmp_path)
    loaded = diff_compare.load_render(tmp_path)
    (secret,) = [r for r in loaded.resources.values() if r["type"] == "kubernetes:core/v1:Secret"]
    assert secret["inputs"]["stringData"] == {"HF_TOKEN": "[redacted]"}


# ------------------------------------------------------------------------------- field diffs, in memory
def paths(before, after):
    return [c.as_json() for c in diff_compare.diff_values(before, after)]


def test_named_list_items_are_keyed_by_name_and_odd_keys_quoted():
    before = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "x.y": 1}
    after = {"env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}], "x.y": 2}
    assert paths(before, after) == [
        {"path": "env[A]", "before": {"name": "A", "value": "1"}},
        {"path": "env[B].value", "before": "2", "after": "3"},
        {"path": "env[C]", "after": {"name": "C", "value": "4"}},
        {"path": '["x.y"]', "before": 1, "after": 2},
    ]


def test_argv_is_compared_flag_by_flag():
    before = ["--a", "1", "--bare", "--b=2", "--c", "x"]
    after = ["--a", "1", "--b=3", "--new", "--c", "x"]
    assert paths({"args": before}, {"args": after}) == [
        {"path": "args", "flag": "--bare", "before": [None]},
        {"path": "args", "flag": "--b", "before": ["2"], "after": ["3"]},
        {"path": "args", "flag": "--new", "after": [None]},
    ]
    lines = diff._change_lines({"path": "args", "flag": "--new", "after": [None]})
    assert lines == ["- `args`: `+ --new`"]
    assert paths({"args": ["--a", "1", "--b"]}, {"args": ["--b", "--a", "1"]}) == [
        {"path": "args", "before": ["--a", "1", "--b"], "after": ["--b", "--a", "1"]}
    ]


def test_scalar_lists_show_membership_and_unnamed_lists_index():
    assert paths({"dependsOn": ["u1", "u2"]}, {"dependsOn": ["u2", "u3"]}) == [
        {"path": "dependsOn", "before": "u1"},
        {"path": "dependsOn", "after": "u3"},
    ]
    assert paths([{"k": 1}], [{"k": 2}, {"k": 3}]) == [
        {"path": "[0].k", "before": 1, "after": 2},
        {"path": "[1]", "after": {"k": 3}},
    ]


def test_multiline_strings_render_as_a_unified_diff():
    lines = diff._change_lines({"path": "data.script", "before": "a\nb\nc", "after": "a\nB\nc"})
    assert lines[0] == "- `data.script`:" and "  -b" in lines and "  +B" in lines


def _render_dir(tmp_path, name, rendered):
    from kimi_k3.offline.figures import stack_figures  # noqa: F401 - figures are the render command's; not needed here

    out = tmp_path / name
    rendered.write(out)
    return diff_compare.load_render(out)


def test_a_replaced_cache_and_graph_are_named_in_the_summary_and_blocked_when_protected(rendered, tmp_path):
    """A namespace change: pulumi-kubernetes replaces every namespaced object (metadata.namespace is force-new);
    the protected model cache cannot be replaced, so `pulumi up` would stop: the report says so, first."""
    from conftest import render_with

    base = _render_dir(tmp_path, "base", rendered["gb300"])
    head = _render_dir(tmp_path, "head", render_with("gb300", serving={"namespace": "kimi-k3-b"}))
    report = diff_compare.diff_stack("gb300", base, head, {})
    changed = {r["name"]: r for r in report["resources"]["changed"]}
    assert changed["kimi-k3-serving-deployment"]["action"] == "replace"
    cache = changed["kimi-k3-model-cache-volume"]
    protected = next(r["protect"] for r in head.records if r["name"] == "kimi-k3-model-cache-volume")
    assert cache["action"] == "replace" and cache.get("blocked", False) == protected
    replaced = sum(r.get("action") == "replace" for r in report["resources"]["changed"])
    assert f"{replaced} REPLACED (" in report["summary"] and f"+{replaced - 4} more)" in report["summary"]
    md = diff.markdown(
        {"base": {"ref": "main", "commit": "0" * 40}, "head": {"ref": "x", "commit": None}, "stacks": [report]}
    )
    assert ("protected: `pulumi up` stops before this" in md) == protected
    assert md.index("**REPLACED**") < md.index("**Updated in place**") if "**Updated in place**" in md else True
