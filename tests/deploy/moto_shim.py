"""Test-harness patches to moto 5.2.5's CloudFormation, for `cdk bootstrap` / `deploy` / `destroy` of HyperPodDhc
against moto's server (tests/deploy/moto_server.py imports this before starting it). Each makes moto do what
CloudFormation does; none changes a template. Without them the deploy stops at the step named
(found with the synthesized stack).

Resource types (the stack's creation aborts at the first one):
  1. AWS::SSM::Parameter without Name: moto passes Name=None to put_parameter (AttributeError). CloudFormation
     generates a name: use the one moto's parser generated. Its Tags, a JSON object in CloudFormation ({"k": "v"}),
     moto reads as a list of {Key, Value} (TypeError): convert.
  2. AWS::KMS::Key with Tags: CloudFormation's are [{Key, Value}], moto's create_key wants [{TagKey, TagValue}]
     (KeyError 'TagKey'): convert.
  3. AWS::DynamoDB::GlobalTable: unsupported (skipped), so every Fn::GetAtt on it (the IAM policies' table ARNs)
     fails. Stand it in with moto's AWS::DynamoDB::Table built from its properties and its replica in this region.
  4. AWS::CloudWatch::Alarm: unsupported (skipped), so the dashboard's Fn::GetAtt Alarm.Arn fails. Create it with
     moto's CloudWatch put_metric_alarm.

Change sets (what the CDK CLI deploys with):
  5. ExecuteChangeSet leaves the stack without Outputs (its output map is built from the empty template of the
     change set's new stack): rebuild it, as CreateStack/UpdateStack do.
  6. A resource failing in ExecuteChangeSet is a 500 mid-way; the SDK retries, the retry finds nothing left to add
     and succeeds, and the stack reads CREATE_COMPLETE with resources missing: `cdk deploy` exits 0. CloudFormation
     fails asynchronously: mark the stack ROLLBACK_COMPLETE / UPDATE_ROLLBACK_COMPLETE with a *_FAILED event naming
     the error (traceback in the server's log), so the CLI reports the failure.
  7. ExecuteChangeSet creates the added resources in template order, ignoring DependsOn (CreateStack honours it):
     the API Gateway Deployment comes before its Methods ("The REST API doesn't contain any methods"). Order them
     by DependsOn.
  8. Executed change sets stay listed (CloudFormation removes a stack's change sets once one is executed), and
     DeleteChangeSet of an absent one is an UnboundLocalError 500, while the CLI calls DeleteChangeSet
     unconditionally before each update and then waits for DescribeChangeSet to raise ChangeSetNotFoundException
     (moto: ValidationError "Stack with id ... does not exist"). Remove them on execution; DeleteChangeSet of an
     absent change set is a no-op and DescribeChangeSet raises ChangeSetNotFoundException.
  9. UsePreviousValue (the CLI's, for BootstrapVersion on an update) takes the previous *resolved* value: for an
     AWS::SSM::Parameter::Value<String> parameter that is the SSM value ("33"), which moto then looks up as a
     parameter name (AttributeError). CloudFormation's previous value is the one given (or the Default).
"""

from __future__ import annotations

import traceback
from typing import Any

from moto.cloudformation import parsing
from moto.core.common_models import CloudFormationModel
from moto.dynamodb.models.table import Table
from moto.kms.models import Key
from moto.ssm.models import Parameter

_ssm_create = Parameter.create_from_cloudformation_json.__func__


def _ssm_create_named(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    props = cloudformation_json.setdefault("Properties", {})
    props.setdefault("Name", resource_name)
    if isinstance(props.get("Tags"), dict):
        props["Tags"] = [{"Key": k, "Value": v} for k, v in props["Tags"].items()]
    return _ssm_create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)


Parameter.create_from_cloudformation_json = classmethod(_ssm_create_named)

_kms_create = Key.create_from_cloudformation_json.__func__


def _kms_create_tags(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    props = cloudformation_json.setdefault("Properties", {})
    props["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in props.get("Tags", [])]
    return _kms_create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)


Key.create_from_cloudformation_json = classmethod(_kms_create_tags)


class GlobalTableAsTable(CloudFormationModel):
    __module__ = "moto.dynamodb.models.table"  # moto's model metaclass derives the service from the module path

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::DynamoDB::GlobalTable"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "TableName"

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        props = dict(cloudformation_json["Properties"])
        replica = next((r for r in props.pop("Replicas", []) if r.get("Region") == region_name), {})
        props["DeletionProtectionEnabled"] = replica.get("DeletionProtectionEnabled", False)
        props["Tags"] = replica.get("Tags", [])
        return Table.create_from_cloudformation_json(
            resource_name, {"Properties": props}, account_id, region_name, **kwargs
        )

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
        return Table.delete_from_cloudformation_json(resource_name, cloudformation_json, account_id, region_name)


class AlarmModel(CloudFormationModel):
    __module__ = "moto.cloudwatch.models"

    def __init__(self, alarm: Any, account_id: str, region_name: str):
        self.alarm, self.account_id, self.region_name = alarm, account_id, region_name

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudWatch::Alarm"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "AlarmName"

    @property
    def physical_resource_id(self) -> str:
        return self.alarm.name

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        return self.alarm.alarm_arn

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        from moto.cloudwatch.models import Dimension, Metric, MetricDataQuery, MetricStat, cloudwatch_backends

        p = cloudformation_json["Properties"]
        queries = None
        if p.get("Metrics"):
            queries = []
            for m in p["Metrics"]:
                stat = m.get("MetricStat")
                metric_stat = None
                if stat:
                    met = stat["Metric"]
                    dims = [Dimension(name=d["Name"], value=d["Value"]) for d in met.get("Dimensions", [])]
                    metric_stat = MetricStat(
                        metric=Metric(metric_name=met["MetricName"], namespace=met["Namespace"], dimensions=dims),
                        period=stat.get("Period"),
                        stat=stat.get("Stat"),
                        unit=stat.get("Unit"),
                    )
                queries.append(
                    MetricDataQuery(
                        query_id=m.get("Id"),
                        label=m.get("Label"),
                        period=m.get("Period"),
                        return_data=m.get("ReturnData"),
                        expression=m.get("Expression"),
                        metric_stat=metric_stat,
                    )
                )
        alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
            name=p.get("AlarmName", resource_name),
            namespace=p.get("Namespace"),
            metric_name=p.get("MetricName"),
            comparison_operator=p["ComparisonOperator"],
            evaluation_periods=p["EvaluationPeriods"],
            period=p.get("Period"),
            threshold=p.get("Threshold"),
            statistic=p.get("Statistic"),
            description=p.get("AlarmDescription"),
            dimensions=p.get("Dimensions", []),
            alarm_actions=p.get("AlarmActions", []),
            metric_data_queries=queries,
            datapoints_to_alarm=p.get("DatapointsToAlarm"),
            extended_statistic=p.get("ExtendedStatistic"),
            ok_actions=p.get("OKActions", []),
            insufficient_data_actions=p.get("InsufficientDataActions", []),
            unit=p.get("Unit"),
            actions_enabled=p.get("ActionsEnabled", True),
            treat_missing_data=p.get("TreatMissingData"),
            tags=p.get("Tags"),
        )
        return cls(alarm, account_id, region_name)

    def delete(self, account_id: str, region_name: str) -> None:
        from moto.cloudwatch.models import cloudwatch_backends

        cloudwatch_backends[account_id][region_name].delete_alarms([self.alarm.name])


from moto.cloudformation.models import CloudFormationBackend  # noqa: E402

_execute = CloudFormationBackend.execute_change_set


def _execute_change_set(self, change_set_name, stack_name=None):
    change_set = self.change_sets.get(change_set_name) or next(
        (c for c in self.change_sets.values() if c.change_set_name == change_set_name), None
    )
    if change_set is None:
        return _execute(self, change_set_name, stack_name)
    stack = self.stacks[change_set.stack_id]
    try:
        _execute(self, change_set_name, stack_name)
    except Exception as exc:
        traceback.print_exc()  # into the server's log
        failed = f"{change_set.change_set_type}_FAILED"
        stack._add_stack_event(failed, resource_status_reason=f"{type(exc).__name__}: {exc}")
        stack.status = "ROLLBACK_COMPLETE" if change_set.change_set_type == "CREATE" else "UPDATE_ROLLBACK_COMPLETE"
        stack._add_stack_event(stack.status)
        change_set.execution_status = "EXECUTE_FAILED"
        return
    stack._parse_template()
    stack.output_map = stack._create_output_map()
    for arn in [a for a, c in self.change_sets.items() if c.stack_id == stack.stack_id]:
        del self.change_sets[arn]


CloudFormationBackend.execute_change_set = _execute_change_set

_delete_change_set = CloudFormationBackend.delete_change_set


def _delete_change_set_if_present(self, change_set_name):
    if change_set_name in self.change_sets or any(
        c.change_set_name == change_set_name for c in self.change_sets.values()
    ):
        _delete_change_set(self, change_set_name)


CloudFormationBackend.delete_change_set = _delete_change_set_if_present

from moto.cloudformation.exceptions import CloudFormationError  # noqa: E402


class ChangeSetNotFoundException(CloudFormationError):
    __module__ = "moto.cloudformation.exceptions"  # moto's error serializer derives the service from it
    code = "ChangeSetNotFoundException"


_describe_change_set = CloudFormationBackend.describe_change_set


def _describe_change_set_or_not_found(self, change_set_name):
    if change_set_name in self.change_sets or any(
        c.change_set_name == change_set_name for c in self.change_sets.values()
    ):
        return _describe_change_set(self, change_set_name)
    raise ChangeSetNotFoundException(f"ChangeSet [{change_set_name}] does not exist")


CloudFormationBackend.describe_change_set = _describe_change_set_or_not_found

from moto.cloudformation.models import Stack  # noqa: E402


def _stack_parameters(self):
    given = {k: v.get("Default") for k, v in (self.resource_map._template or {}).get("Parameters", {}).items()}
    given.update(self.resource_map.input_parameters or {})
    return {
        k: given.get(k, v) if given.get(k) is not None else v for k, v in self.resource_map.resolved_parameters.items()
    }


Stack.stack_parameters = property(_stack_parameters)

_diff = parsing.ResourceMap.build_resource_diff


def _depends_on_order(resources: dict[str, Any]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in resources:
            return
        seen.add(name)
        deps = resources[name].get("DependsOn", [])
        for dep in [deps] if isinstance(deps, str) else deps:
            visit(dep)
        order.append(name)

    for name in resources:
        visit(name)
    return order


def _build_resource_diff(self, other_template, *args, **kwargs):
    actions = _diff(self, other_template, *args, **kwargs)
    added = set(actions["Add"])
    actions["Add"] = [n for n in _depends_on_order(other_template.get("Resources", {})) if n in added]
    return actions


parsing.ResourceMap.build_resource_diff = _build_resource_diff


for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
    cached.cache_clear()
