"""GpuCluster: VPC, EKS control plane, access entries, the system node group and the GPU node group."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws

from components.aws.iam import Oidc, service_account_role
from kimi_k3.aws import cluster as aws_cluster
from kimi_k3.aws import iam
from kimi_k3.aws import nodes as spec
from kimi_k3.config.cluster import ClusterConfig

EKS_POLICIES = ("AmazonEKSClusterPolicy",)
# The VPC CNI's policy is not here: it goes to the aws-node service account (IRSA), not to every pod's node
# (EKS cni-iam-role: "We recommend that you assign it to a separate role").
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore")
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


class GpuClusterArgs:
    def __init__(
        self,
        cluster: ClusterConfig,
        gpu: spec.GpuNodePlan,
        subnets: list[aws_cluster.SubnetPlan],
        platform: str,
        endpoint: dict,
        tags: Optional[dict[str, str]] = None,
        parked: bool = False,
    ):
        """
        :param cluster: `kimi-k3:cluster` (region, Kubernetes version, zones, VPC CIDR, node groups, admins).
        :param gpu: the validated GPU node plan (instance facts, capacity type, reservation, node count).
        :param subnets: the subnet layout (kimi_k3.aws.cluster.subnet_plan): private per zone, the GPU zone, public for NAT.
        :param platform: gb200 or gb300, for node labels.
        :param endpoint: the API endpoint's access (kimi_k3.aws.cluster.endpoint_access: private, public CIDRs).
        :param parked: only the VPC and its subnets (what the retained filesystem sits in); nothing billed by the hour.
        :param tags: tags on every AWS resource.
        """
        self.cluster = cluster
        self.gpu = gpu
        self.subnets = subnets
        self.platform = platform
        self.endpoint = endpoint
        self.parked = parked
        self.tags = tags or {}


class GpuCluster(pulumi.ComponentResource):
    """An EKS cluster at Kubernetes 1.34+ (DRA GA) with a GB200/GB300 node group on a Capacity Block.

    The GPU node group is plain `aws.eks.NodeGroup` + its own launch template (pulumi_eks classifies p6e-gb200 as
    x86_64 and lacks AL2023_ARM_64_NVIDIA): EFA interface layout of the instance type, capacity-block market type
    and reservation targeting, no placement group, GPU taint and labels, bootstrap that disables host nvidia-imex."""

    kubeconfig: pulumi.Output[str]
    cluster: aws.eks.Cluster
    system_nodes: aws.eks.NodeGroup
    gpu_nodes: aws.eks.NodeGroup

    def __init__(self, name: str, args: GpuClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:aws:GpuCluster", name, None, opts)
        c, tags = args.cluster, {"kimi-k3/stack": pulumi.get_stack(), **args.tags}

        def child(*depends: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(depends))

        # --- network: private subnets for nodes, NAT for egress, S3 gateway endpoint for weights and images ---
        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=c.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{name}-vpc"},
            opts=child(),
        )
        subnets = {}
        for s in args.subnets:
            role_tag = {"kubernetes.io/role/elb": "1"} if s.public else {"kubernetes.io/role/internal-elb": "1"}
            subnets[s.name] = aws.ec2.Subnet(
                f"{name}-{s.name}",
                vpc_id=self.vpc.id,
                cidr_block=s.cidr,
                availability_zone=s.zone,
                map_public_ip_on_launch=s.public,
                tags={**tags, **role_tag, "Name": f"{name}-{s.name}"},
                opts=child(),
            )
        public = [s for s in args.subnets if s.public]
        private = [s for s in args.subnets if not s.public]
        self.system_subnet_ids = [subnets[s.name].id for s in private if s.role == "system"]
        self.private_subnet_ids = {s.zone: subnets[s.name].id for s in private}
        gpu_subnet = next((s for s in private if s.zone == args.gpu.availability_zone))
        self.gpu_subnet_id = subnets[gpu_subnet.name].id
        if args.parked:  # same names and inputs as below, so the kept pieces are unchanged
            self.register_outputs({"vpcId": self.vpc.id, "parked": True})
            return
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child())
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags=tags,
            opts=child(),
        )
        for s in public:
            aws.ec2.RouteTableAssociation(
                f"{name}-{s.name}-rta", subnet_id=subnets[s.name].id, route_table_id=public_rt.id, opts=child()
            )
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=tags, opts=child())
        nat = aws.ec2.NatGateway(
            f"{name}-nat", allocation_id=eip.id, subnet_id=subnets[public[0].name].id, tags=tags, opts=child(igw)
        )
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
            tags=tags,
            opts=child(),
        )
        private_rtas = [
            aws.ec2.RouteTableAssociation(
                f"{name}-{s.name}-rta", subnet_id=subnets[s.name].id, route_table_id=private_rt.id, opts=child()
            )
            for s in private
        ]
        s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3-endpoint",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{c.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_rt.id],
            tags=tags,
            opts=child(),
        )
        # What a machine in a private subnet needs to reach the internet (NAT) and S3 (gateway endpoint).
        self.egress_ready = [nat, private_rt, *private_rtas, s3_endpoint]

        # --- control plane ---
        cluster_role = aws.iam.Role(
            f"{name}-cluster-role",
            assume_role_policy=iam.service_trust_policy("eks.amazonaws.com"),
            tags=tags,
            opts=child(),
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-cluster-{p}", role=cluster_role.name, policy_arn=f"arn:aws:iam::aws:policy/{p}", opts=child()
            )
            for p in EKS_POLICIES
        ]
        self.cluster = aws.eks.Cluster(
            f"{name}-eks",
            version=c.kubernetes_version,
            role_arn=cluster_role.arn,
            # Nodes reach the API privately; pulumi and kubectl use the public endpoint, open only to
            # kimi-k3:cluster.publicAccessCidrs (required; never 0.0.0.0/0 unless explicitly allowed), or none.
            vpc_config={"subnet_ids": self.system_subnet_ids, **args.endpoint},
            access_config={"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": True},
            # No self-managed vpc-cni / kube-proxy / CoreDNS: they come as EKS add-ons below, so the first aws-node pod
            # on any node already has its IRSA role and the GPU nodes need not wait for the add-on (docs/aws.md).
            bootstrap_self_managed_addons=False,
            enabled_cluster_log_types=["api", "audit", "authenticator"],
            tags=tags,
            # The provider REPLACES a cluster whose bootstrapSelfManagedAddons changes (ForceNew,
            # recipes/facts/aws-force-new.yaml): a cluster created before it was false keeps its own value, and the add-ons
            # below adopt its self-managed vpc-cni / kube-proxy / CoreDNS (resolve_conflicts_on_create OVERWRITE).
            opts=pulumi.ResourceOptions.merge(
                child(*attachments), pulumi.ResourceOptions(ignore_changes=["bootstrapSelfManagedAddons"])
            ),
        )
        for i, arn in enumerate(c.admin_principal_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{i}", cluster_name=self.cluster.name, principal_arn=arn, type="STANDARD", opts=child()
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}-policy",
                cluster_name=self.cluster.name,
                principal_arn=arn,
                policy_arn=ADMIN_POLICY,
                access_scope={"type": "cluster"},
                opts=child(entry),
            )
        cluster_sg = self.cluster.vpc_config.cluster_security_group_id

        # --- IRSA: the OIDC provider, and the VPC CNI's policy on the aws-node service account only ---
        issuer = self.cluster.identities.apply(
            lambda ids: ids[0]["oidcs"][0]["issuer"] if isinstance(ids[0], dict) else ids[0].oidcs[0].issuer
        )
        oidc_provider = aws.iam.OpenIdConnectProvider(
            f"{name}-oidc", url=issuer, client_id_lists=["sts.amazonaws.com"], tags=tags, opts=child()
        )
        self.oidc = Oidc(oidc_provider.arn, issuer)
        cni_role, cni_policy = service_account_role(
            f"{name}-vpc-cni", self.oidc, "kube-system", "aws-node", [CNI_POLICY], self, tags
        )
        # With no self-managed vpc-cni (bootstrap off), aws-node exists only as this add-on, created with its service
        # account's role: a node that joins before it waits NotReady for it instead of running aws-node on the node
        # role, which has no CNI policy. So the GPU nodes do not wait for it; they take minutes to boot, it does not.
        self.vpc_cni = aws.eks.Addon(
            f"{name}-vpc-cni",
            cluster_name=self.cluster.name,
            addon_name="vpc-cni",
            service_account_role_arn=cni_role.arn,
            resolve_conflicts_on_create="OVERWRITE",
            configuration_values=spec.VPC_CNI_CONFIGURATION,
            resolve_conflicts_on_update="PRESERVE",
            tags=tags,
            opts=child(*cni_policy),
        )
        self.kube_proxy = aws.eks.Addon(
            f"{name}-kube-proxy",
            cluster_name=self.cluster.name,
            addon_name="kube-proxy",
            addon_version=aws_cluster.addon_version(c.kubernetes_version, "kube-proxy"),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="PRESERVE",
            tags=tags,
            opts=child(),
        )

        # --- nodes ---
        node_role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=iam.service_trust_policy("ec2.amazonaws.com"),
            tags=tags,
            opts=child(),
        )
        node_policies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{p}", role=node_role.name, policy_arn=f"arn:aws:iam::aws:policy/{p}", opts=child()
            )
            for p in NODE_POLICIES
        ]
        sysn = c.system_nodes
        self.system_nodes = aws.eks.NodeGroup(
            f"{name}-system-nodes",
            cluster_name=self.cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=self.system_subnet_ids,
            ami_type=sysn.ami_type,
            capacity_type="ON_DEMAND",
            instance_types=[sysn.instance_type],
            disk_size=sysn.disk_gib,
            scaling_config={"desired_size": sysn.count, "min_size": sysn.count, "max_size": sysn.count + 2},
            labels=spec.SYSTEM_LABELS,
            tags=tags,
            opts=child(*node_policies, self.vpc_cni),
        )
        # CoreDNS is a Deployment: its add-on turns ACTIVE once its pods run, on the system nodes.
        self.coredns = aws.eks.Addon(
            f"{name}-coredns",
            cluster_name=self.cluster.name,
            addon_name="coredns",
            addon_version=aws_cluster.addon_version(c.kubernetes_version, "coredns"),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="PRESERVE",
            tags=tags,
            opts=child(self.system_nodes, self.kube_proxy),
        )
        # What any pod that talks to Services needs besides its node: pod IPs, Service routing, cluster DNS.
        self.network_addons = [self.vpc_cni, self.kube_proxy, self.coredns]

        # EFA needs all traffic between the interfaces allowed by a self-referencing security group.
        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa-sg",
            vpc_id=self.vpc.id,
            description="EFA: all traffic within the GPU nodes",
            ingress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
            egress=[
                {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True},
                {"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]},
            ],
            tags=tags,
            opts=child(),
        )
        gpu = args.gpu
        self.gpu_launch_template = aws.ec2.LaunchTemplate(
            f"{name}-gpu-lt",
            description=f"kimi-k3 {gpu.instance.name} ({gpu.capacity_type})",
            **spec.gpu_launch_template(
                gpu, [cluster_sg, efa_sg.id], c.gpu_nodes.root_volume_gib, {**tags, "Name": f"{name}-gpu"}
            ),
            tags=tags,
            opts=child(),
        )
        self.gpu_nodes = aws.eks.NodeGroup(
            f"{name}-gpu-nodes",
            cluster_name=self.cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=[self.gpu_subnet_id],
            ami_type=gpu.ami_type,
            capacity_type=gpu.capacity_type,
            launch_template={
                "id": self.gpu_launch_template.id,
                "version": self.gpu_launch_template.latest_version.apply(str),
            },
            # Desired = the recipe's nodes at creation; afterwards only an explicit desiredNodes is written (EKS scales
            # the group to 0 before the block ends; the upgrade needs 0): kimi_k3.aws.nodes.gpu_node_group_ignore_changes.
            scaling_config={"desired_size": gpu.desired_nodes, "min_size": 0, "max_size": gpu.max_nodes},
            # A rolling replacement that happens anyway (a launch template change with nodes running) must not
            # need instances beyond the reservation: MINIMAL terminates old nodes before launching new ones
            # (EKS NodegroupUpdateConfig), all at once, since a TP group spans nodes and breaks with any of them.
            update_config={"update_strategy": "MINIMAL", "max_unavailable_percentage": 100},
            labels=spec.gpu_node_labels(args.platform),
            taints=[spec.GPU_TAINT],
            tags=tags,
            # A replacement (new subnet, AMI type, ...) deletes the old group first: a second group created beside
            # it would wait for instances the reservation does not have.
            opts=pulumi.ResourceOptions.merge(
                child(*node_policies),
                pulumi.ResourceOptions(
                    ignore_changes=spec.gpu_node_group_ignore_changes(gpu), delete_before_replace=True
                ),
            ),
        )

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.name, self.cluster.endpoint, self.cluster.certificate_authority.data).apply(
                lambda a: aws_cluster.kubeconfig(a[0], a[1], a[2], c.region)
            )
        )
        self.register_outputs(
            {
                "clusterName": self.cluster.name,
                "kubeconfig": self.kubeconfig,
                "vpcId": self.vpc.id,
                "gpuNodeGroup": self.gpu_nodes.node_group_name,
            }
        )
