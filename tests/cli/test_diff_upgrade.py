"""`kimi-k3 diff`'s platform upgrade section (kimi_k3/commands/diff_upgrade.py): a git repository of stack files
whose platform pins move, read the way `run_diff` reads them; and one end-to-end diff (slow)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from kimi_k3.commands import diff, diff_upgrade

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def commit_stack(repo: Path, snippet: str, tag: str) -> str:
    (repo / "Pulumi.gb300.yaml").write_text((ROOT / "Pulumi.gb300.yaml").read_text() + snippet)
    git(repo, "commit", "-qam", tag, "--allow-empty")
    git(repo, "tag", tag)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("pins")
    git(repo, "init", "-q", "-b", "main")
    (repo / "Pulumi.gb300.yaml").write_text((ROOT / "Pulumi.gb300.yaml").read_text())
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    return repo


def sha(repo: Path, tag: str) -> str:
    return git(repo, "rev-parse", tag).strip()


def found(repo, tag, snippet):
    git(repo, "checkout", "-q", "--detach", "base")
    head = commit_stack(repo, snippet, tag)
    return diff_upgrade.platform_upgrades(repo, sha(repo, "base"), head, ["gb300"]).get("gb300")


def test_unchanged_pins_show_no_upgrade(repo):
    assert diff_upgrade.platform_upgrades(repo, sha(repo, "base"), sha(repo, "base"), ["gb300"]) == {}


def test_a_pinned_patch_upgrade_lists_its_step_and_what_it_replaces(repo):
    got = found(repo, "to-151", "  kimi-k3:platformSet: dynamo-1.5.1\n")
    assert got == {
        "steps": [
            {
                "addon": "dynamoPlatform",
                "from": "1.5.0",
                "to": "1.5.1",
                "replaces": [
                    "helm release dynamo-platform: chart 1.5.0 -> 1.5.1 (the operator Deployment's pods roll)",
                    "dynamoOperator: 1.5.0 -> 1.5.1 (its pods roll; its CRDs are re-applied)",
                ],
            }
        ]
    }
    text = "\n".join(diff_upgrade.markdown_lines(got))
    assert text.startswith("**Platform upgrade** (one `make up` per step")
    assert "1. `dynamoPlatform` 1.5.0 -> 1.5.1\n   - helm release dynamo-platform: chart 1.5.0 -> 1.5.1" in text


def test_an_adjacent_minor_is_one_step_and_a_two_minor_jump_is_refused_with_the_steps(repo):
    adjacent = found(repo, "to-162", "  kimi-k3:platformSet: dynamo-1.6.2\n")
    assert [(s["from"], s["to"]) for s in adjacent["steps"]] == [("1.5.0", "1.6.2")]
    jump = found(repo, "to-170", "  kimi-k3:platformSet: dynamo-1.7.0\n")
    assert jump == {
        "refused": "dynamo-platform 1.5.0 -> 1.7.0: crosses 2 minor releases; Dynamo upgrades only within a minor "
        "or to the adjacent one; allowed: 1.5.0 -> 1.6.2, then 1.6.2 -> 1.7.0"
    }
    assert diff_upgrade.markdown_lines(jump)[0].startswith("**Platform upgrade refused**: dynamo-platform 1.5.0")


def test_other_addons_step_first_in_upgrade_order(repo):
    got = found(
        repo,
        "dra-and-platform",
        "  kimi-k3:platform:\n    draDriver: {version: 0.4.2}\n    dynamoPlatform: {version: 1.5.1}\n",
    )
    assert [(s["addon"], s["from"], s["to"]) for s in got["steps"]] == [
        ("draDriver", "0.4.1", "0.4.2"),
        ("dynamoPlatform", "1.5.0", "1.5.1"),
    ]


def test_a_side_that_does_not_parse_is_reported_not_raised(repo):
    got = found(repo, "bad-set", "  kimi-k3:platformSet: dynamo-9\n")
    assert got == {
        "refused": "platform pins not readable: kimi-k3:platformSet = dynamo-9: no such platform set; allowed: "
        "seed, dynamo-1.5.1, dynamo-1.6.0, dynamo-1.6.2, dynamo-1.7.0 (recipes/platform/platform-set.yaml)"
    }


@pytest.mark.slow  # two renders of a whole project copy, as tests/cli/test_diff.py
def test_kimi_k3_diff_shows_the_steps_of_a_pinned_upgrade(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive.stdout, check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    commit_stack(repo, "  kimi-k3:platformSet: dynamo-1.5.1\n", "head")
    out = diff.markdown(diff.run_diff(repo, "base", "head", ["gb300"]))
    assert "**Platform upgrade** (one `make up` per step" in out
    assert "1. `dynamoPlatform` 1.5.0 -> 1.5.1" in out and "dynamoOperator: 1.5.0 -> 1.5.1" in out
