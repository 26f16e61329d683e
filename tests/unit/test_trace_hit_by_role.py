"""The KV hit rate per role (issue 21) from the KV router's own counters as AIPerf's server_metrics_export.json
carries them (the shape read off a real rehearsal's export, AIPerf 0.13 against Dynamo 1.6.1's frontend: counters
under their name less `_total` with stats.total over the profiling phase, histograms with stats.sum, the router's
`phase` label), and report.md showing the trace sections beside a load run."""

from __future__ import annotations

from types import SimpleNamespace

from kimi_k3.pods import workload
from kimi_k3.rehearsal import trace_report
from kimi_k3.rehearsal.report import render_markdown


def _series(phase, **stats):
    return {"endpoint_url": "http://127.0.0.1:1/metrics", "labels": {"phase": phase, "router_id": "9"}, "stats": stats}


EXPORT = {
    "metrics": {
        "dynamo_component_router_input_sequence_tokens": {
            "type": "histogram",
            "series": [_series("prefill", sum=50542.0, count=20), _series("decode", sum=50542.0, count=20)],
        },
        "dynamo_component_router_kv_selected_cached_prefix_tokens": {
            "type": "counter",
            "series": [_series("prefill", total=23040.0, rate=1.0), _series("decode", total=0.0, rate=0.0)],
        },
        "dynamo_component_router_kv_worker_reused_tokens": {
            "type": "counter",
            "series": [_series("prefill", total=0.0), _series("decode", total=0.0)],
        },
        # the frontend's own figures, not per role: never mistaken for one
        "dynamo_frontend_cached_tokens": {"type": "histogram", "series": [{"labels": {}, "stats": {"sum": 21504.0}}]},
    }
}


def test_hit_rate_per_phase_is_cached_over_prompt_tokens_of_that_phase():
    got = workload.hit_rate_by_phase(EXPORT)
    assert got == {
        "decode": {"input_tokens": 50542, "cached_tokens": 0, "worker_reported_reused_tokens": 0, "hit_rate": 0.0},
        "prefill": {
            "input_tokens": 50542,
            "cached_tokens": 23040,
            "worker_reported_reused_tokens": 0,
            "hit_rate": round(23040 / 50542, 4),
        },
    }


def test_no_router_metrics_means_no_figure_not_zero():
    assert workload.hit_rate_by_phase(None) == {}
    assert workload.hit_rate_by_phase({"metrics": {}}) == {}
    idle = {"metrics": {"dynamo_component_router_input_sequence_tokens": {"series": [_series("aggregated", sum=0)]}}}
    assert workload.hit_rate_by_phase(idle)["aggregated"]["hit_rate"] is None


def test_roles_map_to_the_routers_phase_names():
    agg = {
        "metrics": {
            "dynamo_component_router_input_sequence_tokens": {"series": [_series("aggregated", sum=1000.0)]},
            "dynamo_component_router_kv_selected_cached_prefix_tokens": {
                "series": [_series("aggregated", total=400.0)]
            },
        }
    }
    plan = SimpleNamespace(roles=[SimpleNamespace(key="worker", mode="agg", replicas=2)])
    got = trace_report.hit_by_role(plan, agg)
    assert got["worker"]["hit_rate"] == 0.4 and got["worker"]["worker_reported_reused_tokens"] is None
    disagg = SimpleNamespace(
        roles=[SimpleNamespace(key="prefill", mode="prefill", replicas=1), SimpleNamespace(key="decode", mode="decode")]
    )
    got = trace_report.hit_by_role(disagg, EXPORT)
    assert set(got) == {"prefill", "decode"} and "no KV events" in got["decode"]["note"]


def test_report_md_shows_the_trace_sections_beside_a_load_run():
    # A load run's TTFT dict once shadowed the trace section: report.md lost every trace section.
    trace = {
        "file": "t.jsonl",
        "requests": 2,
        "duration_s": 1.0,
        "replay_seconds": 1.0,
        "speedup": 1,
        "isl": {"p50": 1, "p90": 1, "p99": 1},
        "osl": {"p50": 1, "p90": 1, "p99": 1},
        "achieved_hit_rate": 0.1,
        "best_hit_rate": 0.2,
        "block_size": 1536,
        "hit_rate_by_role": trace_report.hit_by_role(
            SimpleNamespace(roles=[SimpleNamespace(key="prefill", mode="prefill")]), EXPORT
        ),
    }
    run = {"requests": 2, "ttft_ms": {"p50": 1, "p90": 2, "p99": 3}, "itl_ms": {"p50": 1, "p90": 1, "p99": 1}}
    report = {
        "stack": "s",
        "failure": None,
        "smoke": {"passed": True, "checks": {}},
        "ready_seconds": 1.0,
        "block_size": 1536,
        "max_model_len": 1,
        "kv_hit_rate": 0.1,
        "workers": [],
        "roles": {},
        "runs": {"trace": {**run, "output_tokens_per_second": 1.0}},
        "worker_requests": {},
        "smoke_failures": {},
        "trace": trace,
    }
    md = render_markdown(report)
    assert "## Trace: KV hit rate per role" in md and "| prefill (prefill) | 50,542 | 23,040 | 45.6% | 0 |" in md


def test_the_cluster_jobs_log_line_carries_the_hit_rate_per_phase(tmp_path, monkeypatch):
    """The Job's runner (kimi_k3/pods/workload.py run_plan) reads the same export AIPerf writes in its pod."""
    import json

    art = tmp_path / "trace"

    def fake_aiperf(argv, timeout):
        art.mkdir()
        (art / workload.RESULT_FILE).write_text(json.dumps({"request_count": {"avg": 20}}))
        (art / workload.SERVER_METRICS_FILE).write_text(json.dumps(EXPORT))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(workload.subprocess, "run", fake_aiperf)
    lines: list[str] = []
    plan = {"run_deadline_seconds": 5, "runs": {"trace": ["profile", "--artifact-dir", str(art)]}}
    results, failures = workload.run_plan(plan, log=lines.append)
    assert not failures
    logged = json.loads(lines[-1].split(" ", 1)[1])
    assert logged["kv_hit_rate_by_phase"] == {"decode": 0.0, "prefill": round(23040 / 50542, 4)}
