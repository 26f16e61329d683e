"""nodes.py -> iam.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from kimi_k3.aws.cluster import addon_version_problems, cni_ordering_problems
from kimi_k3.aws.storage import MOUNTPOINT_ADDON


def service_trust_policy(service: str) -> str:
    """The trust policy letting an AWS service (eks.amazonaws.com, ec2.amazonaws.com) assume a role."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


def irsa_trust_policy(provider_arn: str, issuer_url: str, namespace: str, service_account: str) -> str:
    """Trust policy of an IAM role for one Kubernetes service account (IRSA: EKS iam-roles-for-service-accounts)."""
    import json

    host = issuer_url.removeprefix("https://")
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                            f"{host}:aud": "sts.amazonaws.com",
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )


def least_privilege_problems(resources: list[dict[str, Any]]) -> list[str]:
    """What in a rendered stack (resources.json entries) hands out more AWS access than the pods need: GPU launch
    templates whose IMDS hop limit lets pods reach the node role, the VPC CNI policy on a node role, an API endpoint
    open to the whole internet, a CSI driver add-on without its own role. Empty: nothing."""
    out = []
    roles = [r for r in resources if r["type"] == "aws:iam/role:Role"]
    for r in resources:
        t, i, n = r["type"], r.get("inputs") or {}, r["name"]
        if t == "aws:ec2/launchTemplate:LaunchTemplate":
            hops = (i.get("metadataOptions") or {}).get("httpPutResponseHopLimit", 1)
            if hops > 1:
                out.append(f"{n}: IMDS hop limit {hops}: pods can take the node role's credentials")
        if t == "aws:iam/rolePolicyAttachment:RolePolicyAttachment" and i.get("policyArn", "").endswith(
            "/AmazonEKS_CNI_Policy"
        ):
            # The attachment names its role by physical name: the role's own, or its autoname (resource name + suffix).
            named = [
                x
                for x in roles
                if str(i.get("role")) in (x["inputs"].get("name"), None) or str(i.get("role")).startswith(x["name"])
            ]
            role = max(named, key=lambda x: len(x["name"]), default=None)
            if role is not None and "ec2.amazonaws.com" in str(role["inputs"].get("assumeRolePolicy")):
                out.append(f"{n}: the VPC CNI policy is on a node role (every pod on the node can use it)")
        if t == "aws:eks/cluster:Cluster":
            vpc = i.get("vpcConfig") or {}
            if vpc.get("endpointPublicAccess", True) and any(
                ipaddress.IPv4Network(c).prefixlen == 0 for c in vpc.get("publicAccessCidrs") or ["0.0.0.0/0"]
            ):
                out.append(f"{n}: the public API endpoint accepts the whole internet")
        if (
            t == "aws:eks/addon:Addon"
            and i.get("addonName") in ("vpc-cni", "aws-fsx-csi-driver", "aws-efs-csi-driver", MOUNTPOINT_ADDON)
            and not i.get("serviceAccountRoleArn")
        ):
            out.append(f"{n}: {i.get('addonName')} has no role of its own (falls back to the node role)")
    out += cni_ordering_problems(resources)
    out += addon_version_problems(resources)
    return out


def bucket_read_policy(bucket_arn: str) -> str:
    """What Mountpoint needs for a read-only mount (Mountpoint CONFIGURATION.md, IAM permissions)."""
    import json

    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn]},
                {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{bucket_arn}/*"]},
            ],
        },
        sort_keys=True,
    )


def fetcher_policy(bucket_arn: str, secret_arn: str) -> str:
    """What a fetcher needs: list and write the bucket (multipart included), read the token."""
    import json

    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn]},
                {
                    "Effect": "Allow",
                    "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                    "Resource": [f"{bucket_arn}/*"],
                },
                # Only its share's failure record (fetch_checkpoint.failure_key): never a weight file.
                {"Effect": "Allow", "Action": ["s3:DeleteObject"], "Resource": [f"{bucket_arn}/*/.kimi-k3/failed-*"]},
                {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": [secret_arn]},
            ],
        },
        sort_keys=True,
    )
