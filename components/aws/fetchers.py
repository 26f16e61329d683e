"""The weights fetchers: EC2 instances that fill the weights bucket from the Hub at t=0, then terminate."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.aws.storage_args import ModelStorageArgs
from kimi_k3.aws import iam
from kimi_k3.aws import nodes as spec
from kimi_k3.aws import storage as aws_storage
from kimi_k3.names import FETCHER_ROLE


def weights_fetchers(
    name: str, args: ModelStorageArgs, bucket: aws.s3.Bucket, tags: dict[str, str], parent: pulumi.Resource
) -> list[aws.ec2.Instance]:
    """The fetcher instances (one per share of the checkpoint), their token in Secrets Manager, their role (the
    bucket and that secret only), security group and launch template; children of `parent` (ModelStorage)."""
    s3 = args.storage.s3
    child = pulumi.ResourceOptions(parent=parent)
    prefix = args.cache_path_in_fs.strip("/")
    # The token reaches the fetchers through Secrets Manager, never through user data (visible to ec2:Describe*).
    secret = aws.secretsmanager.Secret(f"{name}-hf-token", recovery_window_in_days=0, tags=tags, opts=child)
    version = aws.secretsmanager.SecretVersion(
        f"{name}-hf-token-value", secret_id=secret.id, secret_string=args.hf_token, opts=child
    )
    role = aws.iam.Role(
        f"{name}-fetcher-role", assume_role_policy=iam.service_trust_policy("ec2.amazonaws.com"), tags=tags, opts=child
    )
    policy = aws.iam.RolePolicy(
        f"{name}-fetcher-policy",
        role=role.id,
        policy=pulumi.Output.all(bucket.arn, secret.arn).apply(lambda a: iam.fetcher_policy(a[0], a[1])),
        opts=child,
    )
    profile = aws.iam.InstanceProfile(f"{name}-fetcher-profile", role=role.name, tags=tags, opts=child)
    sg = aws.ec2.SecurityGroup(
        f"{name}-fetcher-sg", vpc_id=args.vpc_id, **aws_storage.fetcher_security_group(), tags=tags, opts=child
    )
    template = aws.ec2.LaunchTemplate(
        f"{name}-fetcher-lt",
        **aws_storage.fetcher_launch_template(s3.fetcher_instance_type),
        iam_instance_profile={"arn": profile.arn},
        vpc_security_group_ids=[sg.id],
        tags=tags,
        opts=child,
    )
    fetchers = []
    for i in range(s3.fetchers):
        user_data = pulumi.Output.all(bucket.bucket, secret.arn).apply(
            lambda a, i=i: spec.b64(
                aws_storage.fetcher_user_data(
                    bucket=a[0],
                    prefix=prefix,
                    repo=args.model_repo,
                    revision=args.model_revision,
                    secret_arn=a[1],
                    region=args.region,
                    index=i,
                    count=s3.fetchers,
                    hub_version=args.hub_version,
                    deadline_seconds=args.fetch_deadline_seconds,
                    drafter=args.drafter,
                )
            )
        )
        fetchers.append(
            aws.ec2.Instance(
                f"{name}-fetcher-{i}",
                launch_template={"id": template.id, "version": "$Latest"},
                subnet_id=args.fetcher_subnet_id,
                user_data_base64=user_data,
                tags={**tags, "Name": f"{name}-fetcher-{i}", "kimi-k3/role": FETCHER_ROLE},
                # A changed revision or share launches new fetchers; they skip what the bucket already holds.
                user_data_replace_on_change=True,
                opts=pulumi.ResourceOptions(parent=parent, depends_on=[version, policy, *args.egress_ready]),
            )
        )
    return fetchers
