"""Compatibility by data (recipes/platform/platform-set.yaml): named platform sets, which runtime image runs on
which platform, unsourced versions refused, and the upgrade path that only crosses adjacent minors."""

from __future__ import annotations

import pytest
from conftest import ROOT

from kimi_k3.commands.main import main
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack_files import StackError
from kimi_k3.data import recipe_file
from kimi_k3.k8s import platform_set
from kimi_k3.offline.synth import render_stack

PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "components")
K3_14 = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0-kimi-k3-dev.1"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The project's program linked, its stack files copied (bad ones go beside them); cwd is there."""
    proj = tmp_path / "project"
    proj.mkdir()
    for name in PROJECT_FILES:
        (proj / name).symlink_to(ROOT / name)
    for stack_file in ROOT.glob("Pulumi.*.yaml"):
        (proj / stack_file.name).write_text(stack_file.read_text())
    monkeypatch.chdir(proj)
    return proj


def refused(project, capsys, snippet: str, base: str = "gb300") -> str:
    """`render` and `plan` of Pulumi.bad.yaml (base + snippet): one clear line, nothing written."""
    (project / "Pulumi.bad.yaml").write_text((project / f"Pulumi.{base}.yaml").read_text() + snippet)
    errors = []
    for argv in (["render", "bad", "--out", str(project / "out")], ["plan", "bad"]):
        assert main(argv) not in (0, None)
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        errors.append(err)
    assert not (project / "out").exists()
    with pytest.raises(StackError) as info:  # what `pulumi up` runs: stopped before anything registers
        render_stack("bad", project)
    assert getattr(info.value, "registered", []) == [] and errors[0].split(": ", 2)[2].strip() in str(info.value)
    assert all("Pulumi.bad.yaml: " in e for e in errors), errors
    assert len({e.split("Pulumi.bad.yaml: ", 1)[1] for e in errors}) == 1, errors  # both commands say the same
    return errors[0]


def test_the_default_set_is_addons_yaml_so_the_seed_stacks_keep_their_pins():
    defaults = recipe_file("platform/addons.yaml")
    assert platform_set.set_versions(None) == {k: str(defaults[k]["version"]) for k in platform_set.upgrade_order()}


def test_every_set_names_every_addon_at_a_listed_version():
    data = platform_set.platform_set()
    for name, members in data["sets"].items():
        assert sorted(members) == sorted(data["upgradeOrder"]), name
        for key, version in members.items():
            assert str(version) in data[key], (name, key)


def test_unknown_set_is_refused_naming_the_key_and_the_sets(project, capsys):
    err = refused(project, capsys, "  kimi-k3:platformSet: dynamo-9\n")
    assert "kimi-k3:platformSet = dynamo-9: no such platform set; allowed: seed, dynamo-1.5.1" in err


def test_a_set_whose_bundles_are_not_sourced_is_refused(project, capsys):
    err = refused(project, capsys, "  kimi-k3:platformSet: dynamo-1.7.0\n")
    assert "kimi-k3:platformSet = dynamo-1.7.0 (kimi-k3:platform.dynamoPlatform.version = 1.7.0)" in err
    assert "bundles, serves, kubernetes, requires is not sourced yet" in err and "allowed: 1.5.0, 1.5.1" in err


def test_a_stack_version_that_contradicts_its_set_is_refused(project, capsys):
    err = refused(
        project,
        capsys,
        "  kimi-k3:platformSet: dynamo-1.5.1\n  kimi-k3:platform:\n    dynamoPlatform: {version: 1.5.0}\n",
    )
    assert "kimi-k3:platform.dynamoPlatform.version = 1.5.0: kimi-k3:platformSet = dynamo-1.5.1 pins" in err
    assert "allowed: 1.5.1 or unset" in err


def test_an_image_on_a_platform_it_does_not_run_on_is_refused(project, capsys):
    image = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"  # a 1.6 release image on the 1.5.0 operator
    err = refused(project, capsys, f"  kimi-k3:serving:\n    image: {image}\n")
    assert f"kimi-k3:serving.image = {image}: runs on dynamo-platform 1.6.x" in err
    assert "installs dynamo-platform 1.5.0 (kimi-k3:platform.dynamoPlatform.version)" in err
    assert "allowed: an image that runs on 1.5.x, or a platform set with dynamoPlatform 1.6.x" in err


def test_an_unknown_tag_of_a_dynamo_runtime_runs_nowhere():
    assert platform_set.image_platforms("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-someone-dev.3") == []
    assert platform_set.image_platforms("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-efa") == ["1.5"]
    assert platform_set.image_platforms(K3_14) == ["1.5"]
    assert platform_set.image_platforms("python:3.12.11-slim") is None  # not a Dynamo runtime: not judged


def test_the_seed_and_the_151_set_run_the_seed_image(project, capsys):
    (project / "Pulumi.ok.yaml").write_text(
        (project / "Pulumi.gb300.yaml").read_text() + "  kimi-k3:platformSet: dynamo-1.5.1\n"
    )
    assert main(["plan", "ok"]) == 0, capsys.readouterr().err


def test_a_dra_driver_the_platform_does_not_support_is_refused(monkeypatch):
    data = {**platform_set.platform_set()}
    data["draDriver"] = {**data["draDriver"], "0.5.0": {"serves": {"ComputeDomain": ["resource.nvidia.com/v1"]}}}
    monkeypatch.setattr(platform_set, "platform_set", lambda: data)

    class Addon:
        def __init__(self, key, version):
            self.key, self.version, self.install, self.values = key, version, True, {}

    with pytest.raises(ConfigError) as err:
        platform_set.check([Addon("draDriver", "0.5.0"), Addon("dynamoPlatform", "1.5.0")], "1.34", {})
    assert str(err.value) == (
        "kimi-k3:platform.draDriver.version = 0.5.0: dynamo-platform 1.5.0 needs draDriver 0.4.1 "
        "(recipes/platform/platform-set.yaml)"
    )


# ------------------------------------------------------------------------------------------- upgrade path
@pytest.mark.parametrize(
    "before, after, steps",
    [
        ("1.5.0", "1.5.1", [("1.5.0", "1.5.1")]),
        ("1.5.1", "1.6.2", [("1.5.1", "1.6.2")]),
        ("1.6.2", "1.7.0", [("1.6.2", "1.7.0")]),
        ("1.5.0", "1.5.0", []),
    ],
)
def test_adjacent_steps_are_allowed(before, after, steps):
    assert platform_set.upgrade_steps(before, after) == steps


def test_a_two_minor_jump_is_refused_with_the_steps_to_take():
    with pytest.raises(ConfigError) as err:
        platform_set.upgrade_steps("1.5.0", "1.7.0")
    assert str(err.value) == (
        "dynamo-platform 1.5.0 -> 1.7.0: crosses 2 minor releases; Dynamo upgrades only within a minor or to the "
        "adjacent one; allowed: 1.5.0 -> 1.6.2, then 1.6.2 -> 1.7.0"
    )


def test_a_downgrade_is_refused():
    with pytest.raises(ConfigError, match="1.6.2 -> 1.5.1: a downgrade"):
        platform_set.upgrade_steps("1.6.2", "1.5.1")


def test_a_step_names_what_it_replaces():
    assert platform_set.step_changes("1.5.0", "1.5.1") == [
        "helm release dynamo-platform: chart 1.5.0 -> 1.5.1 (the operator Deployment's pods roll)",
        "dynamoOperator: 1.5.0 -> 1.5.1 (its pods roll; its CRDs are re-applied)",
    ]
    minor = platform_set.step_changes("1.5.1", "1.6.2")
    assert "bundled Grove, KAI Scheduler, operator: not sourced for 1.5.1 -> 1.6.2" in minor[1]
    assert minor[-1] == "a minor step: read the 1.6.0 release notes' breaking changes before it"
