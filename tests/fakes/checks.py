"""On-demand deep health checks as the HyperPod fake plays them: StartClusterHealthCheck, the cluster operation
each accepted request is (ListClusterOperations / DescribeClusterOperation), the node's way through the
check, and its result lines in CloudWatch Logs (their format, stream and which lines are written are readings).

A mixin of ``FakeHyperPod`` (``tests/fakes/hyperpod.py``), split out for size only; the undocumented choices
are read from ``self.readings`` (``tests/fakes/readings.py``) at the moment of use.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import hashlib
import json
import random
import re
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hyperpod_dhc.deephealth.evidence.efa import efa_devices
from tests.corpus import aws_doc
from tests.fakes.model import (
    CHECK_TYPES,
    FAULT_MSG,
    JOB_WAIT_S,
    ApiError,
    Cluster,
    HealthCheck,
    Node,
    PeerSet,
    _check_node_ids,
    _iso,
    _ms,
    _paginate,
    _validation,
)
from tests.fakes.readings import Readings

# `result_lines: per-test`: the tests a failing node still passed (its error line is DCGM's, FAULT_MSG), each with
# its own line before the last; a healthy node writes them and its overall pass line.
PASSING_TESTS = ("stress-ng", "EFA loopback")

# `result_format: doc-plain`: the on-node lines the Slurm deep-health-checks page documents, trimmed (what the
# controller was first built on), one per test, each "<ts>  info  <text>". The DCGM summary carries the verdict of
# a GPU fault (FAULT_MSG's "DCGM ... failed"). The `doc-2024` and `doc-2026-*` formats write the page's lines
# verbatim instead (tests/corpus/aws_doc.py). Every EFA device writes its line (DEVICE, then rdmap0s30, ...).
STRESS_LINES = ("stress-ng success", "GpuPci Count check success")
DCGM_SUMMARY = (
    "DCGM diagnostic health summary: dcgmCheckLevel: 4 dcgmVersion: 3.3.7 gpuDriverVersion: 535.183.01, "
    "gpuDeviceIds: [2330] replacementRequired: {replace} rebootRequired: {reboot}"
)
EFA_LINE = "EFA Loopback check passed for device: {device}"
EFA_FAILED = "EFA Loopback check failed for device: {device}"  # `faulty_test: efa` (undocumented wording)
# InstanceConnectivity's line (per node, or per configuration under `nccl_summary`): it names no node.
NCCL_SUMMARY = (
    "Nccl test successful. Summary: NcclMaxAlgoBw: 181.52, NcclAvgAlgoBw: 170.08, NcclNodes: {nodes}, "
    "NcclClusterMessage:"
)
MNTV_LINE = "MultiNodeTrainingValidation passed"  # no documented line
PEER_LINE = "NCCL all_reduce with peer {instance_id} ({hostname}) passed"  # `peer_lines`

IN_CHECK = "DeepHealthCheckInProgress"
VERBATIM_FORMATS = ("doc-2024", "doc-2026-lines", "doc-2026-records")
LEADING_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
FLAG = re.compile(r"\b(replacementRequired|rebootRequired)(:\s?)(?:false|true)")


@dataclass(frozen=True)
class Entry:
    """One log event the fake writes: its message, its stamp on the real clock, whether it says a failure, and the
    record it is a line of (a record's lines are shipped together: one lag; None: a record of its own)."""

    message: str
    at: float
    failure: bool = False
    record: int | None = None


def _stamped(line: str, at: float) -> str:
    """A verbatim line with its time the fake's (a time column keeps its shape: milliseconds and an offset)."""
    match = LEADING_TIME.match(line)
    if match is None:
        return line
    when = datetime.fromtimestamp(at, UTC)
    text = match.group(0)
    if "." in text:
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}" + "+00:00"
    else:
        stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return stamp + line[match.end() :]


def _flags(line: str, replace: bool, reboot: bool) -> str:
    """A DCGM line with its flags set (spelled as the line spells them)."""
    return FLAG.sub(
        lambda m: m.group(1) + m.group(2) + str(replace if m.group(1) == "replacementRequired" else reboot).lower(),
        line,
    )


def _device(line: str, device: str, failed: bool) -> str:
    line = line.replace(aws_doc.DEVICE, device)
    return line.replace("check passed for device", "check failed for device") if failed else line


class HealthChecks:
    # Provided by FakeHyperPod.
    readings: Readings
    region: str
    account: str
    check_duration_s: dict[str, float]
    started_while_active: int
    rejected_while_active: list[tuple[float, str, list[dict[str, Any]]]]
    asked_past_held: list[str]
    _t: float
    _seq: Iterator[int]
    _reading_rng: random.Random

    if TYPE_CHECKING:

        def _at(self, c: Cluster, delay: float, fn: Callable[[], None]) -> None: ...
        def _cluster(self, params: dict[str, Any], visible: bool) -> Cluster: ...
        def _mutable(self, params: dict[str, Any], visible: bool) -> Cluster: ...
        def _replace(self, c: Cluster, n: Node, actor: str) -> None: ...
        def _reboot(self, c: Cluster, n: Node, actor: str, duration: float | None = None) -> None: ...
        def _fail_then_retry(self, c: Cluster, n: Node, retry: Callable[[], None]) -> None: ...
        def _draw(self, span: tuple[float, float]) -> float: ...
        def _reading_uuid(self) -> str: ...
        def _hostname(self, ip: str) -> str: ...

    # ---- StartClusterHealthCheck ----------------------------------------------------------------------

    def _op_start_cluster_health_check(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._mutable(p, visible)
        configs = p.get("DeepHealthCheckConfigurations") or []
        if not 1 <= len(configs) <= 99:
            raise _validation("DeepHealthCheckConfigurations must have between 1 and 99 items.")
        targets: dict[str, set[str]] = {}  # logical id -> check types; overlapping configs merge [MODEL]
        unsupported: list[str] = []  # unsupported_types skip: part of the request, never checked
        connectivity: list[list[Node]] = []  # the configurations whose nodes NCCL tests together
        for cfg in configs:
            members = self._config_members(c, cfg)
            if self._unsupported(c, cfg["InstanceGroupName"]):
                unsupported += [n.logical_id for n in members]
                continue
            if "InstanceConnectivity" in cfg["DeepHealthChecks"]:
                connectivity.append(members)
            for n in members:
                targets.setdefault(n.logical_id, set()).update(cfg["DeepHealthChecks"])

        active, restart = c.check, set[str]()
        if active is None:
            check = self._new_check(c, configs)
        else:
            # isolated_holds_operation: every node still in the operation is one whose test is over, held there
            # until someone reboots or replaces it. A request then is no request while a check runs; it is
            # counted apart (its operation's id), and the controller sends one an operation at most.
            if active.holding and active.pending <= active.holding:
                self.asked_past_held.append(active.operation_id)
            else:
                self.started_while_active += 1
            mode = self.readings.second_check_request
            if mode == "reject":  # INFERRED: the doc only states the limit, not the error
                self.rejected_while_active.append((self._t, c.name, configs))
                busy = self.readings.busy_error
                raise ApiError(busy.code, busy.message.replace("{cluster}", c.name), busy.status)
            if mode == "merge":
                check = active
                check.configurations += copy.deepcopy(configs)
            else:
                check = self._new_check(c, configs)
                restart = self._supersede(c, active, targets)
        for lid in unsupported:
            if lid not in targets:
                check.results.setdefault(lid, "skip")  # silently: no status change, no result line
        for lid, checks in targets.items():
            self._enqueue_check(c, check, c.nodes[lid], checks, restart=lid in restart)
        for members in connectivity:
            self._add_peer_set(c, check, members)
        self._maybe_end_check(c, check)
        return {"ClusterArn": c.arn}

    def _add_peer_set(self, c: Cluster, check: HealthCheck, members: list[Node]) -> None:
        """One configuration with InstanceConnectivity: its nodes (skipped ones too) are each other's peers."""
        s = PeerSet(members=[n.logical_id for n in members])
        s.open = {lid for lid in s.members if lid in check.pending and lid not in check.holding}
        s.began = sum(1 for lid in s.members if lid in check.began)  # merged: some may have begun already
        s.stream = self._summary_stream(f"{c.arn}/{check.operation_id}/{len(check.peer_sets)}")
        check.peer_sets.append(s)
        for lid in s.members:
            check.peers_of.setdefault(lid, []).append(s)

    def _config_members(self, c: Cluster, cfg: dict[str, Any]) -> list[Node]:
        """The nodes one configuration names, or ValidationException (the model lists only ResourceNotFound)."""
        group = cfg.get("InstanceGroupName", "")
        checks = cfg.get("DeepHealthChecks") or []
        if not 1 <= len(checks) <= 3:
            raise _validation("DeepHealthChecks must have between 1 and 3 items.")
        if bad := [t for t in checks if t not in CHECK_TYPES]:
            raise _validation(
                f"Value {bad} at 'deepHealthChecks' failed to satisfy constraint: "
                f"Member must satisfy enum value set: [{', '.join(CHECK_TYPES)}]"
            )
        spec = c.groups.get(group)
        if spec is None:
            raise _validation(f"Instance group {group} not found in cluster {c.name}.")
        if spec.node_type != "Compute":  # [DOC] deep health checks run on worker nodes only
            raise _validation(
                f"Deep health checks run on worker nodes only; instance group {group} "
                f"is a Slurm {spec.node_type} group."
            )
        if self._unsupported(c, group) and self.readings.unsupported_types.behaviour == "reject":
            raise _validation(
                f"Instance type {spec.instance_type} of instance group {group} does not support deep health checks."
            )
        members = [n for n in c.nodes.values() if n.group == group and n.instance_id]
        if "InstanceIds" in cfg:
            ids = cfg["InstanceIds"]
            if not 1 <= len(ids) <= 500:
                raise _validation("InstanceIds must have between 1 and 500 items.")
            _check_node_ids(ids, "instanceIds")
            by_id = {n.instance_id: n for n in members}
            if missing := [i for i in ids if i not in by_id]:
                raise _validation(f"Instances {missing} not found in instance group {group}.")
            members = [by_id[i] for i in dict.fromkeys(ids)]
        if "InstanceConnectivity" in checks and len(members) < 2:
            raise _validation("InstanceConnectivity requires at least 2 nodes.")
        return members

    def _unsupported(self, c: Cluster, group: str) -> bool:
        itype = c.groups[group].instance_type
        return any(fnmatch.fnmatchcase(itype, pat) for pat in self.readings.unsupported_types.patterns)

    def _new_check(self, c: Cluster, configs: list[dict[str, Any]]) -> HealthCheck:
        check = HealthCheck(
            requested=self._t,
            operation_id=self._reading_uuid(),
            configurations=copy.deepcopy(configs),
            seq=len(c.checks),
        )
        c.checks.append(check)
        c.check = check
        return check

    def _supersede(self, c: Cluster, old: HealthCheck, targets: dict[str, set[str]]) -> set[str]:
        """second_check_request supersede: the old operation ends Superseded. Its unfinished nodes leave it at
        once with no result line: back to Running, or (when the new request names them too) kept to start
        over in the new check. Returns the latter. Callers have already made the new check the active one."""
        old.superseded = True
        restart = set()
        for n in [n for n in c.nodes.values() if n.logical_id in old.pending]:  # seq order: reproducible
            if n.logical_id in old.holding:  # isolated_holds_operation: its check is over, it stays isolated
                old.holding.discard(n.logical_id)
                self._check_finished(c, old, n, "fail")
                continue
            if n.logical_id in targets:
                restart.add(n.logical_id)
            elif n.status == IN_CHECK:
                n.status = "Running"
            self._check_finished(c, old, n, "superseded")
        return restart

    # ---- one node's way through an on-demand check ---------------------------------------------------

    def _enqueue_check(self, c: Cluster, check: HealthCheck, n: Node, checks: set[str], restart: bool = False) -> None:
        lid = n.logical_id
        if lid in check.pending or lid in check.results:
            return  # merged request: the node is already part of the active check
        if n.status != "Running" and not restart:  # INFERRED: nodes busy at request time are skipped
            check.results[lid] = "skip"
            return
        check.pending.add(lid)
        if restart:  # superseded mid-check: it keeps its status and starts over
            check.held.add(lid)
        start = self._draw(self.readings.check_start_delay_s)
        # truth "skip": a job that outlasts the wait (the historical way to say "busy")
        job_end = float("inf") if n.truth == "skip" else n.busy_until
        if job_end > self._t:
            self._queue(c, check, n, checks, start, job_end)
        else:
            self._at(c, start, lambda: self._check_begins(c, check, n, checks))

    def _queue(self, c: Cluster, check: HealthCheck, n: Node, checks: set[str], start: float, job_end: float) -> None:
        """[DOC] The check waits up to 10 min for the node's job, then skips the node (no result line)."""
        check.queued.add(n.logical_id)
        if self.readings.queued_status == IN_CHECK:  # already in the maintenance reservation
            n.status = IN_CHECK
            check.held.add(n.logical_id)
        if job_end - self._t <= JOB_WAIT_S:
            self._at(c, max(start, job_end - self._t), lambda: self._dequeue(c, check, n, checks))
        else:
            self._at(c, JOB_WAIT_S, lambda: self._skip_queued(c, check, n))

    def _dequeue(self, c: Cluster, check: HealthCheck, n: Node, checks: set[str]) -> None:
        if n.logical_id in check.queued:  # else it left the check while waiting
            check.queued.discard(n.logical_id)
            self._check_begins(c, check, n, checks)

    def _skip_queued(self, c: Cluster, check: HealthCheck, n: Node) -> None:
        if n.logical_id not in check.queued:
            return
        if n.logical_id in check.held and n.status == IN_CHECK:
            n.status = "Running"
        self._check_finished(c, check, n, "skip")

    def _check_begins(self, c: Cluster, check: HealthCheck, n: Node, checks: set[str]) -> None:
        if n.logical_id not in check.pending:
            return  # it left the check before it began (superseded, replaced)
        held = n.logical_id in check.held and n.status == IN_CHECK  # the check itself shows it in progress
        check.held.discard(n.logical_id)
        if n.status != "Running" and not held:  # e.g. rebooted between request and start
            self._check_finished(c, check, n, "skip")
            return
        n.status, n.check_began = IN_CHECK, self._t
        check.began.add(n.logical_id)
        for s in check.peers_of.get(n.logical_id, ()):
            s.began += 1
        self._at(c, self._duration(checks), lambda: self._check_ends(c, check, n, checks))

    def _check_ends(self, c: Cluster, check: HealthCheck, n: Node, checks: Collection[str] | None = None) -> None:
        lid = n.logical_id
        if lid not in check.pending or lid in check.holding:
            return  # the node left the check early (replaced mid-check, superseded)
        passed = n.truth != "fail"  # a check that already started is not skipped any more
        peers = check.peers_of.get(lid)
        self._write_result(c, n, passed=passed, checks=checks, peers=peers[0] if peers else None)
        if self.readings.foreign_lines and not check.foreign_written:
            check.foreign_written = True
            self._write_foreign_lines(c, check, n)
        if passed:
            n.status = "Running"
        elif c.node_recovery == "Automatic":
            self._auto_recover(c, n)
        else:
            self._failed_status(c, n)
        self._leave_peer_sets(c, check, n, completed=True)
        if not passed and n.isolated and self.readings.isolated_holds_operation:
            check.holding.add(lid)  # still pending: the operation waits for a reboot or replacement
            return
        self._check_finished(c, check, n, "pass" if passed else "fail")

    def _auto_recover(self, c: Cluster, n: Node) -> None:
        """[DOC] HyperPod "reboots or replaces" a node that failed; which, and when, is a reading."""
        delay = self._draw(self.readings.auto_recovery.delay_s)
        if delay == 0:
            self._hyperpod_acts(c, n)
            return
        n.status = "Running"  # until HyperPod gets to it
        iid = n.instance_id
        self._at(c, delay, lambda: self._hyperpod_acts_later(c, n, iid))

    def _hyperpod_acts_later(self, c: Cluster, n: Node, iid: str) -> None:
        if n.instance_id != iid or n.in_flight:
            return  # someone acted on the node first
        if c.check is not None and n.logical_id in c.check.pending:
            self._check_finished(c, c.check, n, "replaced")  # a later check had already claimed it
        self._hyperpod_acts(c, n)

    def _hyperpod_acts(self, c: Cluster, n: Node) -> None:
        ar = self.readings.auto_recovery
        if ar.reboot_fraction > 0 and self._reading_rng.random() < ar.reboot_fraction:
            self._reboot(c, n, "hyperpod", duration=self._draw(ar.reboot_s))
        else:
            self._replace(c, n, "hyperpod")

    def _failed_status(self, c: Cluster, n: Node) -> None:
        """NodeRecovery None: HyperPod takes no action on a faulty node, but how it shows it is a reading."""
        shown = self.readings.failed_status
        if shown == "Running":
            n.status = "Running"
        elif shown == "Failure":  # [D-CPE] Failure: HyperPod retries with a new instance (if failure_retried)
            self._fail_then_retry(c, n, lambda: self._replace(c, n, "hyperpod"))
        else:  # "remains isolated" until someone reboots or replaces it (Failed, DeepHealthCheckFailed: off-enum)
            n.status, n.isolated = shown, True

    def _release_hold(self, c: Cluster, n: Node) -> None:
        """isolated_holds_operation: the held node is rebooted or replaced (by anyone): it leaves its check."""
        check = c.check  # a check that holds a node cannot end, so it is the active one
        if check is not None and n.logical_id in check.holding:
            check.holding.discard(n.logical_id)
            self._check_finished(c, check, n, "fail")

    def _check_finished(self, c: Cluster, check: HealthCheck, n: Node, outcome: str) -> None:
        check.results[n.logical_id] = outcome
        check.pending.discard(n.logical_id)
        check.queued.discard(n.logical_id)
        check.held.discard(n.logical_id)
        self._leave_peer_sets(c, check, n, completed=False)
        self._maybe_end_check(c, check)

    def _leave_peer_sets(self, c: Cluster, check: HealthCheck, n: Node, completed: bool) -> None:
        """``n`` is done with its connectivity test (``completed``: it ran to the end). Under ``nccl_summary`` the
        last member of a configuration to be done writes the configuration's anonymous summary line, stamped when
        the first member completed (NCCL tests a set together: one member out of the check means the set's test
        was over; per-node check durations are drawn apart here, so the line is only written once all are done)."""
        for s in check.peers_of.get(n.logical_id, ()):
            if n.logical_id not in s.open:
                continue
            s.open.discard(n.logical_id)
            s.completed += completed
            if completed and s.first_end is None:
                s.first_end = self._t
            if not s.open and s.completed and self.readings.nccl_summary:
                self._write_nccl_summary(c, s.stream, s.completed, s.first_end or self._t)

    def _maybe_end_check(self, c: Cluster, check: HealthCheck) -> None:
        if not check.pending and check.ended is None:
            check.ended = self._t
            if c.check is check:
                c.check = None

    def _duration(self, checks: set[str] | tuple[str, ...]) -> float:
        return sum(self.check_duration_s[t] for t in set(checks))

    # ---- result log --------------------------------------------------------------------------------------

    def _write_result(
        self,
        c: Cluster,
        n: Node,
        passed: bool,
        checks: Collection[str] | None = None,
        peers: PeerSet | None = None,
    ) -> None:
        """The node's result lines for ``checks`` (default: InstanceStress), stamped now (or when each test ran,
        ``line_stamps: test-time``) on the node's own clock (``node_clock_skew_s``); each readable now, or
        ``log_lag_s`` later (a failure line ``failure_line_lag_s`` later, where set). Under ``result_lines:
        per-test`` (json) or the ``doc-*`` formats the tests that passed write their own lines first, and a failure
        line is the last line (so the pass lines of a faulty node may be read before its failure). ``peers``: the
        node's InstanceConnectivity configuration."""
        stream = self._result_stream(n)  # drawn (opaque) even when no line follows, so later draws do not move
        checks = ("InstanceStress",) if checks is None else checks
        skew = self._draw(self.readings.node_clock_skew_s)
        self._put_entries(c, stream, self._result_entries(c, n, passed, checks, peers), skew)

    def _put_lines(self, c: Cluster, stream: str, stamp: float, lines: list[str]) -> None:
        self._put_entries(c, stream, [Entry(line, stamp) for line in lines])

    def _put_entries(self, c: Cluster, stream: str, entries: list[Entry], skew: float = 0.0) -> None:
        """Each record readable `log_lag_s` after now, its lines together and in the order written (one shipper:
        first in, first out); a failure `failure_line_lag_s` after now, where set, alone (the reading: only the
        failure lines are slow)."""
        group = f"/aws/sagemaker/Clusters/{c.name}/{c.cluster_id}"
        lag, record, shipped = 0.0, object(), self._t
        for entry in entries:
            alone = entry.failure and self.readings.failure_line_lag_s is not None
            if entry.record is None or entry.record != record:
                lag = self._draw(self.readings.failure_line_lag_s if alone else self.readings.log_lag_s)  # type: ignore[arg-type]
                record = entry.record
            ready = self._t + lag if alone else max(self._t + lag, shipped)
            shipped = shipped if alone else ready
            append = functools.partial(self._append_log, group, stream, entry.at + skew, entry.message)
            if ready <= self._t:
                append()
            else:
                self._at(c, ready - self._t, append)

    def _result_stream(self, n: Node) -> str:
        naming = self.readings.result_stream
        if naming == "opaque":  # one new stream per node and check
            return f"DeepHealthCheckResults/{self._reading_uuid()}"
        if naming == "hostname":
            return f"DeepHealthCheckResults/{self._agent_hostname(n)}"
        if naming == "logical-id":
            return f"DeepHealthCheckResults/{n.logical_id}"
        return f"DeepHealthCheckResults/{n.instance_id}"

    def _result_entries(
        self, c: Cluster, n: Node, passed: bool, checks: Collection[str], peers: PeerSet | None
    ) -> list[Entry]:
        r = self.readings
        if r.result_format in VERBATIM_FORMATS:
            return self._verbatim_entries(n, passed, checks)
        nccl = "InstanceConnectivity" in checks
        peer_texts = self._peer_texts(c, n, peers) if nccl and r.peer_lines else []
        extra = [Entry(line, self._t) for line in r.extra_lines]
        if r.result_format == "doc-plain":
            texts = self._plain_texts(n, passed, checks, peers, peer_texts)
            return (
                [Entry(self._plain_line(n, text), self._t, failed) for text, failed in texts]
                + extra
                + self._fault(n, passed)
            )
        if r.pass_line == "none":
            lines: list[str] = []
        else:
            tests = PASSING_TESTS if r.result_lines == "per-test" else ()
            lines = [self._result_line(n, True, test) for test in tests]
            lines += [self._json_line(n, "info", text) for text in peer_texts]
            if passed:
                # nccl_summary: the node's line no longer vouches for connectivity
                lines.append(self._result_line(n, True, "InstanceStress" if nccl and r.nccl_summary else None))
        return [Entry(line, self._t) for line in lines] + extra + self._fault(n, passed)

    def _fault(self, n: Node, passed: bool, layout: str = "one") -> list[Entry]:
        """A failing node's failure line (`failure_line`), as one event, or one per physical line."""
        if passed or self.readings.failure_line == "none":
            return []
        if layout == "one":
            return [Entry(self._result_line(n, False, level=self.readings.failure_line), self._t, True)]
        doc = aws_doc.FAILURE_2024 if self.readings.result_format == "doc-2024" else aws_doc.FAILURE_2026
        message = FAULT_MSG.format(region=self.region, itype=n.instance_type)
        lines = [
            f'    "level": "{self.readings.failure_line}",' if '"level"' in line
            else f'    "ts": "{_iso(self._t)}",' if '"ts"' in line
            else f'    "msg": "{message}"' if '"msg"' in line
            else line
            for line in doc
        ]  # fmt: skip
        if layout == "records":
            return [Entry("\n".join(lines), self._t, True)]
        return [Entry(line, self._t, True, -1) for line in lines]

    def _plain_texts(
        self, n: Node, passed: bool, checks: Collection[str], peers: PeerSet | None, peer_texts: list[str]
    ) -> list[tuple[str, bool]]:
        """doc-plain: the texts of the node's plain lines, each with whether it says a failure (its failure line, if
        any, is a JSON line after them)."""
        gpu = not passed and self.readings.faulty_test == "dcgm"
        dcgm = DCGM_SUMMARY.format(
            replace=str(gpu and n.cured_by == "replace").lower(), reboot=str(gpu and n.cured_by == "reboot").lower()
        )
        devices = self._efa_devices(n)
        efa = [(EFA_LINE.format(device=d), False) for d in devices]
        if not passed and not gpu and efa:
            efa[-1] = (EFA_FAILED.format(device=devices[-1]), True)
        if self.readings.pass_line == "none":  # only the failure evidence
            return ([(dcgm, True)] if gpu else efa[-1:]) if not passed and "InstanceStress" in checks else []
        texts: list[tuple[str, bool]] = []
        if "InstanceStress" in checks:
            texts += [*((t, False) for t in STRESS_LINES), (dcgm, gpu), *efa]
        if "InstanceConnectivity" in checks and not self.readings.nccl_summary:
            texts.append((NCCL_SUMMARY.format(nodes=peers.began if peers else 1), False))
        texts += [(t, False) for t in peer_texts]
        if "MultiNodeTrainingValidation" in checks:
            texts.append((MNTV_LINE, False))
        return texts

    def _efa_devices(self, n: Node) -> list[str]:
        """The node's EFA device names: as many as its type has (the controller's table, or `efa_devices`)."""
        override = self.readings.efa_devices.get(n.instance_type)
        count = efa_devices(n.instance_type, override)
        return [aws_doc.DEVICE, *(f"rdmap0s{30 + i}" for i in range(count - 1))][:count]

    def _verbatim_entries(self, n: Node, passed: bool, checks: Collection[str]) -> list[Entry]:
        """doc-2024, doc-2026-lines, doc-2026-records: the page's lines verbatim (their times the node's), one event
        per physical line or one per record; a faulty node's DCGM flags say so, or its last EFA device failed."""
        r = self.readings
        doc24 = r.result_format == "doc-2024"
        per_record = r.result_format == "doc-2026-records"
        hardware, dcgm, efa = (
            (aws_doc.HARDWARE_2024, aws_doc.DCGM_2024, aws_doc.EFA_2024)
            if doc24 else (aws_doc.HARDWARE_2026, aws_doc.DCGM_2026, aws_doc.EFA_2026)
        )  # fmt: skip
        end = self._t
        began = n.check_began if n.check_began is not None and n.check_began < end else end - 3600
        early = r.line_stamps == "test-time"
        gpu = not passed and r.faulty_test == "dcgm"
        devices = self._efa_devices(n)
        groups: list[tuple[list[str], float, bool]] = []  # (lines of one record, stamp, says a failure)
        if "InstanceStress" in checks:
            groups += [(lines, began + 60 if early else end, False) for lines in aws_doc.records(hardware)]
            flags = [_flags(line, gpu and n.cured_by == "replace", gpu and n.cured_by == "reboot") for line in dcgm]
            groups += [(lines, end - 300 if early else end, gpu) for lines in aws_doc.records(tuple(flags))]
            for i, device in enumerate(devices):
                failed = not passed and not gpu and i == len(devices) - 1
                lines = [_device(line, device, failed) for line in efa]
                lines = lines[:1] if failed else lines  # a failed device prints no figures
                at = end - 120 + (110 * i / max(1, len(devices) - 1)) if early else end
                groups += [(record, at, failed) for record in aws_doc.records(tuple(lines))]
        if "InstanceConnectivity" in checks and not r.nccl_summary:
            groups += [(lines, end, False) for lines in aws_doc.records(aws_doc.NCCL_2024)]
        if "MultiNodeTrainingValidation" in checks:
            groups.append(([f"{_iso(end)}  info  {MNTV_LINE}"], end, False))
        if r.pass_line == "none":
            groups = [g for g in groups if g[2]]
        entries = []
        for index, (lines, at, failed) in enumerate(groups):
            stamped = [_stamped(line, at) for line in lines]
            if per_record:
                entries.append(Entry("\n".join(stamped), at, failed))
            else:
                entries += [Entry(line, at, failed, index) for line in stamped]
        entries += [Entry(line, end) for line in r.extra_lines]
        return entries + self._fault(n, passed, "records" if per_record else "lines")

    def _write_foreign_lines(self, c: Cluster, check: HealthCheck, n: Node) -> None:
        """foreign_lines: a stream no node owns gets an anonymous error line and a summary naming ``n`` in a field
        (a forgery, or a tool writing for the cluster: either way no node's evidence)."""
        stream = self._summary_stream(f"{c.arn}/{check.operation_id}/foreign")
        error = FAULT_MSG.format(region=self.region, itype=n.instance_type)
        forged = json.dumps({"level": "info", "ts": _iso(self._t), "msg": "Deep health check passed",
                             "instance_id": n.instance_id})  # fmt: skip
        group = f"/aws/sagemaker/Clusters/{c.name}/{c.cluster_id}"
        for line in (json.dumps({"level": "error", "ts": _iso(self._t), "msg": error}), forged):
            self._append_log(group, stream, self._t, line)

    def _peer_texts(self, c: Cluster, n: Node, peers: PeerSet | None) -> list[str]:
        """peer_lines: one line per other node of the configuration (skipped or faulty ones too), naming it."""
        if peers is None:
            return []
        return [
            PEER_LINE.format(instance_id=p.instance_id, hostname=self._agent_hostname(p))
            for p in (c.nodes[lid] for lid in peers.members if lid != n.logical_id and lid in c.nodes)
        ]

    def _result_line(self, n: Node, passed: bool, test: str | None = None, level: str = "error") -> str:
        """A JSON line: the verdict (``test`` None), a pass line of one test, or the failure line at ``level``."""
        if passed:
            return self._json_line(n, "info", f"{test} passed" if test else "Deep health check passed")
        return self._json_line(n, level, FAULT_MSG.format(region=self.region, itype=n.instance_type), failure=True)

    def _json_line(self, n: Node, level: str, msg: str, failure: bool = False) -> str:
        naming = self.readings.result_line_instance
        if naming == "message":
            msg += f" Instance: {n.instance_id}" if failure else f" on instance {n.instance_id}"
        line = {"level": level, "ts": _iso(self._t), "msg": msg + self._host_suffix(n)}
        if naming == "field":
            line["instance_id"] = n.instance_id
        return json.dumps(line)

    def _plain_line(self, n: Node, text: str) -> str:
        """doc-plain: ``<ts>  info  <text>``; a plain line has no field, so `field` names the instance as text."""
        if self.readings.result_line_instance != "none":
            text += f" instance: {n.instance_id}"
        return f"{_iso(self._t)}  info  {text}{self._host_suffix(n)}"

    def _write_nccl_summary(self, c: Cluster, stream: str, nodes: int, stamp: float) -> None:
        """nccl_summary: one anonymous line (no instance, no host) into the configuration's opaque stream."""
        text = NCCL_SUMMARY.format(nodes=nodes)
        if self.readings.result_format == "doc-plain":
            line = f"{_iso(stamp)}  info  {text}"
        else:
            line = json.dumps({"level": "info", "ts": _iso(stamp), "msg": text})
        self._put_lines(c, stream, stamp, [line])

    def _summary_stream(self, key: str) -> str:
        """nccl_summary: an opaque stream shaped like `result_stream: opaque` ones (a version-4 UUID), derived
        from ``key`` rather than drawn, so that no reading's draws move."""
        name = uuid.UUID(bytes=hashlib.sha256(key.encode()).digest()[:16], version=4)
        return f"DeepHealthCheckResults/{name}"

    def _agent_hostname(self, n: Node) -> str:
        """The short hostname the node's agent names it by: the listed one, or (foreign_hostnames) one on an
        unlisted 192.168 network, derived from the instance id (stable per instance, no draw)."""
        if self.readings.foreign_hostnames:
            digest = hashlib.sha256(n.instance_id.encode()).digest()
            return f"ip-192-168-{digest[0]}-{1 + digest[1] % 254}"
        return self._hostname(n.private_ip).split(".")[0]

    def _host_suffix(self, n: Node) -> str:
        return f" host: {self._agent_hostname(n)}" if self.readings.foreign_hostnames else ""

    def _append_log(self, group: str, stream: str, stamp: float, line: str) -> None:
        """Append to moto's CloudWatch Logs through its backend objects, not PutLogEvents: moto (like AWS)
        silently rejects events older than 14 days or more than 2 h ahead of *wall* time, and virtual time is
        neither. The event's ingestion time is the virtual time of the append (moto stamps wall time), so
        ``ingestionTime - timestamp`` is the lag."""
        from moto.logs.models import logs_backends

        backend = logs_backends[self.account][self.region]
        if group not in backend.groups:
            backend.create_log_group(group, tags={})
        log_group = backend.groups[group]
        if stream not in log_group.streams:
            log_group.create_log_stream(stream)
        log_stream = log_group.streams[stream]
        log_stream.put_log_events([{"timestamp": _ms(stamp), "message": line}])
        log_stream.events[-1].ingestion_time = _ms(self._t)

    # ---- cluster operations ------------------------------------------------------------------------------

    def _op_list_cluster_operations(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        ops = c.checks if p.get("Type", "DeepHealthCheck") == "DeepHealthCheck" else []  # no Scaling ones
        if "Status" in p:
            ops = [k for k in ops if k.status == p["Status"]]
        if "CreationTimeAfter" in p:
            ops = [k for k in ops if k.requested > p["CreationTimeAfter"]]
        if "CreationTimeBefore" in p:
            ops = [k for k in ops if k.requested < p["CreationTimeBefore"]]
        # [MODEL] Descending is the default order
        descending = p.get("SortOrder", "Descending") == "Descending"
        page, token = _paginate(ops, lambda k: [k.requested, k.seq], p, descending=descending)
        return {"ClusterOperationSummaries": [self._operation(c, k) for k in page], **token}

    def _op_describe_cluster_operation(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        k = next((k for k in c.checks if k.operation_id == p.get("OperationId")), None)
        if k is None:
            raise ApiError("ResourceNotFound", f"Operation {p.get('OperationId')} not found in cluster {c.name}.")
        return {**self._operation(c, k), "DeepHealthCheckDetails": copy.deepcopy(k.configurations)}

    def _operation(self, c: Cluster, k: HealthCheck) -> dict[str, Any]:
        return {
            "OperationId": k.operation_id,
            "ClusterArn": c.arn,
            "Type": "DeepHealthCheck",
            "Status": k.status,
            "CreationTime": k.requested,
        }
