"""What a notification says, in words: its first line per kind (`summary`: what happened, to which node, where), a
node notification's subject, the evidence and reasons under it (`body`) and the ``hpdhc`` commands that show more
(`commands`). How those words are laid out per protocol, within SNS's and AWS Chatbot's limits:
`domain.messages`. Nothing here raises on a detail of an unexpected shape: a kind it cannot summarise gets a
generic first line."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "hyperpod-dhc: "
SUBJECT_MAX = 100  # SNS's subject
DESCRIPTION_MAX = 8000  # AWS Chatbot's description: the longest a first line can be
SHOWN_ITEMS = 10  # nodes (or evidence lines) listed in the text; the JSON has them all
NODE_KINDS = frozenset({"node-failed", "node-recovered", "node-quarantined", "node-inconclusive"})


@dataclass(frozen=True)
class Line:
    """A line of the body: verbatim evidence (quoted) or the controller's own words."""

    text: str
    quoted: bool = False


def clip(text: object, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def duration(seconds: Any) -> str:
    s = int(float(seconds))
    if s < 120:
        return f"{s} s"
    hours, minutes = divmod(s // 60, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _count(items: object, noun: str = "node(s)") -> str:
    return f"{len(items) if isinstance(items, list | tuple | dict) else items} {noun}"


def _listed(items: object) -> str:
    names = [str(i) for i in items] if isinstance(items, list | tuple) else []
    more = f" (+{len(names) - SHOWN_ITEMS} more)" if len(names) > SHOWN_ITEMS else ""
    return ", ".join(names[:SHOWN_ITEMS]) + more


def node_label(d: Mapping[str, Any]) -> str:
    """``ip-10-1-2-3 (i-0abc…)``: the host name (or node key) and the instance id."""
    node, iid, host = d.get("node"), d.get("instance_id"), d.get("hostname")
    name = host or node or iid or "a node"
    return f"{name} ({iid})" if iid and iid != name else str(name)


def node_subject(what: str, cluster: str, d: Mapping[str, Any]) -> str:
    """A node notification's subject: ``hyperpod-dhc: ip-10-1-2-3 (i-0abc…) on ml-cluster failed …``, within SNS's
    100 characters. The prefix, ``what`` and the instance id stay whole (the id is what the console and the CLI
    find); a long cluster or host name is cut, the longer one first, each keeping at least half the room left."""
    iid, name = d.get("instance_id"), d.get("hostname") or d.get("node") or d.get("instance_id") or "a node"
    ids = f" ({iid})" if iid and iid != name else ""
    room = SUBJECT_MAX - len(f"{PREFIX}{ids} on  {what}")
    name, cluster = str(name), str(cluster)
    if len(name) + len(cluster) > room:
        name = clip(name, max(room // 2, room - len(cluster)))
        cluster = clip(cluster, max(room - len(name), 1))
    return clip(f"{PREFIX}{name}{ids} on {cluster} {what}", SUBJECT_MAX)


def _checks(d: Mapping[str, Any]) -> str:
    checks = d.get("checks")
    named = "+".join(str(c) for c in checks) if isinstance(checks, list | tuple) and checks else "deep health check"
    return f"{named} ({d['failed_test']})" if d.get("failed_test") else named


def _reversed(d: Mapping[str, Any]) -> str:
    return " (its pass is reversed)" if d.get("from_state") == "passed" else ""


# -- the first line, per kind: (detail, cluster, where) -> line; None (or an error) means the generic line --------
def _failed(d: Mapping[str, Any], _c: str, where: str) -> str:
    if d.get("verdict") == "replaced-by-hyperpod":
        return f"REPLACED BY HYPERPOD in its {_checks(d)}: {node_label(d)} in {where}"
    return f"FAILED {_checks(d)}: {node_label(d)} in {where}{_reversed(d)}"


def _recovered(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"RECOVERED: {node_label(d)} in {where} passed its {_checks(d)} after {d['attempts']} recovery action(s)"


def _quarantined(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"QUARANTINED: {node_label(d)} in {where}, no more automated actions"


def _inconclusive(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"INCONCLUSIVE {_checks(d)}: {node_label(d)} in {where} needs an operator{_reversed(d)}"


def _round(d: Mapping[str, Any], _c: str, where: str) -> str:
    states = ", ".join(f"{n} {state}" for state, n in sorted(d["states"].items()))
    failed = "; a step of the round failed" if d.get("failed_step") else ""
    return f"ROUND FINISHED in {where} ({d['round_id']}): {states}{failed}"


def _dry_run(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"DRY-RUN in {where}: would check {_count(d['nodes'])} ({d.get('checks') or 'deep health check'})"


def _held(d: Mapping[str, Any], _c: str, where: str) -> str:
    who = f": {node_label(d)}" if d.get("node") else ""
    return f"RECOVERY HELD{who} in {where}: {d['reason']}"


def _capacity(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"REPLACEMENTS STOPPED in {where}: {d['reason']}"


def _tripped(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"BREAKER OPEN on {where}: {d['reason']}"


def _reset(d: Mapping[str, Any], _c: str, where: str) -> str:
    what = "BREAKER RESET" if d.get("scope") == "breaker" else "BAD-CAPACITY HOLD LIFTED"
    return f"{what} on {where} by {d['by']}: {_count(d.get('released') or [], 'held node(s)')} released"


def _reading(d: Mapping[str, Any], cluster: str, _w: str) -> str | None:
    if "foreign_stream" in d:
        return f"FOREIGN RESULT STREAM on {cluster}: {d['foreign_stream']} is no node's (never evidence)"
    if "inconclusive" in d and "shape" in d:
        share = f"{d['inconclusive']} of {d['verdicts']} verdicts"
        return f"ONE UNRECOGNISED SHAPE on {cluster} made {share} inconclusive: {d['shape']}"
    if "shape" in d:
        return f"NEW RESULT-LINE SHAPE on {cluster}: {d['shape']} (never a pass until a pattern knows it)"
    if "silent_nodes" in d:
        silent = _count(d["silent_nodes"])
        return f"NO PASS LINES on {cluster}: {silent} came back from their check with no result line"
    return None


def _overdue(d: Mapping[str, Any], cluster: str, _w: str) -> str:
    took = duration(d["in_progress_s"])
    return f"CHECK OVERDUE on {cluster}: operation {d.get('operation_id') or '?'} in progress for {took}"


def _waiting(d: Mapping[str, Any], _c: str, where: str) -> str:
    return f"WAITING FOR A CHECK in {where}: {d['node']} ready for {duration(d['waited_s'])}, not checked yet"


def _deferral(d: Mapping[str, Any], _c: str, where: str) -> str:
    bound = duration(d["job_defer_max_s"])
    return f"CHECKED DESPITE JOBS in {where}: {_count(d['nodes'])} busy with jobs for over {bound}"


def _take_over(d: Mapping[str, Any], cluster: str, _w: str) -> str:
    return f"SLURM BRIDGE TAKEN OVER on {cluster}: {d['new_holder']} replaces {d['old_holder']} ({d['why']})"


def _not_slurm(d: Mapping[str, Any], cluster: str, _w: str) -> str:
    by = ", ".join(d["orchestrators"]) or "?"
    return f"NOT A SLURM CLUSTER: {cluster} (orchestrated by {by}) is ignored; no check or action on it"


SUMMARIES: dict[str, Callable[[Mapping[str, Any], str, str], str | None]] = {
    "node-failed": _failed,
    "node-recovered": _recovered,
    "node-quarantined": _quarantined,
    "node-inconclusive": _inconclusive,
    "round-finished": _round,
    "dry-run": _dry_run,
    "recovery-held": _held,
    "capacity-hold": _capacity,
    "breaker-tripped": _tripped,
    "breaker-reset": _reset,
    "reading-observed": _reading,
    "check-overdue": _overdue,
    "job-deferral": _deferral,
    "check-waiting": _waiting,
    "bridge-take-over": _take_over,
    "cluster-not-slurm": _not_slurm,
}
# What a detail of an unexpected shape may raise while it is summarised (never out of `render`).
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


def summary(kind: str, cluster: str, group: str, subject: str, detail: Mapping[str, Any]) -> str:
    """The first line: what happened, to which node, where."""
    where = f"{cluster}/{group}" if group else cluster
    try:
        line = SUMMARIES[kind](detail, cluster, where) if kind in SUMMARIES else None
    except _SHAPE_ERRORS:
        line = None
    if line is None:
        said = subject.removeprefix(PREFIX)
        line = f"{kind} in {where}" + (f": {said}" if said else "")
    return clip(line, DESCRIPTION_MAX)


def body(kind: str, detail: Mapping[str, Any]) -> list[Line]:
    """The evidence and the controller's reasons, after the first line."""
    try:
        return _body(kind, detail)
    except _SHAPE_ERRORS:
        return []


def _body(kind: str, d: Mapping[str, Any]) -> list[Line]:
    lines: list[Line] = []
    evidence = d.get("evidence")
    if isinstance(evidence, list | tuple):
        lines += [Line(clip(e, 1000), quoted=True) for e in evidence[:SHOWN_ITEMS]]
    if kind in NODE_KINDS and d.get("reason"):
        lines.append(Line(f"Decision: {clip(d['reason'], 1000)}"))
    if kind == "reading-observed" and d.get("example"):
        lines.append(Line(clip(d["example"], 1000), quoted=True))
    if kind == "breaker-reset" and d.get("reason"):
        lines.append(Line(clip(d["reason"], 1000), quoted=True))
    if kind in ("dry-run", "job-deferral") and d.get("nodes"):
        lines.append(Line(clip(f"Nodes: {_listed(d['nodes'])}", 2000)))
    if kind == "breaker-reset" and d.get("released"):
        lines.append(Line(clip(f"Released: {_listed(d['released'])}", 2000)))
    if d.get("note"):
        lines.append(Line(clip(d["note"], 1000)))
    return lines


def commands(kind: str, cluster: str, group: str, detail: Mapping[str, Any]) -> list[str]:
    """The ``hpdhc`` command lines that show more (shell-quoted)."""
    c, g = shlex.quote(cluster), shlex.quote(group)
    node = detail.get("node")
    history = [f"hpdhc history {c} {shlex.quote(str(node))}"] if isinstance(node, str) and node else []
    if kind in NODE_KINDS:
        return history
    if kind in ("recovery-held", "capacity-hold", "breaker-tripped", "breaker-reset"):
        return [*history, f"hpdhc breakers {c}"]
    if kind == "round-finished" and group:
        return [f"hpdhc status --cluster {c} --group {g}"]
    if kind == "dry-run" and group:
        return [f"hpdhc nodes {c} --group {g} --state shadowed"]
    if kind == "job-deferral" and group:
        return [f"hpdhc nodes {c} --group {g}"]
    if kind == "reading-observed":
        given = detail.get("commands")
        if isinstance(given, list) and all(isinstance(cmd, str) for cmd in given) and given:
            return [clip(cmd, 300) for cmd in given[:4]]
        return [f"hpdhc readings {c}"]
    if kind == "check-waiting":
        return [*history, f"hpdhc status --cluster {c}", f"hpdhc breakers {c}"]
    if kind == "check-overdue":
        return [f"hpdhc status --cluster {c}", f"hpdhc readings {c}"]
    if kind == "bridge-take-over":
        return [f"hpdhc nodes {c}"]
    if kind == "cluster-not-slurm":
        return [f"aws sagemaker describe-cluster --cluster-name {c} --query Orchestrator"]
    return history or [f"hpdhc status --cluster {c}"]
