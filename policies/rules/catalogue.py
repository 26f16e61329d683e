"""The catalogue of deployment rules: one entry per rule (name, description, check, level, scope, config), in the
order `kimi-k3 check` and the pack report them. The rules themselves live in their family modules."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

from policies.rules.access import check_aws_least_privilege
from policies.rules.autoscaling import check_planner_owns_worker_replicas
from policies.rules.base import (
    ADVISORY,
    DEFAULT_MIN_STARTUP_SECONDS,
    MANDATORY,
    SHAPE_RULE,
    Result,
    Rule,
    check_object_shape,
)
from policies.rules.gke import check_a4x_max_pods_schedule
from policies.rules.kv_transport import (
    check_disagg_roles_use_nixl,
    check_efa_uses_libfabric,
    check_frontend_block_size_matches_workers,
    check_kv_router_has_kv_events,
    check_kv_transport_consistent,
    check_no_removed_flags,
    check_nvlink_kv_roles_share_compute_domain,
    check_ucx_settings_consistent,
    check_worker_block_size_is_vllms,
)
from policies.rules.model_path import (
    check_env_refs_provable,
    check_env_refs_resolve,
    check_frontend_reads_model_path,
    check_model_cache_read_only,
    check_model_path_under_cache_mount,
    check_multinode_args_survive_operator_rewrite,
    check_roles_agree_on_model,
)
from policies.rules.observability import check_alerts_match_metric_units, check_smoke_probe_spans_kv_block
from policies.rules.placement import check_frontend_in_workers_zone
from policies.rules.portability import check_images_pullable, check_no_dev_mode_server, check_no_hard_coded_clique
from policies.rules.provided_domain import check_nvlink_roles_in_provided_domain
from policies.rules.qos import check_serving_containers_request_resources
from policies.rules.safety import (
    check_graph_await_reports_failure,
    check_hf_token_from_secret,
    check_images_pinned,
    check_job_await_reports_failure,
    check_model_cache_retained,
    check_pods_run_on_image_arch,
    check_runtime_version_declared,
    check_serving_containers_unprivileged,
    check_startup_budget_covers_load,
)
from policies.rules.secrets import check_env_secrets_from_secret
from policies.rules.sglang import (
    VLLM_ONLY_RULES,
    check_sglang_disagg_roles_agree,
    check_sglang_router_block_is_page,
    check_sglang_tp_spans_whole_nodes,
    vllm_only,
)
from policies.rules.storage import check_shared_mounts_writable
from policies.rules.topology import (
    check_gpu_totals_match_recipe,
    check_graph_fits_node_pool,
    check_model_fits_at_tp,
    check_multinode_claims_compute_domain,
    check_pods_take_whole_nodes,
    check_tp_group_fits_nvlink_domain,
    check_tp_group_pinned_to_clique,
    check_tp_spans_whole_nodes,
)
from policies.rules.upgrades import (
    check_frontend_migrates_requests,
    check_graph_named_stably,
)


def _rule(
    name: str,
    description: str,
    check: Callable[..., Iterable[Result]],
    level: str = MANDATORY,
    scope: str = "object",
    config_schema: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> Rule:
    if name in VLLM_ONLY_RULES:  # SGLang workers: "not applicable", never a silent pass (policies/rules/sglang.py)
        check = vllm_only(check)
    return Rule(name, description, level, scope, check, config_schema or {})


RULES: tuple[Rule, ...] = (
    _rule(
        "tp-spans-whole-nodes",
        "A worker's TP x PP equals nodes per replica x GPUs per pod.",
        check_tp_spans_whole_nodes,
    ),
    _rule(
        "pods-take-whole-nodes", "Multinode worker pods request all GPUs of their node.", check_pods_take_whole_nodes
    ),
    _rule(
        "multinode-claims-compute-domain",
        "Multinode workers claim a channel of an existing ComputeDomain.",
        check_multinode_claims_compute_domain,
        scope="stack",
    ),
    _rule(
        "tp-group-pinned-to-clique",
        "Multinode TP groups need required podAffinity on nvidia.com/gpu.clique.",
        check_tp_group_pinned_to_clique,
    ),
    _rule(
        "tp-group-fits-nvlink-domain",
        "A TP group spans no more nodes than one NVLink domain holds.",
        check_tp_group_fits_nvlink_domain,
    ),
    _rule(
        "graph-fits-node-pool",
        "The graph's GPU nodes fit the GPU node pool.",
        check_graph_fits_node_pool,
        scope="stack",
        config_schema={
            "gpu_node_pool_nodes": {"type": "integer", "minimum": 0, "description": "Nodes in the GPU node pool"}
        },
    ),
    _rule(
        "gpu-totals-match-recipe",
        "GPUs requested equal the recipe's total (kimi-k3.io/gpus annotation).",
        check_gpu_totals_match_recipe,
    ),
    _rule(
        "model-fits-at-tp",
        "Weights plus one max-length request fit in GPU memory at the worker's TP (planner).",
        check_model_fits_at_tp,
    ),
    _rule(
        "env-refs-resolve",
        "Every $(VAR) and shell ${VAR} a container uses is defined in its env.",
        check_env_refs_resolve,
    ),
    _rule(
        "env-refs-provable",
        "Variable references that only envFrom could define cannot be proven.",
        check_env_refs_provable,
        level=ADVISORY,
    ),
    _rule(
        "model-path-under-cache-mount",
        "--model resolves to an absolute path under a model-cache mount.",
        check_model_path_under_cache_mount,
    ),
    _rule(
        "multinode-args-survive-operator-rewrite",
        "Every pod of a multinode vLLM worker receives the args the spec "
        "means after the Dynamo operator's sh -c rewrite and kubelet's $(VAR) expansion (no $(VAR) in its args).",
        check_multinode_args_survive_operator_rewrite,
    ),
    _rule(
        "roles-agree-on-model",
        "All workers serve the same model path under the same served name.",
        check_roles_agree_on_model,
    ),
    _rule(
        "frontend-reads-model-path",
        "A frontend serving workers that load a local model path mounts that path "
        "(it reads tokenizer and config from where workers register the model).",
        check_frontend_reads_model_path,
    ),
    _rule("model-cache-mounted-read-only", "Workers mount the model cache read-only.", check_model_cache_read_only),
    _rule(
        "disagg-roles-use-nixl",
        "Prefill/decode roles set --disaggregation-mode and the NixlConnector.",
        check_disagg_roles_use_nixl,
    ),
    _rule(
        "no-removed-flags",
        "Workers use no removed vLLM flags (--is-prefill-worker, --is-decode-worker).",
        check_no_removed_flags,
    ),
    _rule(
        "ucx-settings-consistent",
        "UCX_TLS does not exclude cuda_ipc while UCX_CUDA_IPC_ENABLE_MNNVL=y.",
        check_ucx_settings_consistent,
    ),
    _rule("efa-uses-libfabric", "Workers on EFA select NIXL's LIBFABRIC backend.", check_efa_uses_libfabric),
    _rule(
        "nvlink-kv-roles-share-compute-domain",
        "Prefill and decode that hand KV over NVLink claim one "
        "ComputeDomain (one IMEX domain) and, where pinned, one NVLink clique.",
        check_nvlink_kv_roles_share_compute_domain,
    ),
    _rule(
        "nvlink-roles-in-provided-compute-domain",
        "On a provider's ComputeDomain, every role moving KV or its TP group over NVLink claims "
        "that domain's channel in its namespace, and the stack creates no ComputeDomain of its own.",
        check_nvlink_roles_in_provided_domain,
        scope="stack",
    ),
    _rule(
        "kv-transport-consistent",
        "KV over EFA (NIXL LIBFABRIC) comes with EFA devices and an EFA runtime image (vllm-runtime:<version>-efa).",
        check_kv_transport_consistent,
    ),
    _rule(
        "frontend-block-size-matches-workers",
        "Frontend --kv-cache-block-size equals workers' --block-size.",
        check_frontend_block_size_matches_workers,
    ),
    _rule(
        "worker-block-size-is-vllms",
        "Workers' --block-size is the block vLLM runs Kimi K3 with (not one it "
        "raises), so prefix hashes, KV events, the model card and the router share one unit.",
        check_worker_block_size_is_vllms,
    ),
    _rule(
        "sglang-router-block-is-page",
        "The frontend's --kv-cache-block-size equals the --page-size x --dcp-size block the routed SGLang "
        "workers register and emit KV events in (dynamo/sglang/capacity.py).",
        check_sglang_router_block_is_page,
    ),
    _rule(
        "sglang-disagg-roles-agree",
        "SGLang prefill and decode run their role's --disaggregation-mode and one --disaggregation-transfer-backend.",
        check_sglang_disagg_roles_agree,
    ),
    _rule(
        "sglang-tp-spans-whole-nodes",
        "An SGLang worker's --tp-size equals its pods' GPUs and it leaves --nnodes/--node-rank/--dist-init-addr "
        "to the operator.",
        check_sglang_tp_spans_whole_nodes,
    ),
    _rule(
        "kv-router-has-kv-events",
        "With --router-mode kv, the routed workers publish KV events.",
        check_kv_router_has_kv_events,
    ),
    _rule(
        "a4x-max-pods-schedule",
        "A pod bound for GKE A4X Max selects gke.networks.io/accelerator-network-profile: auto and, with GPUs, "
        "claims the node's DRANET RDMA devices (mrdma.google.com).",
        check_a4x_max_pods_schedule,
        scope="stack",
    ),
    _rule(
        "frontend-in-workers-zone",
        "The frontend (and any KV router) runs in the workers' zone: a required "
        "podAffinity on topology.kubernetes.io/zone selecting the workers' pods, or one zone pinned on both.",
        check_frontend_in_workers_zone,
    ),
    _rule(
        "smoke-probe-spans-kv-block",
        "The smoke test's cache-hit probe spans at least two of the largest KV "
        "blocks the workers run (vLLM caches whole blocks only) and asks for a hit it can get.",
        check_smoke_probe_spans_kv_block,
        scope="stack",
    ),
    _rule(
        "alerts-match-metric-units",
        "Alert rules and dashboard panels query metrics their exporter exports, "
        "with thresholds and display units in the metric's real unit (recipes/facts/metrics.yaml).",
        check_alerts_match_metric_units,
    ),
    _rule(
        "pods-run-on-image-arch",
        "No pod can be scheduled on a node whose CPU architecture its images are not built for (recipes/facts/images.yaml).",
        check_pods_run_on_image_arch,
    ),
    _rule("images-pinned", "Container images carry a tag other than latest, or a digest.", check_images_pinned),
    _rule(
        "images-pullable",
        "Every image comes from a registry a user can pull from (recipes/facts/portability.yaml; no nvcr.io/nvstaging).",
        check_images_pullable,
        config_schema={
            "allowed_registries": {"type": "array", "items": {"type": "string"}, "description": "extra prefixes"}
        },
    ),
    _rule("no-dev-mode-server", "No server runs in development mode (VLLM_SERVER_DEV_MODE).", check_no_dev_mode_server),
    _rule(
        "no-hard-coded-clique",
        "No nodeSelector/affinity pins a literal nvidia.com/gpu.clique id.",
        check_no_hard_coded_clique,
    ),
    _rule(
        "runtime-version-declared",
        "A non-semver Dynamo image tag comes with runtimeVersionOverride.",
        check_runtime_version_declared,
    ),
    _rule(
        "hf-token-from-secret", "HF tokens come from a Secret, never a literal env value.", check_hf_token_from_secret
    ),
    _rule(
        "env-secrets-from-secret",
        "No container env holds a credential as a literal value (*_TOKEN, *_SECRET, "
        "*_PASSWORD, API keys, known token formats): it comes from a Secret (valueFrom.secretKeyRef).",
        check_env_secrets_from_secret,
    ),
    _rule("serving-containers-unprivileged", "No container runs privileged.", check_serving_containers_unprivileged),
    _rule(
        "startup-budget-covers-load",
        "Worker startup probe budget covers the estimated model load time.",
        check_startup_budget_covers_load,
        level=ADVISORY,
        config_schema={
            "min_startup_seconds": {
                "type": "integer",
                "minimum": 0,
                "default": DEFAULT_MIN_STARTUP_SECONDS,
                "description": "Seconds a worker needs to load and warm up",
            }
        },
    ),
    _rule(
        "job-await-reports-failure",
        "pulumi-kubernetes' Job await runs (no pulumi.com/waitFor) and a failing Job "
        "fails `pulumi up` within minutes, naming its reason (activeDeadlineSeconds below the provider timeout).",
        check_job_await_reports_failure,
    ),
    _rule(
        "graph-await-reports-failure",
        "The graph is not awaited through pulumi.com/waitFor (which can only "
        "succeed or time out); a Job that fails on a pod that cannot run does the waiting.",
        check_graph_await_reports_failure,
    ),
    _rule(
        "planner-owns-worker-replicas",
        "With a Planner in the graph, worker components leave replicas unset and "
        "opt into the scaling adapter, so `pulumi up` never writes back a count the planner chose.",
        check_planner_owns_worker_replicas,
    ),
    _rule(
        "graph-named-stably",
        "This program's DynamoGraphDeployment keeps one name whatever the recipe.",
        check_graph_named_stably,
    ),
    _rule(
        "frontend-migrates-requests",
        "A frontend routing to workers runs with request migration on "
        "(--migration-limit > 0), so a rollout or a dead worker does not fail the responses streaming from it.",
        check_frontend_migrates_requests,
    ),
    _rule(
        "aws-least-privilege",
        "GPU nodes keep pods off the node role (IMDS hop limit 1), the VPC CNI and CSI "
        "drivers have their own roles, and the EKS API is not open to the whole internet.",
        check_aws_least_privilege,
        level=ADVISORY,
        scope="stack",
    ),
    _rule(
        "model-cache-retained",
        "The model-cache PVC and filesystem are retainOnDelete (never deleted by "
        "Pulumi); the PVC is not protect, so teardown passes.",
        check_model_cache_retained,
        scope="stack",
    ),
    _rule(
        "shared-mounts-writable",
        "Every writable mount of a shared filesystem (EFS, NFS, FSx; subPaths included) "
        "can be written by the uid that runs (image USER + securityContext + how the volume is prepared, e.g. an "
        "EFS access point's POSIX user and root directory).",
        check_shared_mounts_writable,
        scope="stack",
    ),
    _rule(
        "serving-containers-request-resources",
        "No serving component is BestEffort: each requests cpu or memory.",
        check_serving_containers_request_resources,
    ),
    # An object with a field of the wrong type reaches no other rule (base.evaluate), only this one.
    _rule(
        SHAPE_RULE,
        "Every object is a Kubernetes object whose fields have the types the Kubernetes and Dynamo "
        "schemas give them (kimi_k3.shape: apiVersion, kind, metadata, pod templates, graph components).",
        check_object_shape,
    ),
)
