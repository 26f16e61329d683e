"""Object shape: is a YAML document a Kubernetes object whose fields have the types the policy rules read?

`kimi-k3 check` and the policy pack validate every object with `problems()` before any rule runs, so a rule only
ever sees fields of the type the API server would accept (a container `env:` written as a mapping, `containers:`
as strings, `kind: 5` are reported with their JSON path instead of crashing or passing a rule).

This is a structural subset, not the whole schema: the fields the rules in policies/rules/ read, typed as the
Kubernetes 1.34 OpenAPI (core/v1 PodSpec, Container, EnvVar, ...; kubernetes-validate's bundled JSON schemas) and
the upstream Dynamo CRD (nvidia.com/v1beta1 DynamoGraphDeployment) type them. Unknown fields are allowed (the full
schemas with strict field validation stay the job of the API server and tests/stacks/test_schemas.py); a null value
counts as absent, as the API server drops it. tests/stacks/test_check_property.py checks every type declared in kubernetes.py
against those schemas, so this subset cannot drift from them unnoticed.

vocabulary.py: the type language (T, LIST, MAP, OBJ); kubernetes.py: the Kubernetes and Dynamo types the rules
read; records.py: Pulumi's resource records; check.py: problems() and check_type(), exported here.
"""

from kimi_k3.shape.check import Problem, check_type, found, problems
from kimi_k3.shape.vocabulary import T
