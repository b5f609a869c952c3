"""Run the real controller, as synthesized, against the HyperPod fake on virtual time.

moto provides DynamoDB, SSM, CloudWatch Logs, Lambda (in-process, see `moto_patches`) and Step Functions
(its ASL interpreter runs the deployed definition). The EventBridge rules are the synthesized patterns,
evaluated with moto's own matcher; matching events go to the Intake function, and the schedule rule's
Reconcile runs every `reconcile_every_s` of virtual time. With `asynchronous=True` (the twin) those two
EventBridge targets are invoked as Lambda invokes asynchronously: a function error is retried twice, then
the event is given up (counted, as a DLQ would hold it); explicit calls (`invoke`, `api`) always raise.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any
from unittest import mock

import boto3
from moto import mock_aws
from moto.events.models import EventPattern

from tests.fakes.hyperpod import FakeHyperPod, install
from tests.harness import iam, moto_patches
from tests.harness.template import ControllerTemplate

ACCOUNT, REGION = "123456789012", "us-east-1"
TABLE_NAME = "hyperpod-dhc-nodes"
# CloudFormation names the parameter (the template gives no Name): a simple name, no leading slash, which is
# what the grant's `parameter/<Ref>` ARN is built for.
CONFIG_PARAMETER_NAME = "HyperPodDhc-ControllerConfig"
TOPIC_NAME = "hyperpod-dhc-notifications"
STEP_S = 60.0  # virtual time advances in steps of at most this, delivering events in between
MOTO_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
# Lambda retries a failed asynchronous invocation twice: one minute, then two minutes later.
ASYNC_RETRY_DELAYS_S = (60.0, 120.0)
SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event"}


class Harness:
    def __init__(
        self,
        template: ControllerTemplate,
        fake: FakeHyperPod,
        config: dict[str, Any] | None = None,
        reconcile_every_s: float | None = None,
        asynchronous: bool = False,
    ) -> None:
        self.template = template
        self.fake = fake
        self.clock = fake.clock
        self.config = config or {}
        self.reconcile_every_s = reconcile_every_s or 60.0 * template.reconcile_every_minutes
        # Held while virtual time moves (`advance`) and while any Lambda handler runs, whatever its thread: an
        # execution that an Intake invocation starts mid-advance runs its first Task only once that advance is
        # over, never at a virtual time that depends on thread scheduling.
        self._lock = threading.RLock()
        self._deadline: float | None = None  # virtual time no execution's Wait passes (`run_until(hold=True)`)
        self._parked = 0  # execution threads waiting at the deadline
        self._moved = threading.Condition(self._lock)  # notified when the deadline is lifted
        self._next_reconcile = self.clock.now() + self.reconcile_every_s
        self.delivered: list[dict] = []
        self.unmatched: list[dict] = []
        self._stack: list[Any] = []
        self.retry_back_offs: list[float] = []  # seconds of every ASL Retry back-off, in order
        self._triggers: list[tuple[Callable[[], bool], Callable[[], None]]] = []
        self._scheduled: list[tuple[float, int, Callable[[], None]]] = []  # heap of (time, seq, action)
        self.on_step: list[Callable[[float], None]] = []
        self._seq = itertools.count()
        self.closing = False
        self.asynchronous = asynchronous
        self.retried_invocations = 0  # asynchronous invocations retried after a function error
        self.failed_invocations: list[dict] = []  # given up after the retries: {function, payload, error}
        self.invocations: Counter[str] = Counter()  # the harness's own invocations (Intake, Reconcile, API) by name
        self._notifications: list[dict] = []  # read from the topic's queue so far
        # Every AWS request of the controller is authorized against its role as synthesized (tests/harness/iam.py).
        names = iam.PhysicalNames(ACCOUNT, REGION, TABLE_NAME, CONFIG_PARAMETER_NAME, TOPIC_NAME)
        self.iam = iam.Authorizer(template.template, names, fake.cluster_arn)

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> Harness:
        from hyperpod_dhc.deephealth.adapters import aws
        from hyperpod_dhc.deephealth.domain.policy import parse_config

        parse_config(self.config)  # the same validation as synth: a bad test config fails here, clearly
        twin_env = {
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "twin",
            "AWS_SECRET_ACCESS_KEY": "twin",
        }  # never a real account: everything below is moto
        for cm in (
            mock.patch.dict(os.environ, twin_env),
            mock_aws(config=MOTO_CONFIG),  # type: ignore[call-overload]  # moto types its config as a TypedDict
            install(self.fake),
            moto_patches.patched(self._wait, self._retry_back_off, self._wrap_invocation, self._lock),
            moto_patches.authorized_requests(self.iam),
            mock.patch("hyperpod_dhc.deephealth.adapters.clock.now", self.clock.now),
            # Powertools' parameter cache (config_store's max_age) expires on datetime.now(): on wall time, a
            # slow run would re-read the config more often than a fast one.
            mock.patch("aws_lambda_powertools.utilities.parameters.base.datetime", _virtual_datetime(self.clock.now)),
        ):
            cm.__enter__()
            self._stack.append(cm)
        aws.reset()
        _clear_parameter_cache()
        _cold_start()
        self._create_resources()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing = True  # from now on time stands still and no Lambda runs
        for execution in self.running():  # the horizon ended the run: stop what is left, don't wait
            self._stop(execution["executionArn"])
        if self._parked:  # stopped, they leave their Wait at the deadline and end
            with self._lock:
                self._moved.notify_all()
        # Let the interpreter threads notice before the mocks go: no call may ever leave this process.
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in moto_patches.interpreter_threads()) and time.monotonic() < deadline:
            time.sleep(0.05)
        while self._stack:
            self._stack.pop().__exit__(None, None, None)

    def _stop(self, execution_arn: str) -> None:
        # moto raises AttributeError when an execution is stopped before its worker thread has set itself up
        # (an execution started an instant ago); it is set up within milliseconds.
        for _ in range(100):
            try:
                self.sfn.stop_execution(executionArn=execution_arn, cause="simulation horizon")
                return
            except AttributeError:
                time.sleep(0.01)
        self.sfn.stop_execution(executionArn=execution_arn, cause="simulation horizon")

    def _create_resources(self) -> None:
        ddb = boto3.client("dynamodb", region_name=REGION)
        # The nodes table as the template deploys it: keys, attributes and indexes.
        table = next(
            r["Properties"]
            for r in self.template.template["Resources"].values()
            if r["Type"] in ("AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table")
        )
        indexes = [
            {"IndexName": i["IndexName"], "KeySchema": i["KeySchema"], "Projection": i["Projection"]}
            for i in table.get("GlobalSecondaryIndexes", [])
        ]
        ddb.create_table(
            TableName=TABLE_NAME,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=table["AttributeDefinitions"],
            KeySchema=table["KeySchema"],
            **({"GlobalSecondaryIndexes": indexes} if indexes else {}),
        )
        boto3.client("ssm", region_name=REGION).put_parameter(
            Name=CONFIG_PARAMETER_NAME, Type="String", Value=json.dumps(self.config)
        )
        sns, sqs = boto3.client("sns", region_name=REGION), boto3.client("sqs", region_name=REGION)
        self.topic_arn = sns.create_topic(Name=TOPIC_NAME)["TopicArn"]
        # A queue subscribed with raw delivery off, so tests read the notifications (attributes included).
        self.notifications_queue = sqs.create_queue(QueueName="notifications")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=self.notifications_queue, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=self.topic_arn, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"])
        role = boto3.client("iam", region_name=REGION).create_role(
            RoleName="controller", AssumeRolePolicyDocument="{}"
        )["Role"]["Arn"]
        self.state_machine_arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{self.template.state_machine_name}"
        lam = boto3.client("lambda", region_name=REGION)
        arns = {}
        for fn in self.template.functions:
            env = {**fn.literal_env, "TABLE_NAME": TABLE_NAME, "CONFIG_PARAMETER_NAME": CONFIG_PARAMETER_NAME}
            if fn.starts_rounds:
                env["ROUND_STATE_MACHINE_ARN"] = self.state_machine_arn
            if fn.notifies:
                env["NOTIFICATIONS_TOPIC_ARN"] = self.topic_arn
            arns[fn.logical_id] = lam.create_function(
                FunctionName=fn.construct_id,
                Runtime="python3.12",
                Role=role,
                Handler=fn.handler,
                Code={"ZipFile": b"in-process"},
                Environment={"Variables": env},
            )["FunctionArn"]
        self.function_arns = arns
        self.intake_arn = arns[self.template.intake_logical_id]
        self.reconcile_arn = arns[self.template.reconcile_logical_id]
        self.definition = self.template.definition(arns)
        self.sfn = boto3.client("stepfunctions", region_name=REGION)
        created = self.sfn.create_state_machine(
            name=self.template.state_machine_name, definition=self.definition, roleArn=role, type="STANDARD"
        )
        assert created["stateMachineArn"] == self.state_machine_arn
        self.lam = lam
        self.patterns = [EventPattern.load(json.dumps(p)) for p in self.template.event_patterns]

    # -- the world moves ---------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Advance virtual time, delivering what happens (a test's or the operator's own move: it lifts the
        deadline a held run stopped at, see `run_until`)."""
        self._resume()
        self._advance(seconds)

    def _wait(self, seconds: float) -> None:
        """A Wait state of an execution."""
        self._advance(seconds, park=True)

    def _advance(self, seconds: float, park: bool = False) -> None:
        """Move the clock `seconds`, but not past the deadline; an execution (`park`) that wants to wait past
        it stays there until the run ends (or the deadline is lifted: then it waits the rest)."""
        if self.closing:
            return
        with self._lock:
            seconds = max(0.0, seconds)
            deadline = self._deadline
            remaining = seconds if deadline is None else min(seconds, max(0.0, deadline - self.clock.now()))
            beyond = seconds - remaining
            while True:
                step = min(STEP_S, remaining)
                if self._scheduled:
                    step = max(0.0, min(step, self._scheduled[0][0] - self.clock.now()))
                if step > 0:
                    self.clock.advance(step)
                    remaining -= step
                while self._scheduled and self._scheduled[0][0] <= self.clock.now():
                    heapq.heappop(self._scheduled)[2]()
                for trigger in [t for t in self._triggers if t[0]()]:
                    self._triggers.remove(trigger)
                    trigger[1]()
                for event in self.fake.drain_events():
                    self.deliver(event)
                if self.clock.now() >= self._next_reconcile:
                    self._next_reconcile = self.clock.now() + self.reconcile_every_s
                    self.invoke_event(self.reconcile_arn, SCHEDULED_EVENT)
                for callback in self.on_step:
                    callback(self.clock.now())
                if remaining <= 0:
                    break
            if not park or beyond <= 0:
                return
            self._parked += 1
            try:
                while self._deadline == deadline and not self.closing:  # until lifted (or moved by a new run)
                    self._moved.wait()
            finally:
                self._parked -= 1
            self._advance(beyond, park)

    def hold(self, seconds: float) -> None:
        """From now, no Wait passes `seconds` from now until a test's `advance` or `invoke` lifts it: with `settle`,
        a test reads the world at a virtual time that thread scheduling cannot move (an execution's Wait moves the
        clock on the execution's own thread)."""
        with self._lock:
            self._deadline = self.clock.now() + seconds

    def settle(self, timeout_s: float = 60) -> None:
        """Until every running execution waits at the `hold` deadline."""
        deadline = time.monotonic() + timeout_s
        while len(self.running()) > self._parked:
            if time.monotonic() > deadline:
                raise AssertionError("an execution never reached a Wait at the held deadline")
            time.sleep(0.05)

    def _resume(self) -> None:
        if self._deadline is None:
            return
        with self._lock:
            self._deadline = None
            self._moved.notify_all()

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run `action` at virtual time `when` (e.g. a node arriving)."""
        with self._lock:
            heapq.heappush(self._scheduled, (when, next(self._seq), action))

    @property
    def scheduled(self) -> int:
        return len(self._scheduled)

    def when(self, condition: Callable[[], bool], action: Callable[[], None]) -> None:
        """Run `action` once, at the first time step where `condition()` holds (fault injection mid-round)."""
        self._triggers.append((condition, action))

    def _retry_back_off(self, seconds: float) -> None:
        self.retry_back_offs.append(seconds)
        self._advance(seconds, park=True)

    def deliver(self, event: dict) -> None:
        """An EventBridge event: to Intake if any synthesized rule pattern matches it (as in AWS)."""
        if any(p.matches_event(event) for p in self.patterns):  # type: ignore[arg-type]  # moto: a TypedDict
            self.delivered.append(event)
            self.invoke_event(self.intake_arn, event)
        else:
            self.unmatched.append(event)

    def invoke(self, arn: str, payload: dict) -> dict:
        """A synchronous invocation (a test's own call): a function error fails the caller."""
        self._resume()  # the world moves on past a held run's deadline
        return self._invoke(arn, payload)

    def _invoke(self, arn: str, payload: dict) -> dict:
        body, failed = self._call(arn, payload)
        if failed:
            raise AssertionError(f"{arn} failed: {body}")
        return body

    def invoke_event(self, arn: str, payload: dict, attempt: int = 0) -> None:
        """An EventBridge target's invocation. Asynchronous harness: a function error is retried as Lambda
        does, then the event is given up; otherwise (integration tests) it fails the caller at once."""
        if not self.asynchronous:
            with iam.invoked_by("events", payload):  # a Lambda permission must let the rule invoke it
                self._invoke(arn, payload)
            return
        with iam.invoked_by("events", payload):
            body, failed = self._call(arn, payload)
        if not failed:
            return
        if attempt < len(ASYNC_RETRY_DELAYS_S):
            self.retried_invocations += 1
            self.at(
                self.clock.now() + ASYNC_RETRY_DELAYS_S[attempt],
                lambda: self.invoke_event(arn, payload, attempt + 1),
            )
        else:
            self.failed_invocations.append({"function": arn.rsplit(":", 1)[-1], "payload": payload, "error": body})
            self.iam.dead_letter(arn.rsplit(":", 1)[-1])  # sent to its on-failure queue with the function's role

    def _call(self, arn: str, payload: dict) -> tuple[Any, bool]:
        """(the response payload, whether it is a function error)."""
        from botocore.exceptions import ClientError

        self.invocations[arn.rsplit(":", 1)[-1]] += 1
        try:
            response = self.lam.invoke(FunctionName=arn, Payload=json.dumps(payload).encode())
        except ClientError as err:  # refused before the function ran (no permission to invoke it)
            return {"errorType": err.response["Error"]["Code"], "errorMessage": str(err)}, True
        return json.loads(response["Payload"].read() or b"null"), bool(response.get("FunctionError"))

    def _wrap_invocation(self, function_name: str, handler: moto_patches.Handler) -> moto_patches.Handler:
        """The handler one invocation runs; the twin substitutes crashing ones."""
        return handler

    def redeploy(self) -> list[str]:
        """What `cdk deploy` of the same code does mid-flight: the state machine is updated in place (running
        executions keep their definition) and every function's next invocation is a cold start. Returns the
        handler modules that were warm."""
        from hyperpod_dhc.deephealth.adapters import aws

        self.sfn.update_state_machine(stateMachineArn=self.state_machine_arn, definition=self.definition)
        with moto_patches.cold_start_lock():  # between invocations, never under a running handler
            aws.reset()
            _clear_parameter_cache()
            return _cold_start()

    def notifications(self) -> list[dict]:
        """Every SNS notification published so far: the message plus its attributes (as SNS delivers them).
        The queue is drained into a list kept here, so any number of readers see them all."""
        sqs = boto3.client("sqs", region_name=REGION)
        out = self._notifications
        while True:
            got = sqs.receive_message(QueueUrl=self.notifications_queue, MaxNumberOfMessages=10)
            if not got.get("Messages"):
                return list(out)
            for m in got["Messages"]:
                envelope = json.loads(m["Body"])
                attributes = {k: v["Value"] for k, v in envelope.get("MessageAttributes", {}).items()}
                out.append(
                    {
                        "subject": envelope.get("Subject"),
                        "attributes": attributes,
                        "message": json.loads(envelope["Message"]),
                    }
                )
                sqs.delete_message(QueueUrl=self.notifications_queue, ReceiptHandle=m["ReceiptHandle"])

    def api(
        self,
        method: str,
        path: str,
        body: object = None,
        query: dict | None = None,
        principal: str = "arn:aws:iam::123456789012:user/operator",
    ) -> tuple[int, dict]:
        """Call the operator API as API Gateway would (REST proxy event, IAM-authenticated principal).

        First what API Gateway answers itself, from the template: no such method, an explicit deny of the
        resource policy for `principal` (who may reset, queue checks of or run the Slurm bridge of which cluster),
        no invoke permission.
        """
        from tests.harness.api_gateway import proxy_event, refusal

        refused = refusal(self.template.template, method, path, principal)
        if refused is not None:
            return refused
        arn = self.function_arns[self.template.api_logical_id]
        response = self.invoke(arn, proxy_event(method, path, body, query, principal))
        return response["statusCode"], json.loads(response["body"] or "null")

    def reconcile(self) -> dict:
        return self.invoke(self.reconcile_arn, SCHEDULED_EVENT)

    # -- running ------------------------------------------------------------------------------------
    def running(self) -> list[dict]:
        """The executions still running, newest first, as ListExecutions items. Read from moto's backend, not
        through the API: `run_until` asks every 50 ms while an execution runs, and a serialized page a time held
        the GIL the execution's own thread needs (a sixth of a twin run's wall time)."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        backend: Any = stepfunctions_parser_backends[ACCOUNT][REGION]
        machine = backend.describe_state_machine(self.state_machine_arn)
        for _ in range(100):
            executions = list(machine.executions)
            if all(e.exec_status is not None for e in executions):
                break
            # An execution another thread is starting has no status (nor worker: a stop would miss it) for a
            # few milliseconds.
            time.sleep(0.01)
        else:
            raise RuntimeError("moto never gave an execution its status")
        running = [e for e in executions if e.exec_status.value == "RUNNING"]
        return [
            {
                "executionArn": e.execution_arn,
                "stateMachineArn": self.state_machine_arn,
                "name": e.name,
                "status": "RUNNING",
                "startDate": e.start_date,
            }
            for e in sorted(running, key=lambda e: e.start_date, reverse=True)
        ]

    def executions(self) -> list[dict]:
        pages = self.sfn.get_paginator("list_executions").paginate(stateMachineArn=self.state_machine_arn)
        return [e for p in pages for e in p["executions"]]

    def wait_for_executions(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)

    def run_until(
        self, done: Callable[[], bool], horizon_s: float, idle_step_s: float = STEP_S, hold: bool = False
    ) -> float:
        """Let the controller work until `done()` or the horizon; returns virtual seconds elapsed.

        While an execution runs its Wait states drive the clock; when none runs, time moves in idle steps.
        Without `hold`, the executions still running at the horizon are then waited for (at most a minute of
        wall time). With `hold` (the twin's reports), the horizon is a deadline no Wait passes: the run ends
        once every running execution waits there, and they stay there (the world frozen, reproducibly) until
        the harness closes, or an `advance` or `invoke` lifts the deadline.
        """
        self._resume()  # a deadline an earlier held run left
        start = self.clock.now()
        if hold:
            with self._lock:
                self._deadline = start + horizon_s
        while self.clock.now() - start < horizon_s:
            if running := self.running():
                if hold and len(running) <= self._parked:
                    break  # every execution waits at the deadline
                time.sleep(0.05)  # the executions' own Wait states move time meanwhile
                continue
            if done():
                break
            self._advance(idle_step_s)
        if not hold:
            self.wait_for_executions()
            return self.clock.now() - start
        deadline = time.monotonic() + 600  # a safeguard: every execution reaches its next Wait long before
        while len(self.running()) > self._parked and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._parked:
            self._resume()  # done before the horizon: nothing waits at it
        return self.clock.now() - start

    def state_transitions(self) -> int:
        """The states every execution of the state machine entered, read from moto's own histories (the API's
        pages serialize every event's input and output: seconds per run for a count)."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        backend: Any = stepfunctions_parser_backends[ACCOUNT][REGION]
        histories = (backend.describe_execution(e["executionArn"]).to_history_output() for e in self.executions())
        return sum(1 for history in histories for event in history["events"] if event["type"].endswith("StateEntered"))

    def history(self, execution_arn: str) -> list[dict]:
        pages = self.sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
        return [e for p in pages for e in p["events"]]

    def records(self, cluster: str) -> dict:
        from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

        return NodeTable(TABLE_NAME).load_cluster(cluster)

    def readings(self, cluster: str) -> Any:
        """What the controller saw the cluster do (`domain.readings.ClusterReadings`); None for a controller that
        keeps no readings (an earlier version's, for a comparison)."""
        from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

        table = NodeTable(TABLE_NAME)
        return table.readings(cluster) if hasattr(table, "readings") else None


def _cold_start() -> list[str]:
    """Forget imported handlers (and their warm caches), as a new deployment's first invocations would;
    returns the modules forgotten."""
    names = [m for m in sys.modules if m.startswith("hyperpod_dhc.deephealth.handlers.")]
    for name in names:
        del sys.modules[name]
    from hyperpod_dhc.deephealth import settings

    settings.load.cache_clear()
    return names


def _virtual_datetime(now: Callable[[], float]) -> type[datetime]:
    """`datetime` whose `now()` reads the virtual clock."""

    class VirtualDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.fromtimestamp(now(), tz)

    return VirtualDatetime


def _clear_parameter_cache() -> None:
    from aws_lambda_powertools.utilities import parameters

    parameters.clear_caches()
