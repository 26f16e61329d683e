"""IAM roles for Kubernetes service accounts (IRSA), so AWS permissions go to one pod's identity, not to every node."""

from __future__ import annotations

from typing import Sequence

import pulumi
import pulumi_aws as aws

from kimi_k3.aws import iam


class Oidc:
    """The cluster's IAM OIDC provider: what an IRSA role's trust policy names."""

    def __init__(self, provider_arn: pulumi.Input[str], issuer_url: pulumi.Input[str]):
        self.provider_arn = provider_arn
        self.issuer_url = issuer_url


def service_account_role(
    name: str,
    oidc: Oidc,
    namespace: str,
    service_account: str,
    policy_arns: Sequence[str],
    parent: pulumi.Resource,
    tags: dict[str, str],
) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """A role only `namespace/service_account` can assume, with `policy_arns` attached (none: an identity with no
    AWS permissions). Returns the role and what must exist before a pod uses it (the attachments)."""
    role = aws.iam.Role(
        name,
        assume_role_policy=pulumi.Output.all(oidc.provider_arn, oidc.issuer_url).apply(
            lambda a: iam.irsa_trust_policy(a[0], a[1], namespace, service_account)
        ),
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    attachments = [
        aws.iam.RolePolicyAttachment(
            f"{name}-{arn.rsplit('/', 1)[-1]}",
            role=role.name,
            policy_arn=arn,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for arn in policy_arns
    ]
    return role, attachments
