"""tools/engine/build.sh run for real with a scripted `go` on PATH: what CI's disk and log depend on.

The last CI run failed inside the engine lane's cold build with nothing but `go: downloading` lines in its log, on a
machine whose free disk we cannot see; untrimmed, that build peaks at ~20 GB of disk. These tests hold the script to:
each tool's build cache removed once the tool is built (ENGINE_TRIM_CACHES=1, as .ci/run sets it), go's work
directory removed, module downloads counted instead of printed, and a failing build named with its log's last lines.
The fake `go` answers only what build.sh asks (version, env, list -m, mod download, run, build -o) and writes a file
into the build cache and work directory for every package it "compiles", as the real one does.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow  # beyond the `make test` budget: runs the engine build script as processes

BUILD_SH = ROOT / "tools" / "engine" / "build.sh"

FAKE_GO = textwrap.dedent(r"""
    #!{python}
    import os, pathlib, re, sys
    args = sys.argv[1:]
    here = pathlib.Path.cwd()
    tool = here.name  # the wrapper module's folder: pulumi, provider-kubernetes, kube, etcd, prometheus-operator
    env = {{"GOCACHE": os.environ["GOCACHE"], "GOMODCACHE": os.environ["GOMODCACHE"]}}
    if args[:1] == ["version"]:
        print("go version go1.26.8 linux/amd64"); sys.exit(0)
    if args[:1] == ["env"]:
        print(env[args[1]]); sys.exit(0)
    if args[:2] == ["mod", "download"]:
        if os.environ.get("FAKE_GO_FAIL_DOWNLOAD") == tool:
            print(f"go: {{args[2]}}: reading https://proxy.golang.org/...: 404 Not Found", file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    if args[:2] == ["list", "-m"]:
        fmt, module = args[3], args[4]
        if fmt == "{{{{.Version}}}}":
            gomod = (here / "go.mod").read_text()
            print(re.search(r"^\s*(?:require\s+)?" + re.escape(module) + r"\s+(v\S+)", gomod, re.M).group(1))
        else:  # {{{{.Dir}}}}: the module's files, as much of them as build.sh reads
            d = pathlib.Path(env["GOMODCACHE"]) / module.replace("/", "_")
            (d / "python/cmd").mkdir(parents=True, exist_ok=True)
            (d / "python/cmd/pulumi-language-python-exec").write_text("#!/bin/sh\n")
            (d / "example/prometheus-operator-crd").mkdir(parents=True, exist_ok=True)
            (d / "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml").write_text("kind: CRD\n")
            print(d)
        sys.exit(0)
    if args[:1] == ["run"]:
        sys.exit(1 if os.environ.get("FAKE_GO_FAIL_RUN") == tool else 0)
    if args[:1] == ["build"]:
        out = args[args.index("-o") + 1]
        pkgs = [a for a in args[args.index("-o") + 2:]]
        if os.environ.get("FAKE_GO_SLEEP"):
            import time; time.sleep(float(os.environ["FAKE_GO_SLEEP"]))
        for i in range(30):
            print(f"go: downloading example.com/dep{{i}} v1.0.0", file=sys.stderr)
        work = pathlib.Path(os.environ.get("GOTMPDIR") or "/tmp") / f"go-build-fake-{{tool}}"
        work.mkdir(parents=True, exist_ok=True)
        cache = pathlib.Path(env["GOCACHE"]); cache.mkdir(parents=True, exist_ok=True)
        for i in range(201):
            (cache / f"{{tool}}-{{i}}.a").write_bytes(b"x" * 64)
            (work / f"{{i}}.a").write_bytes(b"x" * 64)
            print(f"example.com/{{tool}}/pkg{{i}}", file=sys.stderr)
        flaky = pathlib.Path(env["GOCACHE"]).parent / f"flaked-{{tool}}"
        if os.environ.get("FAKE_GO_FLAKY") == tool and not flaky.exists():
            flaky.write_text("")
            print("go: example.com/dep3@v1.0.0: Get \"https://proxy.golang.org/example.com/dep3/@v/v1.0.0.zip\": "
                  "dial tcp 142.250.1.1:443: i/o timeout", file=sys.stderr)
            sys.exit(1)
        if os.environ.get("FAKE_GO_FAIL") == tool:
            print(f"compile: writing output: write {{work}}/b0123/_pkg_.a: no space left on device", file=sys.stderr)
            sys.exit(1)
        for p in pkgs:
            target = pathlib.Path(out) / p.rstrip("/").split("/")[-1] if out.endswith("/") else pathlib.Path(out)
            target.write_text("#!/bin/sh\n"); target.chmod(0o755)
        for f in work.iterdir():
            f.unlink()
        work.rmdir()
        sys.exit(0)
    print("fake go: unexpected", args, file=sys.stderr); sys.exit(2)
""").lstrip()


@pytest.fixture(scope="module")
def fake_go(tmp_path_factory):
    bindir = tmp_path_factory.mktemp("fakebin")
    go = bindir / "go"
    go.write_text(FAKE_GO.format(python=sys.executable))
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    return bindir


def build_env(tmp_path, fake_go, **extra):
    env = {
        **os.environ,
        "PATH": f"{fake_go}:{os.environ['PATH']}",
        "GOCACHE": str(tmp_path / "cache"),
        "GOMODCACHE": str(tmp_path / "mod"),
        "ENGINE_BUILD_DIR": str(tmp_path / "engine"),
        "GOTMPDIR": str(tmp_path / "work"),
        **extra,
    }
    if env["GOTMPDIR"]:
        (tmp_path / "work").mkdir(exist_ok=True)
    else:
        del env["GOTMPDIR"]
    return env


def run_build(tmp_path, fake_go, *tools, **extra):
    return subprocess.run(
        [str(BUILD_SH), *tools], env=build_env(tmp_path, fake_go, **extra), capture_output=True, text=True, timeout=120
    )


def trimmed_caches(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("cache-engine-"))


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory, fake_go):
    """One trimmed build of all five tools, as .ci/run runs it."""
    tmp_path = tmp_path_factory.mktemp("trimmed")
    return tmp_path, run_build(tmp_path, fake_go, ENGINE_TRIM_CACHES="1")


def test_trimmed_build_removes_each_tools_build_cache_and_keeps_the_binaries(trimmed):
    tmp_path, done = trimmed
    assert done.returncode == 0, done.stderr
    (bindir,) = done.stdout.splitlines()  # the one line `make test-engine` reads
    for binary in (
        "pulumi",
        "pulumi-language-python",
        "pulumi-language-python-exec",
        "pulumi-resource-kubernetes",
        "kube-apiserver",
        "kube-controller-manager",
        "etcd",
    ):
        assert os.access(os.path.join(bindir, binary), os.X_OK), binary
    # every tool compiled into a cache of its own, and none of those is left
    assert trimmed_caches(tmp_path) == []
    assert list((tmp_path / "work").iterdir()) == []
    for tool in ("provider", "kube", "pulumi", "etcd"):
        assert f"after {tool}: build cache" in done.stderr


def test_untrimmed_build_keeps_the_shared_build_cache(tmp_path, fake_go):
    done = run_build(tmp_path, fake_go, "kube", "etcd")
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "cache").glob("*.a"))) == 2 * 201  # a developer's rebuild after a pin change reuses it


def test_module_downloads_are_counted_not_printed(trimmed):
    tmp_path, done = trimmed
    assert "go: downloading" not in done.stderr
    assert "kube: 30 modules downloaded" in done.stderr
    assert "kube: 200 packages compiled" in done.stderr  # progress, one line per 200 packages
    assert "example.com/kube/pkg17" not in done.stderr
    log = next((tmp_path / "engine").glob("*/logs/kube.log")).read_text()
    assert "go: downloading example.com/dep0 v1.0.0" in log and "example.com/kube/pkg17" in log


def test_a_failed_build_names_the_tool_and_shows_the_end_of_its_log(tmp_path, fake_go):
    done = run_build(tmp_path, fake_go, "kube", "etcd", ENGINE_TRIM_CACHES="1", FAKE_GO_FAIL="kube")
    assert done.returncode == 1
    assert "FAILED: kube; the last lines of" in done.stderr
    assert "kube| compile: writing output:" in done.stderr and "no space left on device" in done.stderr
    assert "FAILED: kube (see the lines above)" in done.stderr
    assert done.stdout == ""  # no tool directory for make to use
    assert trimmed_caches(tmp_path) == []  # trimmed on failure too


def test_a_module_download_broken_by_the_network_is_retried_once(tmp_path, fake_go):
    done = run_build(tmp_path, fake_go, "etcd", ENGINE_TRIM_CACHES="1", FAKE_GO_FLAKY="etcd")
    assert done.returncode == 0, done.stderr
    assert "etcd: a module download failed on the network; trying once more" in done.stderr
    assert "built etcd (etcd)" in done.stderr


def test_a_compile_error_is_not_retried(tmp_path, fake_go):
    done = run_build(tmp_path, fake_go, "etcd", FAKE_GO_FAIL="etcd")
    assert done.returncode == 1
    assert "FAILED: etcd; the last lines of" in done.stderr
    assert "trying once more" not in done.stderr


@pytest.mark.parametrize(
    "tool, fault",
    [
        ("monitoring-crds", {"FAKE_GO_FAIL_DOWNLOAD": "prometheus-operator"}),
        ("provider", {"FAKE_GO_FAIL_RUN": "provider-kubernetes"}),
    ],
)
def test_a_failed_step_before_go_build_fails_the_tool_in_trimmed_mode(tmp_path, fake_go, tool, fault):
    # trimmed builds run each tool behind a subshell: a step that fails there must still stop the tool
    done = run_build(tmp_path, fake_go, tool, ENGINE_TRIM_CACHES="1", **fault)
    assert done.returncode == 1, done.stderr
    assert f"FAILED: {tool} (see the lines above)" in done.stderr
    assert not list((tmp_path / "engine").glob("*/crds/monitoring.coreos.com"))
    assert not list((tmp_path / "engine").glob("*/bin/pulumi-resource-kubernetes"))


def test_go_work_directories_go_to_ram_and_are_removed(tmp_path, fake_go):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine: build.sh keeps go's work directories on disk here")
    done = run_build(tmp_path, fake_go, "etcd", ENGINE_TRIM_CACHES="1", ENGINE_SHM_MIN_GIB="0", GOTMPDIR="")
    assert done.returncode == 0, done.stderr
    work = re.search(r"go build work directories in RAM: (/dev/shm/kimi-k3-go-work\.\S+)", done.stderr).group(1)
    assert not os.path.exists(work)


def test_sigterm_ends_every_build_process_and_removes_the_caches(tmp_path, fake_go):
    env = build_env(tmp_path, fake_go, ENGINE_TRIM_CACHES="1", FAKE_GO_SLEEP="60")
    proc = subprocess.Popen(
        [str(BUILD_SH), "etcd", "kube"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        # wait for both: the second build starts a moment after the first (the old wait for one raced under load)
        while len(fake_builds(fake_go)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(fake_builds(fake_go)) == 2, proc.poll()  # etcd and kube side by side
        proc.send_signal(signal.SIGTERM)  # to build.sh alone, not its process group
        proc.wait(timeout=20)
        time.sleep(0.5)
        assert fake_builds(fake_go) == []
        assert trimmed_caches(tmp_path) == []
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
        proc.communicate()


def fake_builds(fake_go) -> list[str]:
    """The scripted go's `build` processes still running."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"{fake_go}/go build" in line]
