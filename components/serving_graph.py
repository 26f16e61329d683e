"""The Kimi K3 DynamoGraphDeployment and the ComputeDomains its multinode workers claim."""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi

from components.kubernetes import register
from kimi_k3.config.serving import BenchmarkConfig, PreflightConfig
from kimi_k3.graph.model import ServingGraph as Graph
from kimi_k3.k8s import benchmark_job, graph_ready, node_local, preflight_job, smoke_job
from kimi_k3.k8s import deployment as manifests
from kimi_k3.k8s import planner as k8s_planner


class SmokeTestArgs:
    def __init__(self, image: str, node_selector: Optional[dict[str, str]] = None):
        """
        :param image: a pinned Python image to run kimi_k3/pods/smoke.py in (standard library only).
        :param node_selector: where the Job runs (the system nodes in eks mode: never a GPU node).
        """
        self.image = image
        self.node_selector = node_selector


class BenchmarkArgs:
    def __init__(self, config: BenchmarkConfig, node_selector: Optional[dict[str, str]] = None):
        """
        :param config: `kimi-k3:serving.benchmark` (its image and the workload, kimi_k3/pods/workload.py).
        :param node_selector: where the Job runs (the system nodes in eks mode: never a GPU node).
        """
        self.config = config
        self.node_selector = node_selector


class ServingGraphArgs:
    def __init__(
        self,
        graph: Graph,
        platform_ready: Sequence[pulumi.Resource],
        workers_ready: Sequence[pulumi.Resource],
        preflight: Optional[PreflightConfig] = None,
        nodes_ready: Sequence[pulumi.Resource] = (),
        gpu_nodes_ready: Sequence[pulumi.Resource] = (),
        gpu_node_selector: Optional[dict[str, str]] = None,
        smoke_test: Optional[SmokeTestArgs] = None,
        watch_image: str = "",
        node_selector: Optional[dict[str, str]] = None,
        benchmark: Optional[BenchmarkArgs] = None,
        weights_ready: Sequence[pulumi.Resource] = (),
        provided_domain: Optional[tuple[pulumi.Resource, pulumi.Output]] = None,
    ):
        """
        :param graph: roles, TP, nodes, flags and env of the selected recipe with stack overrides.
        :param platform_ready: what ComputeDomains and the graph need to be accepted (the namespace, the DRA
            driver and the Dynamo operator that serve their CRDs).
        :param workers_ready: what the graph's pods need besides (the verified weights, the GPU nodes).
        :param preflight: `kimi-k3:serving.preflight`: the fabric check per multinode role (None or disabled: none).
        :param nodes_ready: what the preflight needs besides the platform (the GPU nodes; not the weights, so the
            check runs while they download).
        :param gpu_nodes_ready: what the image pre-pull DaemonSet waits for (the namespace; the GPU node group in eks mode).
        :param gpu_node_selector: where the pre-pull runs (default: the workers' GPU affinity).
        :param smoke_test: run the smoke test Job once the graph is Ready (None: no Job).
        :param watch_image: image of the graph-ready Job (Python 3, stdlib only: the download image).
        :param node_selector: where that Job runs (eks: the system nodes).
        :param benchmark: run the AIPerf benchmark Job after the smoke test (None: no Job).
        :param weights_ready: what the node-local weights prefetch needs besides the GPU nodes (the verified
            checkpoint: the download Job); used when the graph has node_local_weights.
        :param provided_domain: the provider's ComputeDomain read from the cluster, and its channel template's name
            once checked (components/cluster.py); required when the graph has provided_compute_domain.
        """
        self.provided_domain = provided_domain
        self.benchmark = benchmark
        self.weights_ready = list(weights_ready)
        self.gpu_nodes_ready = list(gpu_nodes_ready)
        self.gpu_node_selector = gpu_node_selector
        self.watch_image = watch_image
        self.node_selector = node_selector
        self.graph = graph
        self.platform_ready = list(platform_ready)
        self.workers_ready = list(workers_ready)
        self.preflight = preflight
        self.nodes_ready = list(nodes_ready)
        self.smoke_test = smoke_test


def _claiming(obj, gate: Optional[pulumi.Output], template: str = ""):
    """`obj` with each claim of the provided channel template waiting on `gate` (the template's name once the
    ComputeDomain read from the cluster passed its check; a failed check fails `up` before the object exists)."""
    if gate is None:
        return obj
    if isinstance(obj, dict):
        return {
            k: gate if k == "resourceClaimTemplateName" and v == template else _claiming(v, gate, template)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_claiming(v, gate, template) for v in obj]
    return obj


class ServingGraph(pulumi.ComponentResource):
    """The ComputeDomains roles claim (one shared by all roles when KV moves over NVLink), the graph, the
    graph-ready Job `pulumi up` waits on (Ready, or a failure named within minutes), then the smoke test Job
    against the frontend, whose failure fails `pulumi up`."""

    deployment: pulumi.CustomResource
    smoke: Optional[pulumi.CustomResource] = None
    benchmark: Optional[pulumi.CustomResource] = None

    def __init__(self, name: str, args: ServingGraphArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:serving:ServingGraph", name, None, opts)
        g = args.graph
        gate, template = None, ""
        if g.provided_compute_domain is not None:  # the provider's: read from the cluster and checked, never created
            found, gate = args.provided_domain  # read and checked by the Cluster, before the namespace exists
            domains, template = [found], g.provided_compute_domain.channel_template
        else:
            domains = [
                register(
                    f"{name}-{key}-compute-domain",
                    manifests.compute_domain(g, key),
                    pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready),
                )
                for key in g.compute_domains
            ]
        checks = []
        pf = args.preflight
        by_key = dict(zip(g.compute_domains, domains))  # roles handing KV over NVLink share one domain
        # The fabric preflight checks an NVLink group (IMEX, clique): none where NVLink ends at the node (H200).
        multinode = [(r, by_key[r.compute_domain]) for r in g.roles if r.nodes_per_replica > 1 and r.compute_domain]
        if pf is not None and pf.enabled and multinode:
            script = register(
                f"{name}-preflight-script",
                preflight_job.preflight_script_config_map(g),
                pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready),
            )
            for role, domain in multinode:
                svc = register(
                    f"{name}-{role.key}-preflight-service",
                    preflight_job.preflight_service(g, role),
                    pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready),
                )
                # A first-deploy gate: later changes must not re-run it (its pods would wait for GPUs the
                # running graph holds), so its spec is never diffed; `pulumi up --replace URN` re-runs it.
                checks.append(
                    register(
                        f"{name}-{role.key}-preflight",
                        _claiming(
                            preflight_job.preflight_job(g, role, pf.min_bus_bandwidth_gbps, pf.timeout_seconds),
                            gate,
                            template,
                        ),
                        pulumi.ResourceOptions(
                            parent=self,
                            ignore_changes=["spec"],
                            depends_on=[*args.platform_ready, *args.nodes_ready, domain, script, svc],
                        ),
                    )
                )
        # The runtime image lands on the GPU nodes while they wait for weights and add-ons; pulumi-kubernetes
        # awaits the DaemonSet until its pods are available (provider/pkg/await/daemonset.go, kstatus).
        self.prepull = register(
            f"{name}-image-prepull",
            node_local.image_prepull(g, args.gpu_node_selector),
            pulumi.ResourceOptions(parent=self, depends_on=args.gpu_nodes_ready),
        )
        planner = []
        if g.autoscaling is not None:  # the SLA planner's config, profile data and API access, before its pod
            planner = [
                register(
                    f"{name}-planner-{o['kind'].lower()}-{o['metadata']['name']}",
                    o,
                    pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready[:1]),
                )
                for o in k8s_planner.config_maps(g) + k8s_planner.rbac(g)
            ]
        # Node-local weights: every GPU node copies the verified checkpoint onto its NVMe (each byte over the Local
        # Zone link once, the rest between peers) while the image pulls and the fabric preflight runs; the graph
        # starts when every node holds it (the DaemonSet's rollout, awaited by pulumi-kubernetes).
        local = []
        if g.node_local_weights:
            script, peers, ds = node_local.weights_prefetch_objects(g, args.watch_image, args.gpu_node_selector)
            prefetch_deps = [*args.gpu_nodes_ready, *args.weights_ready]
            parts = [
                register(
                    f"{name}-weights-prefetch-script",
                    script,
                    pulumi.ResourceOptions(parent=self, depends_on=prefetch_deps),
                ),
                register(f"{name}-weights-peers", peers, pulumi.ResourceOptions(parent=self, depends_on=prefetch_deps)),
                register(
                    f"{name}-weights-peers-policy",
                    manifests.weights_peers_network_policy(g),
                    pulumi.ResourceOptions(parent=self, depends_on=prefetch_deps),
                ),
            ]
            self.prefetch = register(
                f"{name}-weights-prefetch", ds, pulumi.ResourceOptions(parent=self, depends_on=[*prefetch_deps, *parts])
            )
            local = [self.prefetch]
        self.deployment = register(
            f"{name}-deployment",
            _claiming(manifests.graph_deployment(g), gate, template),
            pulumi.ResourceOptions(
                parent=self,
                depends_on=args.platform_ready
                + args.workers_ready
                + domains
                + checks
                + [self.prepull]
                + planner
                + local,
            ),
        )
        *access, job = graph_ready.graph_watch_objects(g, args.watch_image, args.node_selector)
        watch = [
            register(
                f"{name}-watch-{o['kind'].lower()}",
                o,
                pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready[:1]),
            )
            for o in access
        ]
        # `pulumi up` ends here: when the graph is Ready, or within minutes of a pod that cannot run.
        self.ready = register(
            f"{name}-ready", job, pulumi.ResourceOptions(parent=self, depends_on=[self.deployment, *watch])
        )
        if args.smoke_test is not None:
            smoke_script = register(
                f"{name}-smoke-script",
                smoke_job.smoke_script_config_map(g),
                pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready),
            )
            # Created only once the graph is Ready (the graph-ready Job), awaited until Complete or Failed.
            self.smoke = register(
                f"{name}-smoke-test",
                smoke_job.smoke_job(g, args.smoke_test.image, args.smoke_test.node_selector),
                pulumi.ResourceOptions(parent=self, depends_on=[self.ready, smoke_script]),
            )
        if args.benchmark is not None:
            w = args.benchmark.config.to_workload()
            bench_files = register(
                f"{name}-benchmark-plan",
                benchmark_job.benchmark_config_map(g, w, args.benchmark.config.trace),
                pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready),
            )
            # After the smoke test (or, without it, the graph-ready Job): load only a graph that serves.
            self.benchmark = register(
                f"{name}-benchmark",
                benchmark_job.benchmark_job(
                    g, w, args.benchmark.config.image, args.benchmark.node_selector, args.benchmark.config.trace
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[self.smoke or self.ready, bench_files]),
            )
        self.register_outputs(
            {
                "name": self.deployment.metadata["name"],
                "gpus": g.gpus,
                "nodes": g.nodes,
                "smokeTest": self.smoke.metadata["name"] if self.smoke else None,
                "benchmark": self.benchmark.metadata["name"] if self.benchmark else None,
            }
        )
