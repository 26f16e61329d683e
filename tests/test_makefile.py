"""The README's main command: `make up STACK=...` drives the Pulumi CLI in the right order, or explains why not."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

FAKE_PULUMI = """#!/bin/sh
echo "$*" >> "$PULUMI_LOG"
case "$*" in "config get kimi-k3:hfToken"*) [ -n "$HAS_TOKEN" ] || exit 1 ;; esac
exit 0
"""


def make(target: str, tmp_path, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI)
    fake.chmod(0o755)
    log = tmp_path / "pulumi.log"
    proc = subprocess.run(["make", "--no-print-directory", target, "STACK=gb300-disagg"], cwd=ROOT,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PULUMI_LOG": str(log),
                               "PULUMI_BACKEND_URL": f"file://{tmp_path}/state", **env},
                          capture_output=True, text=True, timeout=300)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_make_up_runs_pulumi_up_with_the_policy_pack(tmp_path):
    proc, calls = make("up", tmp_path, HAS_TOKEN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls == ["stack select --create gb300-disagg", "config get kimi-k3:hfToken --stack gb300-disagg",
                     "up --stack gb300-disagg --policy-pack policies"]


def test_make_up_without_a_token_says_how_to_set_it_and_runs_nothing(tmp_path):
    proc, calls = make("up", tmp_path)
    assert proc.returncode != 0
    assert "pulumi config set --secret kimi-k3:hfToken" in proc.stdout + proc.stderr
    assert not any(c.startswith("up ") for c in calls)


def test_make_up_without_the_pulumi_cli_says_how_to_install_it(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}  # no pulumi anywhere
    proc = subprocess.run(["make", "--no-print-directory", "up", "STACK=gb300-disagg"], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "The Pulumi CLI is not installed" in proc.stdout and "make render STACK=gb300-disagg" in proc.stdout
