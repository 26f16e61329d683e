"""Access: what the AWS side of a stack hands to pods and to the internet (kimi_k3.aws.iam.least_privilege_problems)."""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from kimi_k3.aws.iam import least_privilege_problems
from policies.rules.base import Context, Finding, Result


def check_aws_least_privilege(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    """Advisory: each has a documented way to open it (docs/aws.md, Access), which this rule then reports."""
    records = [
        {"urn": r.name, "type": r.type, "name": r.name, "inputs": r.aws_inputs}
        for r in ctx.resources or ()
        if r.aws_inputs is not None
    ]
    for problem in least_privilege_problems(records):
        name, _, message = problem.partition(": ")
        yield Finding(next(f"{r['type']}/{name}" for r in records if r["name"] == name), message)
