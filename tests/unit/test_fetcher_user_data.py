"""Issue 19 finding 5: a failed S3 fetcher powers off and says why. The fetcher's user data (kimi_k3.aws.nodes.
fetcher_user_data) runs here under the real bash with every external command (aws, dnf, mount, python3.12, shutdown,
logger) replaced by a stub that records its call; each step is made to fail in turn. Every run must end in
`shutdown -h now`, and a failed one must first put a failure record naming the step into the bucket, where the
verify Job reads it (tests/unit/test_verify_checkpoint.py). Under the previous user data (set -e, then shutdown as the last
line) a failure exited before the power-off and left no record."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import command_stub

from kimi_k3.aws import iam, storage
from kimi_k3.pods import fetch_checkpoint as fc

STEPS = {  # stub that fails -> what the failure record must name
    "mount": "size /dev/shm",
    "dnf": "install python",
    "pip": "install huggingface_hub",
    "secretsmanager": "read the token from Secrets Manager",
    "fetch": "fetch_checkpoint.py",
}


def _run(tmp_path: Path, fail: str | None) -> tuple[int, list[str], str]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    record = tmp_path / "record"

    stub = command_stub(bin_, calls)

    fails = lambda key: f'[ "{fail}" = "{key}" ] && exit 3'  # noqa: E731
    stub("mount", fails("mount"))
    stub("dnf", fails("dnf"))
    stub("logger", "cat > /dev/null")
    stub("shutdown")
    stub("python3.12", fails("pip") + '\n[ "$1" = "-m" ] && exit 0\n' + fails("fetch"))
    stub(
        "aws",
        fails("secretsmanager").replace("[ ", '[[ "$*" == *secretsmanager* ]] && [ ') + "\n"
        f'[[ "$*" == "s3 cp --only-show-errors - "* ]] && cat > {record}\n'
        "echo token",
    )
    text = storage.fetcher_user_data(
        bucket="bkt",
        prefix="moonshotai/Kimi-K3@" + "a" * 40,
        repo="moonshotai/Kimi-K3",
        revision="a" * 40,
        secret_arn="arn:s",
        region="us-east-1",
        index=1,
        count=4,
        hub_version="1.16.4",
    )
    text = text.replace("/var/log/", f"{tmp_path}/").replace("/opt/", f"{tmp_path}/")  # writable here
    script = tmp_path / "user-data.sh"
    script.write_text(text)
    proc = subprocess.run(
        ["bash", str(script)], env={"PATH": f"{bin_}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60
    )
    return proc.returncode, calls.read_text().splitlines(), record.read_text() if record.exists() else ""


@pytest.mark.parametrize("fail", sorted(STEPS))
def test_a_failed_step_is_recorded_in_the_bucket_and_the_fetcher_powers_off(tmp_path, fail):
    rc, calls, record = _run(tmp_path, fail)
    assert rc != 0
    assert calls[-1] == "shutdown -h now", f"no power-off after a failed {fail}: {calls}"
    key = fc.failure_key("moonshotai/Kimi-K3@" + "a" * 40, 1, 4)
    assert f"aws s3 cp --only-show-errors - s3://bkt/{key}" in calls
    assert record.startswith(f"fetcher 2/4 failed (exit 3) at: {STEPS[fail]}"), record


def test_a_successful_run_clears_an_earlier_failure_and_powers_off(tmp_path):
    rc, calls, record = _run(tmp_path, None)
    key = fc.failure_key("moonshotai/Kimi-K3@" + "a" * 40, 1, 4)
    assert rc == 0 and calls[-1] == "shutdown -h now" and record == ""
    assert f"aws s3 rm --only-show-errors s3://bkt/{key}" in calls, "a replaced fetcher's old failure is gone"
    assert "python3.12 /opt/fetch_checkpoint.py".replace("/opt/", f"{tmp_path}/") in calls


def test_the_failure_record_is_the_only_object_a_fetcher_may_delete():
    import json

    doc = json.loads(iam.fetcher_policy("arn:aws:s3:::b", "arn:s"))
    deletes = [s for s in doc["Statement"] if any("Delete" in a for a in s["Action"])]
    assert deletes == [
        {"Effect": "Allow", "Action": ["s3:DeleteObject"], "Resource": ["arn:aws:s3:::b/*/.kimi-k3/failed-*"]}
    ]
    assert fc.failure_key("p", 0, 4).startswith("p/.kimi-k3/failed-")
