"""Issue 19 finding 2: the smoke test's cache-hit probe spans whole KV blocks of the block size the render sets,
whatever the tokenizer, and the rehearsal and the in-cluster Job run the same probe with the same criterion.

vLLM reuses whole blocks only (1536 tokens at TP8, 768 at TP16 for Kimi K3): the old fixed prompt, 1160 English
words (~1.4k tokens under a large-vocabulary tokenizer), reports cached_tokens 0 on a healthy GB300 graph; the
rehearsal's fixture tokenizer made 4080 tokens of it, so only the cluster could fail."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, STACKS, by_kind

from kimi_k3.commands.main import main as cli_main
from kimi_k3.graph import role_plans
from kimi_k3.k8s import deployment as manifests
from kimi_k3.pods import smoke
from kimi_k3.rehearsal import plan as rehearsal
from policies import rules

REHEARSE_PYTHON = Path(os.environ.get("KIMI_K3_REHEARSE_PYTHON", ROOT / ".venv-rehearse" / "bin" / "python"))
# The smoke prompt before this fix (kimi_k3/pods/smoke.py at c367fbd), for the old-form cases.
OLD_PROMPT = (
    "You are the planning agent of a build system. Follow the repository's conventions, keep every "
    "change small, explain each tool call, and never touch files outside the work tree. "
) * 40


def _job(objects):
    (job,) = [o for o in by_kind(objects, "Job") if o["metadata"]["name"].endswith("smoke-test")]
    return job


def _args(job):
    return job["spec"]["template"]["spec"]["containers"][0]["args"]


def _fired(objects, rule="smoke-probe-spans-kv-block"):
    violations, skipped = rules.run_all(objects)
    return [v.message for v in violations if v.rule == rule], [s.reason for s in skipped if s.rule == rule]


def _worker_blocks(objects):
    dgd = by_kind(objects, "DynamoGraphDeployment")[0]
    out = []
    for c in dgd["spec"]["components"]:
        args = c["podTemplate"]["spec"]["containers"][0]["args"]
        if "--block-size" in args:
            out.append(int(args[args.index("--block-size") + 1]))
    return out


# ------------------------------------------------------------------------------------------ the probe itself
def test_probe_has_the_words_it_promises_and_is_deterministic():
    probe = smoke.cache_probe(4608)
    words = probe.split()
    assert len(words) == 4608 and all(len(w) == 3 and w.isalpha() and w.islower() for w in words)
    assert probe == smoke.cache_probe(4608), "the Job and the rehearsal send byte-identical prompts"
    assert smoke.probe_tokens(1536) == smoke.PROBE_BLOCKS * 1536 >= 2 * 1536


@pytest.mark.parametrize("stack", STACKS)
def test_job_and_rehearsal_size_the_probe_from_the_rendered_workers_block(stack, rendered):
    objects = rendered[stack].objects
    args = _args(_job(objects))
    block = int(args[args.index("--kv-block-size") + 1])
    assert block == max(_worker_blocks(objects)), "the largest block any worker runs, as rendered"
    assert int(args[args.index("--cache-probe-tokens") + 1]) == smoke.probe_tokens(block)
    # the rehearsal plan passes the same block to the same smoke.run (kimi_k3/commands/rehearse.py)
    from kimi_k3.blueprint import load_stack

    _, graph = load_stack(stack, ROOT)
    plan = rehearsal.plan_rehearsal(
        graph, role_plans.role_kv_plans(graph), http_port=8000, metrics_ports=range(9100, 9200), model_path="/m"
    )
    assert plan.smoke_block_size == block == manifests.smoke_block_size(graph)
    assert {1536: "gb300", 768: "gb200"}[block] == stack.split("-")[0], "TP8 on GB300, TP16 on GB200"


@pytest.fixture(scope="module")
def tokenizer_counts(tmp_path_factory):
    """Token counts under real BPE tokenizers (the `tokenizers` library of the rehearsal venv): the rehearsal's own
    fixture, and an adversarial byte-level BPE trained on the probe and the old prompt themselves with a vocabulary
    large enough to learn every word of both whole (what a real 160k-entry vocabulary does to common words)."""
    if not REHEARSE_PYTHON.is_file():
        pytest.skip(
            f"{REHEARSE_PYTHON} missing: token counts need the rehearsal venv's tokenizers (make rehearse-venv)"
        )
    out = tmp_path_factory.mktemp("tok")
    script = f"""
import json, sys
sys.path[:0] = [{str(ROOT / "kimi_k3" / "rehearsal")!r}, {str(ROOT / "kimi_k3" / "pods")!r}]
import fixture as rehearse_fixture, smoke
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
rehearse_fixture.build(Path({str(out / "fixture")!r}), 1048576)
fixture = Tokenizer.from_file({str(out / "fixture" / "tokenizer.json")!r})
probe = smoke.cache_probe(smoke.probe_tokens(1536))
old = {OLD_PROMPT!r}
greedy = Tokenizer(models.BPE(unk_token="<unk>"))
greedy.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
greedy.decoder = decoders.ByteLevel()
greedy.train_from_iterator([probe, old] * 4, trainers.BpeTrainer(vocab_size=40000, show_progress=False,
                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
print(json.dumps({{name: {{"probe": len(t.encode(probe).ids), "old": len(t.encode(old).ids)}}
                  for name, t in (("fixture", fixture), ("greedy", greedy))}}))
"""
    done = subprocess.run(
        [str(REHEARSE_PYTHON), "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.rehearse  # needs .venv-rehearse: runs in make test-rehearse, where it exists
def test_probe_spans_its_words_in_tokens_under_any_bpe_the_old_prompt_did_not(tokenizer_counts):
    words = smoke.probe_tokens(1536)
    for name, counts in tokenizer_counts.items():
        assert counts["probe"] >= words, (name, counts)  # >= 3 blocks of 1536: >= 2 cached on a repeat
    # the old form: a tokenizer that knows its words (as Kimi K3's does English) makes it shorter than one GB300
    # block, so vLLM caches nothing; the rehearsal's fixture inflated it past one block and passed
    assert tokenizer_counts["greedy"]["old"] < 1536 < tokenizer_counts["fixture"]["old"]


# ------------------------------------------------------------------------------------------ the criterion
class _WholeBlockCache(BaseHTTPRequestHandler):
    """A frontend over a worker that caches as vLLM does: only whole blocks of the longest prompt prefix seen
    before are reported cached; tokens are the prompt's words (the probe's lower bound)."""

    block = 1536
    seen: list[list[str]] = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tokens = body["messages"][0]["content"].split()
        common = max(
            (
                next((i for i, (a, b) in enumerate(zip(s, tokens)) if a != b), min(len(s), len(tokens)))
                for s in self.seen
            ),
            default=0,
        )
        self.seen.append(tokens)
        cached = min(common, len(tokens) - 1) // self.block * self.block
        raw = json.dumps(
            {
                "choices": [{"message": {"content": "ok"}}],
                "usage": {
                    "prompt_tokens": len(tokens),
                    "completion_tokens": 1,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def whole_block_frontend(monkeypatch):
    monkeypatch.setattr(smoke, "PREFIX_CACHE_SECONDS", 0)
    monkeypatch.setattr(smoke.time, "sleep", lambda s: None)
    _WholeBlockCache.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WholeBlockCache)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield smoke.Client(f"http://127.0.0.1:{server.server_port}", 10)
    server.shutdown()


def test_check_passes_on_whole_block_reuse_and_the_old_prompt_did_not(whole_block_frontend, monkeypatch):
    assert smoke.check_prefix_cache(whole_block_frontend, "m", 1 << 20, kv_block_size=1536) is None
    # old form: the fixed prompt, any cached token counted as a pass
    monkeypatch.setattr(smoke, "cache_probe", lambda n: OLD_PROMPT)
    why = smoke.check_prefix_cache(whole_block_frontend, "m", 1 << 20, kv_block_size=1536, probe_len=1537)
    assert why and "cached_tokens=0" in why and "want >= 1536" in why


def test_check_refuses_to_run_without_the_block_or_with_a_probe_shorter_than_one(whole_block_frontend):
    assert "no --kv-block-size" in smoke.check_prefix_cache(whole_block_frontend, "m", 1 << 20)
    assert "cannot span one whole 1536-token block" in smoke.check_prefix_cache(
        whole_block_frontend, "m", 1 << 20, kv_block_size=1536, probe_len=1200
    )


# ------------------------------------------------------------------------------------------ the rule
@pytest.mark.parametrize("stack", STACKS)
def test_rule_passes_on_our_stacks_and_fails_on_their_old_render(stack, rendered):
    objects = rendered[stack].objects
    assert _fired(objects) == ([], [])
    old = copy.deepcopy(objects)
    args = _args(_job(old))
    for flag in ("--kv-block-size", "--cache-probe-tokens"):  # the Job's args as rendered before this fix
        del args[args.index(flag) : args.index(flag) + 2]
    messages, _ = _fired(old)
    assert (
        len(messages) == 1
        and "no --kv-block-size" in messages[0]
        and f"{max(_worker_blocks(old))}-token" in messages[0]
    )


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"--kv-block-size": "768"}, "--kv-block-size 768 is below the largest worker block (1536)"),
        ({"--cache-probe-tokens": "2000"}, "shorter than 2 blocks of the largest worker block"),
        ({"--kv-block-size": "4700", "--cache-probe-tokens": "4608"}, "leaves only 4608 in whole 1536-token blocks"),
        ({"--max-model-len": "8192"}, "over the --max-model-len 8192 context"),
    ],
)
def test_rule_names_each_way_a_probe_cannot_prove_a_block_hit(rendered, change, expected):
    objects = copy.deepcopy(rendered["gb300-disagg"].objects)
    args = _args(_job(objects))
    for flag, value in change.items():
        args[args.index(flag) + 1] = value
    messages, _ = _fired(objects)
    assert any(expected in m for m in messages), messages


def test_rule_on_a_hand_written_recipe_file(tmp_path, rendered, capsys):
    """`kimi-k3 check` on a YAML file somebody wrote: a graph and a Job that runs our smoke script the old way."""
    objects = copy.deepcopy(rendered["gb300"].objects)
    dgd = by_kind(objects, "DynamoGraphDeployment")[0]
    job = copy.deepcopy(_job(objects))
    args = _args(job)
    del args[args.index("--kv-block-size") : args.index("--kv-block-size") + 4]
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump_all([dgd, job]))
    assert cli_main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "smoke-probe-spans-kv-block  Job/kimi-k3-smoke-test" in out and "no --kv-block-size" in out


def test_rule_not_evaluated_when_the_workers_block_is_unknown(rendered):
    objects = copy.deepcopy(rendered["gb300"].objects)
    dgd = by_kind(objects, "DynamoGraphDeployment")[0]
    for c in dgd["spec"]["components"]:
        args = c["podTemplate"]["spec"]["containers"][0]["args"]
        if "--block-size" in args:
            del args[args.index("--block-size") : args.index("--block-size") + 2]
    messages, skipped = _fired(objects)
    assert messages == [] and skipped and "KV block is not known" in skipped[0]
