"""The model cache: the HF token Secret, the RWX volume, and the Job that downloads and verifies weights."""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi

from components.kubernetes import register
from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s import model_cache


class ModelCacheArgs:
    def __init__(
        self,
        graph: ServingGraph,
        hf_token: pulumi.Input[str],
        storage_class: str,
        size_gi: int,
        download_image: str,
        hub_version: str,
        fetch_from_hub: bool = True,
        wait_for: Sequence[pulumi.Resource] = (),
        node_selector: Optional[dict[str, str]] = None,
        wait_seconds: int = 0,
    ):
        """
        :param graph: the serving graph (namespace, model repo, revision, cache path).
        :param hf_token: Hugging Face token, a Pulumi secret; it reaches the cluster only as a Secret.
        :param storage_class: ReadWriteMany StorageClass of the cache volume.
        :param size_gi: cache volume size in GiB.
        :param download_image: image that runs `hf download` and the checkpoint verification.
        :param hub_version: huggingface_hub version the Job installs.
        :param fetch_from_hub: False when the weights are pre-staged (FSx import from S3): the Job only verifies.
        :param wait_for: what must exist first (namespace, filesystem and its PV, the nodes the Job runs on);
            every child waits for it, since a component's own depends_on does not reach its children.
        :param node_selector: where the download Job runs (the system nodes in eks mode: never a GPU node).
        :param wait_seconds: the weights arrive from outside the cluster (S3 fetchers): the Job polls that long for
            them, then verifies; 0 = they are in place when the Job starts.
        """
        self.wait_seconds = wait_seconds
        self.graph = graph
        self.hf_token = hf_token
        self.storage_class = storage_class
        self.size_gi = size_gi
        self.download_image = download_image
        self.hub_version = hub_version
        self.fetch_from_hub = fetch_from_hub
        self.wait_for = list(wait_for)
        self.node_selector = node_selector


class ModelCache(pulumi.ComponentResource):
    """Weights on a shared volume, downloaded once and checked shard by shard before any worker starts.

    The volume is retained (retainOnDelete): neither `pulumi destroy` nor a replacement deletes 1.5 TB of weights;
    it is not `protect`ed, which would block `pulumi destroy` and keep the cluster through a teardown."""

    volume: pulumi.CustomResource
    download: pulumi.CustomResource

    def __init__(self, name: str, args: ModelCacheArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:model:ModelCache", name, None, opts)
        g = args.graph
        child = pulumi.ResourceOptions(parent=self, depends_on=args.wait_for)
        secret = register(f"{name}-hf-token", model_cache.hf_token_secret(g, args.hf_token), child)
        self.volume = register(
            f"{name}-volume",
            model_cache.model_cache_pvc(g, args.storage_class, args.size_gi),
            pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    retain_on_delete=True,
                    # Sized once: a statically bound claim cannot be resized and none can shrink.
                    ignore_changes=["spec.resources.requests.storage"],
                ),
            ),
        )
        script = register(f"{name}-verify-script", model_cache.verify_script_config_map(g), child)
        self.download = register(
            f"{name}-download",
            model_cache.download_job(
                g, args.download_image, args.hub_version, args.fetch_from_hub, args.node_selector, args.wait_seconds
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[*args.wait_for, secret, self.volume, script]),
        )
        self.register_outputs({"volume": self.volume.metadata["name"], "modelPath": g.model_path})
