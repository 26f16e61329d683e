"""DSpark's drafter through the programs that move the weights, run for real (issue 22): the EC2 fetchers' user data
(real bash, stub commands) fetches it first under the same deadline and records a failure where the verify Job
looks for it; their share manifests of it are a complete set to the verify Job even when a share is empty; and the
weights-prefetch program, run with the DaemonSet's rendered drafter environment, leaves a verified copy exactly where
the workers' --speculative-config points."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import by_kind, env_of, main_container, render_with, workers
from support import command_stub

from kimi_k3 import flags as argv_flags
from kimi_k3.aws import storage
from kimi_k3.pods import fetch_checkpoint as fc
from kimi_k3.pods import verify_checkpoint as vc
from kimi_k3.pods import weights_prefetch as wp

REV = "1" * 40
DRAFTER = "Inferact/Kimi-K3-DSpark"
WEIGHTS = "moonshotai/Kimi-K3@" + "a" * 40


def _user_data(tmp_path: Path, fail_drafter: bool) -> tuple[subprocess.CompletedProcess, list[str], Path]:
    bin_, calls, records = tmp_path / "bin", tmp_path / "calls", tmp_path / "records"
    bin_.mkdir()
    records.mkdir()

    stub = command_stub(bin_, calls)

    for name in ("mount", "dnf", "shutdown"):
        stub(name)
    stub("logger", "cat > /dev/null")
    fail = f'[ "$PREFIX" = "{DRAFTER}@{REV}" ] && exit 3' if fail_drafter else ""
    stub(
        "python3.12",
        f'[ "$1" = "-m" ] && exit 0\necho "fetch $MODEL_REPO@$MODEL_REVISION -> $PREFIX" >> {calls}\n{fail}',
    )
    # `aws s3 cp - s3://bkt/<key>` keeps what it is given under records/, by key.
    stub("aws", f'[[ "$*" == "s3 cp --only-show-errors - "* ]] && k="${{@: -1}}" && cat > "{records}/${{k//\\//_}}"')
    text = storage.fetcher_user_data(
        bucket="bkt",
        prefix=WEIGHTS,
        repo="moonshotai/Kimi-K3",
        revision="a" * 40,
        secret_arn="arn:s",
        region="us-east-1",
        index=1,
        count=2,
        hub_version="1.16.4",
        deadline_seconds=60,
        drafter=(DRAFTER, REV, f"{DRAFTER}@{REV}"),
    )
    script = tmp_path / "user-data.sh"
    script.write_text(text.replace("/var/log/", f"{tmp_path}/").replace("/opt/", f"{tmp_path}/"))
    proc = subprocess.run(
        ["bash", str(script)], env={"PATH": f"{bin_}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60
    )
    return proc, calls.read_text().splitlines(), records


def test_the_fetchers_fetch_the_drafter_first_at_its_pinned_commit(tmp_path):
    proc, calls, records = _user_data(tmp_path, fail_drafter=False)
    fetches = [c for c in calls if c.startswith("fetch ")]
    assert fetches == [
        f"fetch {DRAFTER}@{REV} -> {DRAFTER}@{REV}",
        f"fetch moonshotai/Kimi-K3@{'a' * 40} -> {WEIGHTS}",
    ], calls
    assert proc.returncode == 0 and calls[-1] == "shutdown -h now"
    # A replaced fetcher clears both of its earlier failure records.
    for prefix in (WEIGHTS, f"{DRAFTER}@{REV}"):
        assert f"aws s3 rm --only-show-errors s3://bkt/{fc.failure_key(prefix, 1, 2)}" in calls
    assert list(records.iterdir()) == []


def test_a_failed_drafter_fetch_is_recorded_where_the_verify_job_looks(tmp_path):
    proc, calls, records = _user_data(tmp_path, fail_drafter=True)
    assert proc.returncode != 0 and calls[-1] == "shutdown -h now"
    assert not any(c.startswith("fetch moonshotai/Kimi-K3") for c in calls), "the weights step never ran"
    for prefix in (WEIGHTS, f"{DRAFTER}@{REV}"):
        record = records / f"s3://bkt/{fc.failure_key(prefix, 1, 2)}".replace("/", "_")
        assert record.read_text().startswith(f"fetcher 2/2 failed (exit 3) at: fetch_checkpoint.py (drafter {DRAFTER}@")


def _drafter_files() -> dict[str, bytes]:
    return {
        "model-00001-of-00002.safetensors": os.urandom(3000),
        "model-00002-of-00002.safetensors": os.urandom(1000),
        "model.safetensors.index.json": json.dumps(
            {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
        ).encode(),
        "config.json": b'{"architectures": ["K3DSparkModel"]}',
    }


def _bucket(root: Path, files: dict[str, bytes], shares: int) -> Path:
    """The drafter's prefix as `shares` fetchers leave it: its files and one manifest per share (some empty)."""
    src = root / f"{DRAFTER}@{REV}"
    for rel, blob in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(blob)
    ids = {rel: (len(b), hashlib.sha256(b).hexdigest()) for rel, b in files.items()}
    (src / fc.MANIFEST_DIR).mkdir()
    for i, share in enumerate(fc.partition({rel: s for rel, (s, _) in ids.items()}, shares)):
        doc = fc.share_manifest(DRAFTER, REV, i, shares, {rel: ids[rel] for rel in share})
        (src / fc.manifest_key("", i, shares).lstrip("/")).write_text(doc)
    return src


def test_the_verify_job_reads_the_drafters_manifests_from_more_fetchers_than_files(tmp_path):
    files = _drafter_files()
    src = _bucket(tmp_path, files, shares=8)  # 4 files over 8 fetchers: 4 empty shares
    problems, listed = vc.read_manifest(src, REV)
    assert problems == [] and set(listed) == set(files)
    assert vc.read_manifest(src, "2" * 40)[0], "another revision's manifests never count"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_node_local_copy_puts_the_drafter_where_the_workers_read_it(tmp_path):
    """The prefetch DaemonSet's rendered drafter container, its paths moved under tmp_path, run until Ready."""
    r = render_with("gb300-v1.5", serving={"speculation": {"method": "dspark", "drafterRevision": REV}})
    (ds,) = [d for d in by_kind(r.objects, "DaemonSet") if d["metadata"]["name"] == "kimi-k3-weights-prefetch"]
    pod = ds["spec"]["template"]["spec"]
    (c,) = [x for x in pod["containers"] if x["name"] == "prefetch-drafter"]
    remote, node_local = tmp_path / "remote", tmp_path / "node"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/model-cache-remote"] == "model-cache-remote" and mounts["/node-local"] == "node-local"
    files = _drafter_files()
    _bucket(remote, files, shares=4)

    def here(value: str) -> str:
        return value.replace("/model-cache-remote", str(remote)).replace("/node-local", str(node_local))

    env = {k: here(v) for k, v in env_of(c).items() if v is not None}
    root = Path(env["LOCAL_ROOT"])
    root.mkdir(parents=True)
    env |= {
        "POD_IP": "127.0.0.1",
        "PEERS_DNS": "localhost",
        "EXPECTED_PEERS": "1",
        "PORT": str(_free_port()),
        "PEER_JOIN_SECONDS": "1",
        "PATH": os.environ.get("PATH", ""),
        "FS_PATH": wp.filesystem_path(Path("/proc/self/mountinfo").read_text(), str(root))[0],
    }
    marker = Path(here(c["readinessProbe"]["exec"]["command"][-1]))
    proc = subprocess.Popen([sys.executable, wp.__file__], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.kill()
        out = proc.communicate()[0].decode()
    assert marker.is_file() and marker.read_text() == "local\n", out
    # The workers mount <node-local root>/<weights revision> at /model-cache: the drafter must be there, verified.
    hostpath = next(v["hostPath"]["path"] for v in pod["volumes"] if v["name"] == "node-local")
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    for w in workers(dgd):
        vols = {v["name"]: v for v in w["podTemplate"]["spec"]["volumes"]}
        mounted = next(m for m in main_container(w)["volumeMounts"] if m["mountPath"] == "/model-cache")
        local = vols[mounted["name"]]["hostPath"]["path"]
        assert local.startswith(hostpath + "/")
        spec = json.loads(argv_flags.flag_value(main_container(w)["args"], "--speculative-config"))
        seen = node_local / local[len(hostpath) + 1 :] / spec["model"][len("/model-cache/") :]
        for rel, blob in files.items():
            assert (seen / rel).read_bytes() == blob and not (seen / rel).is_symlink(), (w["name"], rel)
