"""The Makefile as a newcomer meets it: `make up` drives the Pulumi CLI in the right order with the per-user config
file (or explains why not), the Python version is checked first, a broken .venv is rebuilt, `make help` lists it all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, fake_pulumi_bin, pin_model_revision, project_copy

pytestmark = pytest.mark.slow  # runs make in a copy of the repository (make test-slow)
STACK = "gb300-disagg"
USER = f".pulumi-user/Pulumi.{STACK}.yaml"


@pytest.fixture
def clone(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return pin_model_revision(project_copy(tmp_path / "clone"))


def make(clone, *args, stdin=None, path_prefix=None, **env):
    bin_dir = fake_pulumi_bin(clone.parent)
    log = clone.parent / "pulumi.log"
    path = f"{path_prefix or bin_dir}:{os.environ['PATH']}" if path_prefix != "" else "/usr/bin:/bin"
    proc = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=clone,
        input=stdin,
        env={
            **os.environ,
            "PATH": path,
            "PULUMI_LOG": str(log),
            "PULUMI_BACKEND_URL": f"file://{clone.parent}/state",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return proc, calls


def pulumi(clone, *args, stdin=None):
    bin_dir = fake_pulumi_bin(clone.parent)
    return subprocess.run(
        [str(bin_dir / "pulumi"), *args],
        cwd=clone,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PULUMI_LOG": str(clone.parent / "pulumi-direct.log")},
        timeout=120,
    )


def test_make_up_runs_pulumi_up_with_the_per_user_config_and_the_policy_pack(clone):
    tracked = (clone / f"Pulumi.{STACK}.yaml").read_text()
    proc, calls = make(clone, "stack", f"STACK={STACK}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls == [f"stack select --create {STACK}"]
    assert (clone / f"Pulumi.{STACK}.yaml").read_text() == tracked, "the tracked stack file must stay untouched"
    user = yaml.safe_load((clone / USER).read_text())
    assert user["encryptionsalt"].startswith("v1:"), "the new stack's salt moved to the per-user file"
    args = ["--stack", STACK, "--config-file", USER]
    pulumi(clone, "config", "set", "--secret", "kimi-k3:hfToken", *args, stdin="hf_test\n")
    pulumi(
        clone,
        "config",
        "set",
        "--path",
        "kimi-k3:cluster.gpuNodes.capacityReservationId",
        "cr-0123456789abcdef0",
        *args,
    )
    pulumi(clone, "config", "set", "--path", "kimi-k3:cluster.publicAccessCidrs[0]", "198.51.100.7/32", *args)
    proc, calls = make(clone, "up", f"STACK={STACK}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    export = [c for c in calls if c.startswith(f"stack export --stack {STACK} --file ")]
    assert [c for c in calls if c not in export] == [
        f"stack select --create {STACK}",
        f"config get kimi-k3:hfToken --stack {STACK} --config-file {USER}",
        f"up --stack {STACK} --config-file {USER} --policy-pack policies",
    ]
    assert len(export) == 1 and calls.index(export[0]) < len(calls) - 1  # the upgrade guard ran before up
    assert "nothing deployed yet" in proc.stdout
    assert "the program accepted the configuration" in proc.stdout
    assert (clone / f"Pulumi.{STACK}.yaml").read_text() == tracked


def test_make_up_without_the_reservation_is_refused_by_the_program(clone):
    make(clone, "stack", f"STACK={STACK}")
    pulumi(clone, "config", "set", "--secret", "kimi-k3:hfToken", "--stack", STACK, "--config-file", USER, stdin="hf\n")
    proc, calls = make(clone, "up", f"STACK={STACK}")
    assert proc.returncode != 0
    assert "capacityReservationId" in proc.stderr and "Traceback" not in proc.stderr


def test_make_up_without_a_token_says_how_to_set_it_and_runs_nothing(clone):
    proc, calls = make(clone, "up", f"STACK={STACK}")
    assert proc.returncode != 0
    assert f"pulumi config set --secret kimi-k3:hfToken --stack {STACK} --config-file {USER}" in proc.stdout
    assert "capacityReservationId" in proc.stdout and "publicAccessCidrs" in proc.stdout
    assert not any(c.startswith("up ") for c in calls)


def test_shared_keys_set_in_the_per_user_file_are_refused_not_lost(clone):
    make(clone, "stack", f"STACK={STACK}")
    pulumi(
        clone,
        "config",
        "set",
        "--path",
        "kimi-k3:storage.fsx.storageCapacityGiB",
        "4800",
        "--stack",
        STACK,
        "--config-file",
        USER,
    )
    proc, calls = make(clone, "up", f"STACK={STACK}")
    assert proc.returncode != 0 and "kimi-k3:storage changed there" in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    assert not any(c.startswith("up ") for c in calls)


def test_per_user_key_in_the_shared_file_is_refused(clone):
    pulumi(
        clone,
        "config",
        "set",
        "--path",
        "kimi-k3:cluster.gpuNodes.capacityReservationId",
        "cr-0123456789abcdef0",
        "--stack",
        STACK,
    )  # without --config-file: the CLI writes the tracked file
    proc, calls = make(clone, "up", f"STACK={STACK}")
    assert proc.returncode != 0
    assert "kimi-k3:cluster.gpuNodes.capacityReservationId is set in the shared stack file" in proc.stderr


def test_make_up_without_the_pulumi_cli_says_how_to_install_it(clone):
    proc, _ = make(clone, "up", f"STACK={STACK}", path_prefix="")
    assert proc.returncode != 0
    assert "The Pulumi CLI is not installed" in proc.stdout and f"make render STACK={STACK}" in proc.stdout


def fake_python(clone, version: str, pip_fails: bool = False):
    """A `python3` that reports `version` and builds a venv whose pip succeeds or fails (no download)."""
    script = clone.parent / f"python{version}"
    major, minor = version.split(".")[:2]
    script.write_text(f"""#!/bin/sh
case "$1" in
  --version) echo "Python {version}" ;;
  -c) exec "{sys.executable}" -c "import sys; sys.version_info = ({major}, {minor}); $(echo "$2" | sed 's/import sys; //')" ;;
  -m) mkdir -p "$3/bin"; printf '#!/bin/sh\\nexit {1 if pip_fails else 0}\\n' > "$3/bin/pip"; chmod +x "$3/bin/pip"
      printf '#!/bin/sh\\nexit 1\\n' > "$3/bin/python"; chmod +x "$3/bin/python" ;;
esac
""")
    script.chmod(0o755)
    return script


def test_old_python_is_refused_first_with_what_to_do(clone):
    (clone / ".venv").unlink()
    proc, _ = make(clone, "venv", f"PYTHON={fake_python(clone, '3.10.12')}")
    assert proc.returncode != 0
    assert "kimi-k3 needs Python >= 3.11" in proc.stdout and "3.10.12" in proc.stdout
    assert "make PYTHON=python3.11" in proc.stdout
    assert not (clone / ".venv").exists()


def test_failed_build_leaves_no_half_built_venv(clone):
    (clone / ".venv").unlink()
    proc, _ = make(clone, "venv", f"PYTHON={fake_python(clone, '3.11.9', pip_fails=True)}")
    assert proc.returncode != 0
    assert "Building .venv with Python 3.11.9" in proc.stdout and "pip failed; .venv removed" in proc.stdout
    assert not (clone / ".venv").exists(), "the next make starts clean"


def test_broken_venv_is_detected_and_rebuilt(clone):
    (clone / ".venv").unlink()
    (clone / ".venv" / "bin").mkdir(parents=True)
    for name in ("kimi-k3", "python"):
        (clone / ".venv" / "bin" / name).write_text("#!/bin/sh\nexit 1\n")
        (clone / ".venv" / "bin" / name).chmod(0o755)
    proc, _ = make(clone, "venv", f"PYTHON={fake_python(clone, '3.11.9', pip_fails=True)}")
    assert ".venv is broken" in proc.stdout and "rebuilding it" in proc.stdout
    assert "Building .venv" in proc.stdout


def test_make_clean_removes_the_venv_and_build_output_but_not_state(clone):
    (clone / ".venv").unlink()
    for d in (".venv/bin", "build/x", ".pulumi-state", ".pulumi-user"):
        (clone / d).mkdir(parents=True)
    proc, _ = make(clone, "clean")
    assert proc.returncode == 0
    assert not (clone / ".venv").exists() and not (clone / "build").exists()
    assert (clone / ".pulumi-state").is_dir() and (clone / ".pulumi-user").is_dir()


def test_make_help_lists_every_documented_target(clone):
    proc, _ = make(clone)  # the default target
    assert proc.returncode == 0
    for target in ("test", "render", "check", "plan", "diff", "stack", "preview", "up", "clean", "venv"):
        assert f"  {target} " in proc.stdout, target
    # The README and the reference it points to (docs/, moved out of README.md by issue 26).
    readme = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    # `make X` in code spans and command lines (not prose such as "make the ...").
    documented = set(__import__("re").findall(r"(?:`|^|\$\(|&& )make ([a-z-]+)", readme, __import__("re").M))
    assert documented <= {line.split()[0] for line in proc.stdout.splitlines()[1:] if line.startswith("  ")}


def test_the_preview_workflow_gives_the_program_every_per_user_value(clone, tmp_path):
    """preview.yml's per-user step, run as written with its documented secrets/variables: the stack file it leaves
    is one the program accepts (the run fails without the reservation id otherwise)."""
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())
    (step,) = [s for s in wf["jobs"]["preview"]["steps"] if "kimi_k3.config.user_values" in s.get("run", "")]
    (clone / ".pulumi-user").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PATH": f"{fake_pulumi_bin(tmp_path)}:{os.environ['PATH']}",
        "PULUMI_LOG": str(tmp_path / "pulumi.log"),
        "STACK": "my-org/gb300-disagg",
        "PROFILE": STACK,
        "HF_TOKEN": "hf_ci",
        "ENCRYPTION_SALT": "v1:c2FsdA==:v1:ci:salt",
        "STACK_VALUES": '{"gb300-disagg": {"capacityReservationId": "cr-0123456789abcdef0", '
        '"publicAccessCidrs": ["198.51.100.7/32"]}}',
    }
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = yaml.safe_load((clone / f"Pulumi.{STACK}.yaml").read_text())
    assert doc["encryptionsalt"] == "v1:c2FsdA==:v1:ci:salt" and "secure" in doc["config"]["kimi-k3:hfToken"]
    preview = pulumi(clone, "preview", "--stack", STACK)
    assert preview.returncode == 0 and "the program accepted the configuration" in preview.stdout, preview.stderr
    # A stack the variable does not name: one clear error, before any pulumi call that changes something.
    env["PROFILE"] = "gb200"
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "no entry for stack 'gb200' (it names gb300-disagg)" in proc.stderr


def set_user_values(clone):
    args = ["--stack", STACK, "--config-file", USER]
    pulumi(clone, "config", "set", "--secret", "kimi-k3:hfToken", *args, stdin="hf_test\n")
    pulumi(
        clone,
        "config",
        "set",
        "--path",
        "kimi-k3:cluster.gpuNodes.capacityReservationId",
        "cr-0123456789abcdef0",
        *args,
    )
    pulumi(clone, "config", "set", "--path", "kimi-k3:cluster.publicAccessCidrs[0]", "198.51.100.7/32", *args)


def test_make_up_stops_before_pulumi_up_when_the_change_would_replace_the_graph(clone, tmp_path):
    """The deployed state names the graph after the recipe (the old form): this commit renames it, which
    pulumi-kubernetes replaces; `make up` must stop before `pulumi up` and say why."""
    import json

    from kimi_k3.offline.synth import render_stack

    deployed = render_stack(STACK, ROOT)
    resources = []
    for r in deployed.resources:
        inputs = r["inputs"]
        if r["type"].endswith(":DynamoGraphDeployment"):
            inputs = {**inputs, "metadata": {**inputs["metadata"], "name": "kimi-k3-gb300-disagg"}}
        resources.append(
            {
                "urn": r["urn"],
                "type": r["type"],
                "custom": True,
                "protect": r["protect"],
                "retainOnDelete": r["retainOnDelete"],
                "inputs": inputs,
                "provider": f"{r['provider']}::some-id" if r["provider"] else "",
            }
        )
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 3, "deployment": {"resources": resources}}))
    make(clone, "stack", f"STACK={STACK}")
    set_user_values(clone)
    proc, calls = make(clone, "up", f"STACK={STACK}", FAKE_STATE=str(state))
    assert proc.returncode != 0
    assert not any(c.startswith("up ") for c in calls)
    out = proc.stdout + proc.stderr
    assert "graph-updated-in-place" in out and "metadata.name" in out and "stopped before changing anything" in out


def test_make_park_and_unpark_flip_the_parked_flag_in_the_per_user_config_then_run_up(clone):
    tracked = (clone / f"Pulumi.{STACK}.yaml").read_text()
    make(clone, "stack", f"STACK={STACK}")
    set_user_values(clone)
    proc, calls = make(clone, "park", f"STACK={STACK}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls[-2:] == [
        f"config set --path kimi-k3:cluster.parked true --stack {STACK} --config-file {USER}",
        f"up --stack {STACK} --config-file {USER} --policy-pack policies",
    ]
    assert yaml.safe_load((clone / USER).read_text())["config"]["kimi-k3:cluster"]["parked"] is True
    proc, calls = make(clone, "unpark", f"STACK={STACK}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls[-2:] == [
        f"config rm --path kimi-k3:cluster.parked --stack {STACK} --config-file {USER}",
        f"up --stack {STACK} --config-file {USER} --policy-pack policies",
    ]
    assert (clone / f"Pulumi.{STACK}.yaml").read_text() == tracked
