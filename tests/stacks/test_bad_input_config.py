"""Issue 25, classes 2 and 3: stack and recipe files read as Pulumi reads them (gopkg.in/yaml.v3), and every key
validated. Each bad stack file goes through `kimi-k3 render` and `kimi-k3 plan` as a user types them, and through
the program's own path (`render_stack`, what `pulumi up` runs): non-zero exit, one message naming the file, key and
value and what is allowed, no traceback, nothing written, nothing registered."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import ROOT
from test_bad_input import StackCase, append, assert_clear, project, recipes, replace, run_cli  # noqa: F401

from kimi_k3 import data
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import StackError, read_stack_config
from kimi_k3.errors import UserError
from kimi_k3.offline.synth import render_stack

__all__ = ["project", "recipes"]  # fixtures, used by name


def sub(pattern: str, new: str):
    def edit(text: str) -> str:
        out, n = re.subn(pattern, new, text, count=1, flags=re.M)
        assert n == 1, f"{pattern!r} not in the stack file"
        return out

    return edit


def both(*edits):
    def edit(text: str) -> str:
        for e in edits:
            text = e(text)
        return text

    return edit


def serving(body: str):
    return append("  kimi-k3:serving:\n" + "".join(f"    {line}\n" for line in body.splitlines()))


def model(body: str):
    return append("  kimi-k3:model:\n" + "".join(f"    {line}\n" for line in body.splitlines()))


def price(value: str):
    return sub(r"^    instanceHourUsd: .*$", f"    instanceHourUsd: {value}")


SECOND_PRICING = '  kimi-k3:pricing:\n    instanceHourUsd: 1.0\n    source: pasted\n    asOf: "2026-11"\n'
LOL = (
    "\n".join(
        ["  kimi-k3:estimates:", "    x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        + [f"    x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    )
    + "\n"
)
LONG = "k" * 200_000

CASES = {
    # ---------------------------------------------------------------- class 2: read as Pulumi reads the file
    "duplicate top-level key (a second pricing block)": StackCase(
        "gb300-disagg",
        append(SECOND_PRICING),
        ["Pulumi.bad.yaml line 29", "'kimi-k3:pricing'", "already defined at line 25", "allowed: each key once"],
    ),
    "duplicate nested key": StackCase(
        "gb300",
        serving("roles:\n  decode:\n    replicas: 1\n    replicas: 2"),
        ["Pulumi.bad.yaml line", "'replicas'", "already defined at line", "gopkg.in/yaml.v3"],
    ),
    "duplicate key in a flow mapping": StackCase(
        "gb300",
        replace("kind: s3", "{kind: s3, kind: efs}"),
        ["Pulumi.bad.yaml line 22", "'kind' is already defined at line 22"],
    ),
    "replicas: yes is text, not 1": StackCase(
        "gb300-disagg",
        serving("roles:\n  decode:\n    replicas: yes"),
        ['kimi-k3:serving.roles.decode.replicas = "yes"', "valid integer", "YAML 1.2", "yes is text"],
    ),
    "replicas: true is not a number": StackCase(
        "gb300-disagg",
        serving("roles:\n  decode:\n    replicas: true"),
        ["kimi-k3:serving.roles.decode.replicas = true", "allowed: a number, not true/false"],
    ),
    "smokeTest: off is text": StackCase(
        "gb300", serving("smokeTest: off"), ['kimi-k3:serving.smokeTest = "off"', "allowed: true or false", "YAML 1.2"]
    ),
    "benchmark enabled: on is text": StackCase(
        "gb300",
        serving("benchmark:\n  enabled: on"),
        ['kimi-k3:serving.benchmark.enabled = "on"', "allowed: true or false"],
    ),
    "a boolean as 1": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    endpointPublicAccess: 1"),
        ["kimi-k3:cluster.endpointPublicAccess = 1", "allowed: true or false"],
    ),
    "alias bomb": StackCase(
        "gb300", append(LOL), ["Pulumi.bad.yaml", "aliases expand to", "allowed: at most", "excessive aliasing"]
    ),
    "anchor containing itself": StackCase(
        "gb300",
        append("  kimi-k3:estimates: &loop\n    seconds: [*loop]\n"),
        ["Pulumi.bad.yaml line", "contains an alias of itself"],
    ),
    "200,000-character served model name": StackCase(
        "gb300",
        model(f"servedModelName: {LONG}"),
        ["kimi-k3:model.servedModelName", "kkkk...", "(200,000 characters)", "allowed: at most 256 characters"],
    ),
    "200,000-character image": StackCase(
        "gb300", serving(f"image: {LONG}"), ["kimi-k3:serving.image", "(200,000 characters)", "allowed: at most 4096"]
    ),
    "1,000-character key (YAML's longest plain key)": StackCase(
        "gb300", serving(f"{LONG[:1000]}: 1"), ["kimi-k3:serving.kkkk", "(1,000 characters): unknown key"]
    ),
    "unquoted date becomes a timestamp": StackCase(
        "gb300",
        sub(r"^    asOf: .*$", "    asOf: 2026-10-01"),
        [
            "kimi-k3:pricing.asOf",
            "2026-10-01 00:00:00 +0000 UTC",
            "timestamp",
            'quote it in the stack file, e.g. "2026-10-01"',
        ],
    ),
    "a key both bare and namespaced": StackCase(
        "gb300",
        replace("  kimi-k3:recipe: gb300", "  kimi-k3:recipe: gb300\n  recipe: gb200"),
        ["Pulumi.bad.yaml", "'recipe' and 'kimi-k3:recipe' are the same key", "allowed: one of them"],
    ),
    # ------------------------------------------------------------------------ class 3: every key validated
    "estimates: unknown step": StackCase(
        "gb300",
        append("  kimi-k3:estimates:\n    seconds:\n      gpu_nodegroup: 60\n"),
        [
            "kimi-k3:estimates.seconds",
            "unknown step 'gpu_nodegroup'",
            "did you mean 'gpu_node_group'",
            "allowed: aws_default",
        ],
    ),
    "estimates: negative step": StackCase(
        "gb300",
        append("  kimi-k3:estimates:\n    seconds:\n      eks_cluster: -600\n"),
        ["kimi-k3:estimates.seconds", "eks_cluster = -600", "allowed: 0 or more seconds"],
    ),
    "estimates: infinite download rate": StackCase(
        "gb300",
        append("  kimi-k3:estimates:\n    downloadGbps: .inf\n"),
        ["kimi-k3:estimates.downloadGbps", "Infinity", "allowed: a finite number"],
    ),
    "price .inf": StackCase(
        "gb300", price(".inf"), ["kimi-k3:pricing.instanceHourUsd = Infinity", "allowed: a finite number"]
    ),
    "price 'inf' as text": StackCase(
        "gb300", price('"inf"'), ['kimi-k3:pricing.instanceHourUsd = "inf"', "allowed: a finite number"]
    ),
    "price .nan": StackCase(
        "gb300-disagg", price(".nan"), ["kimi-k3:pricing.instanceHourUsd = NaN", "allowed: a finite number"]
    ),
    "price not a number": StackCase(
        "gb300", price('"42 USD"'), ['kimi-k3:pricing.instanceHourUsd = "42 USD"', "valid number"]
    ),
    "alert threshold .nan": StackCase(
        "gb300",
        append("  kimi-k3:monitoring:\n    alerts:\n      maxKvCacheUsagePercent: .nan\n"),
        ["kimi-k3:monitoring.alerts.maxKvCacheUsagePercent = NaN", "allowed: a finite number"],
    ),
    "cacheMountPath /": StackCase(
        "gb300", model("cacheMountPath: /"), ['kimi-k3:model.cacheMountPath = "/"', "allowed: a directory of its own"]
    ),
    "cacheMountPath in /etc": StackCase(
        "gb300",
        model("cacheMountPath: /etc/models"),
        [
            'kimi-k3:model.cacheMountPath = "/etc/models"',
            "/etc belongs to the image",
            "allowed: a directory of its own",
        ],
    ),
    "cacheMountPath with ..": StackCase(
        "gb300",
        model("cacheMountPath: /models/../usr"),
        ["kimi-k3:model.cacheMountPath", "allowed: a directory of its own"],
    ),
    "empty revision": StackCase(
        "gb300", model('revision: ""'), ['kimi-k3:model.revision = ""', "allowed: the 40-hex commit sha"]
    ),
    "revision with a slash": StackCase(
        "gb300",
        model("revision: refs/pr/1"),
        ['kimi-k3:model.revision = "refs/pr/1"', "allowed: the 40-hex commit sha"],
    ),
    "empty served model name": StackCase(
        "gb300", model('servedModelName: ""'), ['kimi-k3:model.servedModelName = ""', "allowed: a model name"]
    ),
    "served model name with a space": StackCase(
        "gb300",
        model("servedModelName: kimi k3"),
        ['kimi-k3:model.servedModelName = "kimi k3"', "allowed: a model name"],
    ),
    "download image :latest": StackCase(
        "gb300",
        model("downloadImage: python:latest"),
        ['kimi-k3:model.downloadImage = "python:latest"', "latest tag", "allowed: a version tag or a digest"],
    ),
    "download image untagged": StackCase(
        "gb300", model("downloadImage: python"), ['kimi-k3:model.downloadImage = "python"', "untagged"]
    ),
    "planner image :latest": StackCase(
        "gb300-disagg",
        serving("autoscaling:\n  image: nvcr.io/nvidia/ai-dynamo/dynamo-planner:latest"),
        ["kimi-k3:serving.autoscaling.image", "latest tag", "allowed: a version tag or a digest"],
    ),
    "negative flag value": StackCase(
        "gb300",
        serving("roles:\n  decode:\n    extraArgs:\n      --max-num-seqs: -1"),
        ["kimi-k3:serving.roles.decode.extraArgs", "--max-num-seqs = -1", "allowed: a finite number >= 0"],
    ),
    "negative flag value as text": StackCase(
        "gb300-disagg",
        serving("roles:\n  prefill:\n    extraArgs:\n      --max-num-batched-tokens: '-4'"),
        ["kimi-k3:serving.roles.prefill.extraArgs", "--max-num-batched-tokens = '-4'", "allowed: a finite number >= 0"],
    ),
    "empty flag value": StackCase(
        "gb300",
        serving("roles:\n  decode:\n    extraArgs:\n      --max-num-seqs: ''"),
        ["kimi-k3:serving.roles.decode.extraArgs", "--max-num-seqs = ''", "empty"],
    ),
    "frontend flag without --": StackCase(
        "gb300",
        serving("frontend:\n  extraArgs:\n    router-mode: kv"),
        ["kimi-k3:serving.frontend.extraArgs", "'router-mode'", "must be a long flag"],
    ),
    "flag with its value after =": StackCase(
        "gb300",
        serving("frontend:\n  extraArgs:\n    --router-mode=kv: true"),
        ["kimi-k3:serving.frontend.extraArgs", "'--router-mode=kv'", "not after '='"],
    ),
    "env name Kubernetes refuses": StackCase(
        "gb300",
        serving("roles:\n  decode:\n    env:\n      NCCL DEBUG: INFO"),
        ["kimi-k3:serving.roles.decode.env", "'NCCL DEBUG'", "Kubernetes refuses"],
    ),
    "storage class with a kind that ignores it": StackCase(
        "gb300",
        replace("kind: s3", "kind: s3\n    storageClass: fsx-sc"),
        ["kimi-k3:storage.storageClass = 'fsx-sc'", "kind 's3'", "ignore it", "allowed: remove it, or kind existing"],
    ),
    "fsx settings with kind s3": StackCase(
        "gb300",
        replace("kind: s3", "kind: s3\n    fsx:\n      perUnitStorageThroughput: 125"),
        ["kimi-k3:storage.fsx", "kind is 's3'", "allowed: remove kimi-k3:storage.fsx, or kind fsx-lustre"],
    ),
    "download timeout shorter than the checkpoint takes": StackCase(
        "gb300",
        both(
            replace(
                "kind: s3",
                "kind: fsx-lustre\n    fsx:\n      storageCapacityGiB: 2400\n      perUnitStorageThroughput: 125",
            ),
            serving("downloadTimeoutSeconds: 3600"),
        ),
        [
            "kimi-k3:serving.downloadTimeoutSeconds = 3600",
            "takes at least",
            "FSx for Lustre 2400 GiB x 125",
            "allowed: 5",
        ],
    ),
    "vpcCidr not an address": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    vpcCidr: 999.1.0.0/16"),
        ['kimi-k3:cluster.vpcCidr = "999.1.0.0/16"', "not an IPv4 network", "allowed: a private /16"],
    ),
    "vpcCidr with host bits": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    vpcCidr: 10.64.1.0/16"),
        ['kimi-k3:cluster.vpcCidr = "10.64.1.0/16"', "host bits set", "allowed: a private /16"],
    ),
    "vpcCidr public": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    vpcCidr: 8.8.0.0/16"),
        ['kimi-k3:cluster.vpcCidr = "8.8.0.0/16"', "not a private range", "allowed: a /16 in 10.0.0.0/8"],
    ),
    "availability zone twice": StackCase(
        "gb300",
        replace("availabilityZones: [us-east-1a, us-east-1b]", "availabilityZones: [us-east-1a, us-east-1a]"),
        ["kimi-k3:cluster.availabilityZones", "a zone listed twice"],
    ),
    "availability zone misspelt": StackCase(
        "gb300",
        replace("availabilityZones: [us-east-1a, us-east-1b]", "availabilityZones: [us-east-1a, useast1b]"),
        ['kimi-k3:cluster.availabilityZones.1 = "useast1b"', "allowed: an availability or Local Zone name"],
    ),
    "system node instance type with a space": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    systemNodes:\n      instanceType: m7i 8xlarge"),
        ['kimi-k3:cluster.systemNodes.instanceType = "m7i 8xlarge"', "allowed: an EC2 instance type"],
    ),
    "fetcher instance type misspelt": StackCase(
        "gb300",
        replace("kind: s3", "kind: s3\n    s3:\n      fetcherInstanceType: m6in8xlarge"),
        ['kimi-k3:storage.s3.fetcherInstanceType = "m6in8xlarge"', "allowed: an EC2 instance type"],
    ),
    "system node AMI type unknown": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    systemNodes:\n      amiType: AL2023_x86_64_STANDART"),
        [
            'kimi-k3:cluster.systemNodes.amiType = "AL2023_x86_64_STANDART"',
            "did you mean 'AL2023_x86_64_STANDARD'",
            "allowed: AL2023_ARM_64_NVIDIA",
        ],
    ),
    "efaDevicesPerNode ignored in eks mode": StackCase(
        "gb300",
        sub(r"^    mode: eks$", "    mode: eks\n    efaDevicesPerNode: 4"),
        ["kimi-k3:cluster.efaDevicesPerNode = 4", "eks mode takes EFA devices from the instance type"],
    ),
    "ready wait shorter than the startup probe": StackCase(
        "gb300",
        serving("readyTimeoutSeconds: 600"),
        ["kimi-k3:serving.readyTimeoutSeconds = 600", "startupProbeSeconds = 7200", "allowed: 7200 or more"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_stack_file(name, project, tmp_path, capsys):
    case = CASES[name]
    text = (project / f"Pulumi.{case.base}.yaml").read_text()
    (project / "Pulumi.bad.yaml").write_text(case.edit(text))
    out_dir = tmp_path / "out"
    for argv in (["render", "bad", "--out", str(out_dir)], ["plan", "bad"]):
        code, out, err = run_cli(argv, capsys)
        assert_clear(code, err, case.expect)
        assert len(err) < 1500, f"{len(err)} characters: {err[:300]}"
        assert not out_dir.exists(), f"{argv[0]} wrote {out_dir}"
    with pytest.raises(StackError) as info:  # what `pulumi up` runs: one RunError, nothing registered
        render_stack("bad", project)
    assert getattr(info.value, "registered", []) == []
    assert all(part in str(info.value) for part in case.expect), str(info.value)
    assert sorted(p.name for p in project.iterdir()) == sorted(
        ["Pulumi.bad.yaml", *[p.name for p in ROOT.glob("Pulumi.*.yaml")], "Pulumi.yaml", "__main__.py", "components"]
    )


def test_pd_ratio_unquoted_is_the_ratio(project):
    """`pdRatio: 1:2` unquoted: yaml.v3 has no base-60 ints, so Pulumi passes "1:2" (PyYAML's YAML 1.1 read 62)."""
    text = (project / "Pulumi.gb300-disagg.yaml").read_text()
    (project / "Pulumi.bad.yaml").write_text(serving("pdRatio: 2:1")(text))
    stack_file = read_stack_config("bad", project)
    cfg = parse_stack_config(stack_file.config, stack_file.secrets)
    assert cfg.serving.pd_ratio == "2:1"


def test_bare_keys_are_the_projects(project):
    """`recipe: gb300` under `config:` is kimi-k3:recipe to Pulumi (bare keys take the project's namespace)."""
    text = (project / "Pulumi.gb300-disagg.yaml").read_text()
    (project / "Pulumi.bad.yaml").write_text(replace("  kimi-k3:recipe:", "  recipe:")(text))
    stack_file = read_stack_config("bad", project)
    assert parse_stack_config(stack_file.config, stack_file.secrets).recipe == "gb300-disagg"


# ------------------------------------------------------------------------------------------- recipe files
@pytest.mark.parametrize(
    "recipe, edit, stack, expect",
    [
        (
            "profiles/gb300.yaml",
            replace("maxModelLen: ", "maxModelLen: 1\nmaxModelLen: "),
            "gb300",
            ["recipes/profiles/gb300.yaml", "line", "already defined"],
        ),
        (
            "profiles/gb300.yaml",
            sub(r"^maxModelLen: .*$", "maxModelLen: 2097152"),
            "gb300",
            [
                "recipes/profiles/gb300.yaml",
                "maxModelLen = 2097152",
                "max_position_embeddings 1,048,576",
                "allowed: 1..1048576",
            ],
        ),
        (
            "profiles/gb300-disagg.yaml",
            replace("publishesKvEvents: true", "publishesKvEvents: yes"),
            "gb300-disagg",
            ["recipes/profiles/gb300-disagg.yaml", 'publishesKvEvents = "yes"', "allowed: true or false"],
        ),
        (
            "facts/durations.yaml",
            replace("  efs: 60", "  efs: 60\n  efs: 6000"),
            "gb300",
            ["recipes/facts/durations.yaml line", "'efs' is already defined"],
        ),
    ],
)
def test_bad_recipe_file(recipe, edit, stack, expect, recipes, project, capsys):
    (recipes / recipe).write_text(edit((recipes / recipe).read_text()))
    for argv in (["render", stack, "--out", str(project / "out")], ["plan", stack]):
        code, _, err = run_cli(argv, capsys)
        assert_clear(code, err, expect)
    assert not (project / "out").exists()


# ------------------------------------------------------------------------------------------- the loader
def test_shipped_files_read_the_same():
    """Switching loaders changed no shipped fact: every recipe and stack file reads as PyYAML read it."""
    from kimi_k3 import yaml_strict

    files = sorted(data.RECIPES.glob("*/*.yaml")) + sorted(ROOT.glob("Pulumi*.yaml"))
    assert len(files) > 20
    for path in files:
        text = path.read_text()
        assert yaml_strict.load(text, path.name) == yaml.safe_load(text), path.name


# Expected values read off gopkg.in/yaml.v3 v3.0.1 resolve.go (resolveMapList, strconv.ParseInt(s, 0, 64) after
# removing '_', yamlStyleFloat, no base 60) and config/object.go (time.Time -> String()), not off our loader.
@pytest.mark.parametrize(
    "text, expected",
    [
        ("yes", "yes"),
        ("No", "No"),
        ("on", "on"),
        ("OFF", "OFF"),
        ("y", "y"),
        ("True", True),
        ("FALSE", False),
        ("1:2", "1:2"),
        ("190:20:30", "190:20:30"),
        ("0x1F", 31),
        ("0o17", 15),
        ("0777", 511),
        ("1_000", 1000),
        ("0b101", 5),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("1e999", "1e999"),
        ("~", None),
        ("null", None),
        ("NULL", None),
        ("2026-10", "2026-10"),
        ("2026-10-01", "2026-10-01 00:00:00 +0000 UTC"),
        ("1.30", 1.3),
        ("+5", 5),
        ("-.inf", float("-inf")),
        ("inf", "inf"),
        ("nan", "nan"),
    ],
)
def test_scalars_as_yaml_v3_reads_them(text, expected):
    from kimi_k3 import yaml_strict

    assert yaml_strict.load(f"k: {text}\n", "t.yaml") == {"k": expected}


def test_merge_keys_still_work_and_explicit_keys_win():
    from kimi_k3 import yaml_strict

    assert yaml_strict.load("a: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n", "t") == {
        "a": {"x": 1, "y": 2},
        "c": {"x": 1, "y": 3},
    }


def test_small_aliases_are_allowed():
    from kimi_k3 import yaml_strict

    doc = yaml_strict.load("a: &x [1, 2, 3]\nb: *x\nc: *x\n", "t")
    assert doc == {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3]}


def test_alias_bomb_refused_without_expanding_it():
    from kimi_k3 import yaml_strict

    text = (
        "a: &a ["
        + ", ".join(["lol"] * 9)
        + "]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
    )
    assert len(text) < 700
    with pytest.raises(UserError, match="excessive aliasing"):
        yaml_strict.load(text, "bomb.yaml")


def test_per_user_file_read_strictly(tmp_path):
    """`make` rebuilds .pulumi-user/ from the tracked file: a duplicate there is refused the same way."""
    from kimi_k3.config import user_values as user_config

    for name in ("Pulumi.yaml", "__main__.py"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "Pulumi.gb300.yaml").write_text((ROOT / "Pulumi.gb300.yaml").read_text() + SECOND_PRICING)
    with pytest.raises(UserError, match=r"Pulumi.gb300.yaml line \d+: key 'kimi-k3:pricing' is already defined"):
        user_config.refresh(tmp_path, "gb300")
    assert not (tmp_path / user_config.USER_DIR).exists()


def test_per_user_key_written_bare_is_still_per_user(tmp_path):
    """A bare `hfToken:` in the shared file is kimi-k3:hfToken to Pulumi: refused there like the namespaced one."""
    from kimi_k3.config import user_values as user_config

    for name in ("Pulumi.yaml", "__main__.py"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "Pulumi.gb300.yaml").write_text((ROOT / "Pulumi.gb300.yaml").read_text() + "  hfToken: hf_abc\n")
    with pytest.raises(UserError, match="kimi-k3:hfToken is set in the shared stack file"):
        user_config.refresh(tmp_path, "gb300")
    assert not (tmp_path / user_config.USER_DIR).exists()


def test_json_of_the_config_is_what_pulumi_passes(project):
    """Objects reach the program JSON-encoded; YAML 1.2 words stay text in them."""
    text = (project / "Pulumi.gb300.yaml").read_text()
    (project / "Pulumi.bad.yaml").write_text(serving("namespace: on")(text))
    assert json.loads(read_stack_config("bad", project).config["kimi-k3:serving"]) == {"namespace": "on"}
