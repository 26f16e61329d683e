"""CrossGuard policy pack: the rules of `policies.rules`, run by the Pulumi engine.

`pulumi preview --policy-pack policies` starts this file through `pulumi-analyzer-policy-python`
(`python -u -m pulumi.policy <engine> .` in this directory, inside `runtime.options.virtualenv`).
Object-scoped rules become resource policies (Analyze), stack-scoped rules stack policies (AnalyzeStack).
"""

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policies import rules
from policies.rules import base, engine_form


def _guarded(rule: base.Rule, target: str, validate, report_violation) -> None:
    # rules.evaluate already turns a rule that raises into a violation; this covers the adapters around it
    try:
        validate()
    except Exception as exc:  # noqa: BLE001 - the pack reports, never crashes the analyzer
        if type(exc).__name__ in ("_NotApplicableError", "UnknownValueError"):  # pulumi_policy's own control flow
            raise
        report_violation(
            f"{target}: rule {rule.name} could not evaluate this resource ({type(exc).__name__}: {str(exc)[:200]})",
            None,
        )


def _report(violations, skipped, args, report_violation) -> None:
    for v in violations:
        report_violation(f"{v.target}: {v.message}", None)
    if not violations and skipped:
        args.not_applicable("; ".join(f"{s.target}: {s.reason}" for s in skipped))


def _resource_validator(rule: base.Rule):
    def validate(args: ResourceValidationArgs, report_violation) -> None:
        obj = engine_form.object_from_resource(args.resource_type, args.props, args.name)
        if obj is None:
            args.not_applicable("not a Kubernetes resource")

        def run() -> None:
            info = engine_form.resource_info(args.resource_type, args.name, args.props, args.opts.protect, None, obj)
            violations, skipped = base.evaluate(rule, [obj], base.Context(args.get_config(), [info]))
            _report(violations, skipped, args, report_violation)

        _guarded(rule, base.safe_target(obj), run, report_violation)

    return validate


def _stack_validator(rule: base.Rule):
    def validate(args: StackValidationArgs, report_violation) -> None:
        def run() -> None:
            converted = [engine_form.object_from_resource(r.resource_type, r.props, r.name) for r in args.resources]
            objects = [o for o in converted if o is not None]
            # The analyzer protocol carries `protect` but not `retainOnDelete`: None marks it unknown.
            infos = [
                engine_form.resource_info(r.resource_type, r.name, r.props, r.opts.protect, None, o)
                for r, o in zip(args.resources, converted)
            ]
            violations, skipped = base.evaluate(rule, objects, base.Context(args.get_config(), infos))
            _report(violations, skipped, args, report_violation)

        _guarded(rule, "stack", run, report_violation)

    return validate


def _policy(rule: base.Rule):
    level = EnforcementLevel(rule.level)
    schema = PolicyConfigSchema(dict(rule.config_schema)) if rule.config_schema else None
    if rule.scope == "stack":
        return StackValidationPolicy(rule.name, rule.description, _stack_validator(rule), level, schema)
    return ResourceValidationPolicy(rule.name, rule.description, _resource_validator(rule), level, schema)


PolicyPack("kimi-k3", [_policy(rule) for rule in rules.RULES])
