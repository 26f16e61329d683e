"""The argv every multinode worker pod receives after the Dynamo operator's Grove rewrite, kubelet's $(VAR)
expansion and `sh -c` (kimi_k3/offline/operator_rewrite.py, with its sources). Expected strings marked "operator test"
are copied from ai-dynamo/dynamo deploy/operator/internal/dynamo/backend_vllm_test.go and backend_sglang_test.go,
not from our code; the shell is checked against the real /bin/sh."""

import copy
import json
import shutil
import subprocess
import sys

import pytest
from conftest import STACKS, by_kind, main_container, workers

from kimi_k3.offline import operator_rewrite as op
from policies import rules

GROVE_HOST = "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE)"


def test_worker_rewrite_matches_operator_test():
    # operator test "worker uses mp ... Grove": Command python3, Args -m dynamo.vllm --tensor-parallel-size 16
    command, args = op.rewrite_vllm_multinode(
        ["python3"], ["-m", "dynamo.vllm", "--tensor-parallel-size", "16"], "worker", "test-service", 2
    )
    assert command == ["sh", "-c"]
    assert args == [
        "exec python3 -m dynamo.vllm --tensor-parallel-size 16 --distributed-executor-backend mp "
        f"--nnodes 2 --master-addr {GROVE_HOST} --master-port 29500 "
        "--node-rank $((GROVE_PCLQ_POD_INDEX + 1)) --headless"
    ]


def test_leader_rewrite_matches_operator_test():
    command, args = op.rewrite_vllm_multinode(
        ["python3"], ["-m", "dynamo.vllm", "--tensor-parallel-size", "16"], "leader", "test-service", 2
    )
    assert command == ["python3"]
    assert args == [
        "-m",
        "dynamo.vllm",
        "--tensor-parallel-size",
        "16",
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        "2",
        "--master-addr",
        GROVE_HOST,
        "--master-port",
        "29500",
        "--node-rank",
        "0",
    ]


def test_shell_script_injection_matches_operator_test():
    # operator test "shell command worker should get grove env vars in node rank" (sglang flags, same injector)
    flags = (
        "--dist-init-addr $(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-test-service-ldr-0.$(GROVE_HEADLESS_SERVICE)"
        ":29500 --nnodes 3 --node-rank $((GROVE_PCLQ_POD_INDEX + 1))"
    )
    assert op._inject_into_script("python -m dynamo.sglang", flags, "sglang") == "python -m dynamo.sglang " + flags


def test_shell_quote_is_the_operators():
    assert op.shell_quote("/model-cache/moonshotai/Kimi-K3") == "/model-cache/moonshotai/Kimi-K3"
    assert op.shell_quote("$(MODEL_PATH)") == '"\\$(MODEL_PATH)"'
    assert op.shell_quote('{"a":1}') == '"{\\"a\\":1}"'


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$(MODEL_PATH)", "/m"),
        ("$$(MODEL_PATH)", "$(MODEL_PATH)"),  # $$ is kubelet's only escape
        ('"\\$(MODEL_PATH)"', '"\\/m"'),  # the operator's \$ is no escape for kubelet
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("$((GROVE_PCLQ_POD_INDEX + 1))", "$((GROVE_PCLQ_POD_INDEX + 1))"),
        ("$(incomplete", "$(incomplete"),
        ("cost$", "cost$"),
        ("$x$(MODEL_PATH)", "$x/m"),
    ],
)
def test_kubelet_expansion(text, expected):
    assert op.kubelet_expand(text, {"MODEL_PATH": "/m"}) == expected


SCRIPTS = [
    'exec python3 -m dynamo.vllm --model "\\/model-cache/moonshotai/Kimi-K3" --node-rank $((GROVE_PCLQ_POD_INDEX + 1))',
    'exec python3 -m dynamo.vllm --model /model-cache/k3 --kv-transfer-config "{\\"kv_connector\\":\\"Nixl\\"}" '
    "--y 'single $HOME' --z ${GROVE_PCSG_INDEX} --w $GROVE_PCSG_INDEX --headless",
    'exec python3 -m dynamo.vllm --a "\\\\" --b "\\`" --c "\\$x" --d \\$y --e "${GROVE_PCSG_INDEX}-z"',
]


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh on this machine to compare with")
@pytest.mark.parametrize("script", SCRIPTS)
def test_sh_c_emulation_agrees_with_the_real_shell(script, tmp_path):
    fake = tmp_path / "python3"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "GROVE_PCLQ_POD_INDEX": "2", "GROVE_PCSG_INDEX": "0", "HOME": "/h"}
    real = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=True)
    assert op.sh_c_argv(script, env)[1:] == json.loads(real.stdout)


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh on this machine to compare with")
def test_operator_quoting_of_a_single_quote_is_a_shell_syntax_error(tmp_path):
    # ShellQuote turns ' into '"'"' inside its double quotes, which leaves a quote open: sh exits with status 2.
    script = "exec python3 -m dynamo.vllm --chat-template " + op.shell_quote("it's")
    real = subprocess.run(
        [shutil.which("sh"), "-c", script], env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=30
    )
    assert real.returncode == 2 and "quote" in real.stderr.lower()
    with pytest.raises(op.ShellSyntaxError):
        op.sh_c_argv(script, {})


def test_sh_c_emulation_refuses_what_it_does_not_evaluate():
    for script in ("a | b", "a; b", "a & b", "echo $(date)", "echo `date`"):
        with pytest.raises(op.UnsupportedShell):
            op.sh_c_argv(script, {})


# ------------------------------------------------------------------------------------------ rendered pods
def _dgd(objects):
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    return dgd


def _expected_argv(container, nodes, service, dgd_name, role, index):
    """What each pod must run, written out from the operator's documented launch line (not from the emulation)."""
    grove = op.grove_env_for(dgd_name, service)
    host = f"{grove['GROVE_PCSG_NAME']}-{grove['GROVE_PCSG_INDEX']}-{service.lower()}-ldr-0.{grove['GROVE_HEADLESS_SERVICE']}"
    base = [
        "python3",
        "-m",
        "dynamo.vllm",
        *container["args"],
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        str(nodes),
        "--master-addr",
        host,
        "--master-port",
        "29500",
    ]
    return base + (["--node-rank", "0"] if role == "leader" else ["--node-rank", str(index + 1), "--headless"])


def _old_form(objects):
    """The render as it was before the fix: --model $(MODEL_PATH), --served-model-name $(SERVED_MODEL_NAME)."""
    old = copy.deepcopy(objects)
    for comp in workers(_dgd(old)):
        args = main_container(comp)["args"]
        args[args.index("--model") + 1] = "$(MODEL_PATH)"
        args[args.index("--served-model-name") + 1] = "$(SERVED_MODEL_NAME)"
    return old


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_pod_receives_the_exact_argv(stack, rendered):
    dgd = _dgd(rendered[stack].objects)
    model_path = rendered[stack].outputs["modelPath"]
    for comp in workers(dgd):
        container, nodes = main_container(comp), comp["multinode"]["nodeCount"]
        grove = op.grove_env_for(dgd["metadata"]["name"], comp["name"])
        launches = op.multinode_pod_launches(comp, container, grove)
        assert [(p.role, p.index) for p in launches] == [("leader", 0)] + [("worker", i) for i in range(nodes - 1)]
        for pod in launches:
            expected = _expected_argv(container, nodes, comp["name"], dgd["metadata"]["name"], pod.role, pod.index)
            assert list(pod.argv) == expected, f"{comp['name']} {pod.role} {pod.index}"
            assert pod.argv[pod.argv.index("--model") + 1] == model_path
            assert pod.argv[pod.argv.index("--served-model-name") + 1] == "moonshotai/Kimi-K3"


@pytest.mark.parametrize("stack", STACKS)
def test_old_render_form_breaks_non_leader_pods_and_the_rule_says_so(stack, rendered):
    objects = rendered[stack].objects
    model_path = rendered[stack].outputs["modelPath"]
    old = _old_form(objects)
    dgd = _dgd(old)
    for comp in workers(dgd):
        grove = op.grove_env_for(dgd["metadata"]["name"], comp["name"])
        leader, *others = op.multinode_pod_launches(comp, main_container(comp), grove)
        assert leader.argv[leader.argv.index("--model") + 1] == model_path
        assert others and all(p.argv[p.argv.index("--model") + 1] == "\\" + model_path for p in others)

    def findings(objs):
        return [v for v in rules.run_all(objs)[0] if v.rule == "multinode-args-survive-operator-rewrite"]

    assert findings(objects) == []
    old_findings = findings(old)
    assert {v.message.split(":")[0] for v in old_findings} == {f"component {c['name']}" for c in workers(dgd)}
    assert all(
        f"--model '\\\\{model_path}' instead of '{model_path}'" in v.message
        for v in old_findings
        if "--model" in v.message
    )
    assert any("--model" in v.message for v in old_findings)


def test_rule_follows_the_ray_backend_annotation(rendered):
    old = _old_form(rendered["gb300"].objects)
    comp = workers(_dgd(old))[0]
    comp.setdefault("annotations", {})[op.BACKEND_ANNOTATION] = "ray"
    # Under ray the leader itself runs the shell-quoted command line; workers only run `ray start`.
    grove = op.grove_env_for("kimi-k3-gb300", comp["name"])
    leader, worker = op.multinode_pod_launches(comp, main_container(comp), grove, backend="ray")
    assert leader.argv[:3] == ("python3", "-m", "dynamo.vllm") and worker.argv[:2] == ("ray", "start")
    messages = [v.message for v in rules.run_all(old)[0] if v.rule == "multinode-args-survive-operator-rewrite"]
    assert any("(leader 0)" in m for m in messages)
