"""The captured-check corpus (`tests/corpus/checks/*.json`): nodes' checks as `hpdhc readings capture` writes them,
built from AWS's documented lines verbatim (`aws_doc.py`) in both renderings and both layouts (one CloudWatch event
per physical line, one per record), healthy and faulty, and in the variants agents and shippers produce (colour
codes, byte-order marks, CR line ends, other encoders' columns, the tools' raw output and debug lines). Each file
says what it is (`source`, `comment`) and the verdict it must get (`expect`).

    python -m tests.corpus.captures            write the files (tests/corpus/test_captures.py fails when they drift)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.corpus import aws_doc

CHECKS_DIR = Path(__file__).parent / "checks"
T0 = 1_790_000_000_000  # ms: the check started
LEFT = T0 + 5_700_000  # ms: the node left its check
INSTANCE, HOSTNAME, LOGICAL = "i-0bbbbbbbbbbbbbbbb", "ip-10-1-0-2", "6f1c0c6e-3c1a-4b7e-9a35-2f0e4d8b9c11"
STREAM = f"DeepHealthCheckResults/{INSTANCE}"
FOREIGN = "DeepHealthCheckResults/3f2a9c4e-8d1b-4c55-9f0a-7e6d5c4b3a21"
FAULT_2026 = aws_doc.FAILURE_2026
Lines = tuple[str, ...]
Json = dict[str, Any]


def stress(rendering: str) -> list[Lines]:
    """The InstanceStress tests' lines of one rendering, a tuple per test."""
    if rendering == "2024":
        return [aws_doc.HARDWARE_2024, aws_doc.DCGM_2024, aws_doc.EFA_2024]
    return [aws_doc.HARDWARE_2026, aws_doc.DCGM_2026, aws_doc.EFA_2026]


def events(
    blocks: Iterable[Lines], layout: str, stream: str = STREAM, start: int = T0 + 60_000
) -> list[dict[str, Any]]:
    """CloudWatch events of these lines: one per physical line (`lines`), or one per record (`records`), a second
    apart, each ingested 2 s after its timestamp."""
    out: list[Json] = []
    for block in blocks:
        units = [[line] for line in block] if layout == "lines" else aws_doc.records(block)
        for unit in units:
            at = start + 1000 * len(out)
            out.append(
                {"logStreamName": stream, "timestamp": at, "ingestionTime": at + 2000, "message": "\n".join(unit)}
            )
    return out


def capture(
    evts: list[dict[str, Any]],
    expect: tuple[str, str | None],
    source: str,
    comment: str,
    checks: tuple[str, ...] = ("InstanceStress",),
    instance_type: str = "ml.g5.8xlarge",
    **extra: Any,
) -> dict[str, Any]:
    verdict, hint = expect
    return {
        "source": source,
        "comment": comment,
        "expect": {"verdict": verdict, "hint": hint},
        "events": evts,
        "node": {"instance_id": INSTANCE, "hostname": HOSTNAME, "instance_type": instance_type, "logical_id": LOGICAL},
        "checks": list(checks),
        "check_started_at": T0,
        "check_left_at": LEFT,
        "nccl_set_size": 2 if "InstanceConnectivity" in checks else None,
        **extra,
    }


def flags(block: Lines, replace: bool, reboot: bool) -> Lines:
    """A DCGM record with its flags set (the pages show only a healthy one)."""

    def one(line: str) -> str:
        line = line.replace("replacementRequired: false", f"replacementRequired: {str(replace).lower()}")
        line = line.replace("rebootRequired:false", f"rebootRequired:{str(reboot).lower()}")
        return line.replace("rebootRequired: false", f"rebootRequired: {str(reboot).lower()}")

    return tuple(one(line) for line in block)


def efa_devices(block: Lines, count: int, failed_last: bool = False) -> Lines:
    """The EFA example once per device (the device's name in it); the last one failed, if asked (undocumented
    wording: `check failed for device`, no figures)."""
    out: list[str] = []
    for i in range(count):
        device = aws_doc.DEVICE if i == 0 else f"rdmap0s{29 + i}"
        lines = [line.replace(aws_doc.DEVICE, device) for line in block]
        if failed_last and i == count - 1:
            lines = [lines[0].replace("check passed for device", "check failed for device").split(" . ")[0]]
        out += lines
    return tuple(out)


def variant(block: Lines, change: Callable[[str], str]) -> Lines:
    return tuple(change(line) for line in block)


def cases() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    sources = {"2024": aws_doc.SOURCE_2024, "2026": aws_doc.SOURCE_2026}
    for rendering, source in sources.items():
        hardware, dcgm, efa = stress(rendering)
        for layout in ("lines", "records"):
            name = f"d{rendering[2:]}-{layout}"
            per = "one event per physical line" if layout == "lines" else "one event per record"
            out[f"{name}-healthy"] = capture(
                events([hardware, dcgm, efa], layout), ("passed", None), source,
                f"The page's InstanceStress example verbatim, {per}.",
            )  # fmt: skip
            out[f"{name}-dcgm-replace"] = capture(
                events([hardware, flags(dcgm, True, False), efa], layout), ("failed", "replace"), source,
                f"The DCGM record with replacementRequired: true, {per}: its hint is a replacement.",
            )  # fmt: skip
            out[f"{name}-dcgm-reboot"] = capture(
                events([hardware, flags(dcgm, False, True), efa], layout), ("failed", "reboot"), source,
                f"The DCGM record with rebootRequired: true, {per}.",
            )  # fmt: skip
            failure = aws_doc.FAILURE_2024 if rendering == "2024" else aws_doc.FAILURE_2026
            out[f"{name}-failure-line"] = capture(
                events([hardware, dcgm, efa, failure], layout), ("failed", None), source,
                f"Every test's pass line and the page's JSON failure line on the node's own stream, {per}.",
            )  # fmt: skip
            out[f"{name}-p4d-four-devices"] = capture(
                events([hardware, dcgm, efa_devices(efa, 4)], layout), ("passed", None), source,
                f"A p4d.24xlarge has 4 EFA devices: the EFA example once per device, {per}.",
                instance_type="ml.p4d.24xlarge",
            )  # fmt: skip
            out[f"{name}-p4d-one-device-missing"] = capture(
                events([hardware, dcgm, efa_devices(efa, 3)], layout), ("inconclusive", None), source,
                f"A p4d.24xlarge with 3 of its 4 EFA devices' lines: not every device proven, {per}.",
                instance_type="ml.p4d.24xlarge",
            )  # fmt: skip
            out[f"{name}-p4d-efa-device-failed"] = capture(
                events([hardware, dcgm, efa_devices(efa, 4, failed_last=True)], layout), ("failed", None), source,
                f"A p4d.24xlarge whose last EFA device failed (undocumented wording), {per}.",
                instance_type="ml.p4d.24xlarge",
            )  # fmt: skip
            out[f"{name}-g5-2xlarge-no-efa"] = capture(
                events([hardware, dcgm], layout), ("passed", None), source,
                f"A g5.2xlarge has no EFA device: no EFA line is needed, {per}.", instance_type="ml.g5.2xlarge",
            )  # fmt: skip
    hardware, dcgm, efa = stress("2026")
    out["d26-dcgm-split-without-flags"] = capture(
        events([hardware, dcgm[:1], efa], "lines"), ("inconclusive", None), aws_doc.SOURCE_2026,
        "The DCGM record's first line only (the rest lost): DCGM is not proven.",
    )  # fmt: skip
    for layout in ("lines", "records"):
        nccl = events([*stress("2024"), aws_doc.NCCL_2024], layout)
        out[f"d24-{layout}-connectivity"] = capture(
            nccl, ("passed", None), aws_doc.SOURCE_2024,
            "InstanceStress and the page's NCCL example: the all_reduce_perf table, its footer lines after a console "
            "time column, and the summary, on the node's own stream.",
            checks=("InstanceStress", "InstanceConnectivity"),
        )  # fmt: skip
    wrong = variant(aws_doc.NCCL_2024, lambda line: line.replace("1.19      0  1806895", "1.19      3  1806895"))
    out["d24-nccl-wrong"] = capture(
        events([*stress("2024"), wrong], "lines"), ("failed", None), aws_doc.SOURCE_2024,
        "The NCCL table with #wrong 3 in its last row: figures that say something went wrong are a failure.",
        checks=("InstanceStress", "InstanceConnectivity"),
    )  # fmt: skip
    oob = variant(aws_doc.NCCL_2024, lambda line: line.replace("NcclOutOfBoundError: OK", "NcclOutOfBoundError: FAIL"))
    out["d24-nccl-out-of-bounds"] = capture(
        events([*stress("2024"), oob], "lines"), ("failed", None), aws_doc.SOURCE_2024,
        "The NCCL summary with NcclOutOfBoundError other than OK.",
        checks=("InstanceStress", "InstanceConnectivity"),
    )  # fmt: skip
    hardware, dcgm, efa = stress("2026")
    xid = (*dcgm[:2], dcgm[2] + " GPU 3: XID 79 fell off the bus")
    out["d26-dcgm-xid-flags-false"] = capture(
        events([hardware, xid, efa], "lines"), ("failed", None), aws_doc.SOURCE_2026,
        "A DCGM summary naming an XID error with both flags false.",
    )  # fmt: skip
    out["d26-foreign-failure"] = capture(
        [*events([hardware, dcgm, efa], "lines"), *events([FAULT_2026], "records", stream=FOREIGN, start=T0 + 90_000)],
        ("inconclusive", None), aws_doc.SOURCE_2026,
        "Every test's pass line on the node's stream, and the page's failure line on a stream that is no node's: "
        "it keeps the node from passing on this check (one re-check).",
    )  # fmt: skip
    out["d26-foreign-failure-after-recheck"] = capture(
        [*events([hardware, dcgm, efa], "lines"), *events([FAULT_2026], "records", stream=FOREIGN, start=T0 + 90_000)],
        ("passed", None), aws_doc.SOURCE_2026,
        "The same after the one re-check an anonymous failure may cost: it no longer keeps the node from passing.",
        anonymous_rechecks=1,
    )  # fmt: skip
    out["d26-forged-summary-on-foreign-stream"] = capture(
        events([(json.dumps({"level": "info", "msg": "Deep health check passed", "instance_id": INSTANCE}),)],
               "lines", stream=FOREIGN),
        ("inconclusive", None), aws_doc.SOURCE_2026,
        "A summary naming the node in a field, on a stream that is no node's, and nothing on the node's own stream: "
        "a line proves nothing by what it says about whom.",
    )  # fmt: skip
    out.update(agent_variants())
    return out


def agent_variants() -> dict[str, dict[str, Any]]:
    """What agents and shippers do to the 2026 lines (one event per physical line): each still a pass."""
    hardware, dcgm, efa = stress("2026")
    blocks = [hardware, dcgm, efa]
    src = aws_doc.SOURCE_2026 + "; the agent's rendering: [GUESS], plausible shipper behaviour"

    def each(change: Callable[[str], str]) -> list[Lines]:
        return [variant(block, change) for block in blocks]

    def zap(line: str) -> str:  # zap's console encoder: tab-separated time, level, caller, message
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] == "info":
            return f"{parts[0]}\tINFO\tdhc/checks.go:142\t{parts[2]}"
        return line

    def logfmt(line: str) -> str:
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] == "info":
            return f'time="{parts[0]}" level=info msg="{parts[2]}"'
        return line

    def docker(line: str) -> str:  # a container runtime's JSON log driver
        return json.dumps({"log": line + "\n", "stream": "stdout", "time": "2026-03-29T18:04:20.123456789Z"})

    def syslog(line: str) -> str:
        return f"Mar 29 18:04:20 {HOSTNAME} sagemaker-dhc[2210]: {line}" if not line[:1].isspace() else line

    stress_ng = (
        "stress-ng: info:  [2210] setting to a 60 second run per stressor",
        "stress-ng: info:  [2210] dispatching hogs: 32 cpu, 2 vm, 1 hdd, 8 fork, 4 switch",
        "stress-ng: info:  [2210] successful run completed in 60.02s",
    )
    dcgmi = (
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        "| Deployment                | Pass                                           |",
        "| Memory                    | Pass                                           |",
        "| Targeted Stress           | Pass                                           |",
        "+---------------------------+------------------------------------------------+",
    )
    nccl_debug = (
        f"{HOSTNAME}:2210:2210 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.2<0>",
        f"{HOSTNAME}:2210:2210 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v6 symbol.",
        f"{HOSTNAME}:2210:2210 [0] NCCL INFO Failed to open libibverbs.so[.1]",
        f"{HOSTNAME}:2210:2210 [0] NCCL INFO NET/OFI Selected provider is efa",
    )
    debug = (
        "2026-03-29T18:05:01Z  debug  polling dcgmi for GPU 0..7",
        "2026-03-29T18:05:02Z  trace  efa: rdmap0s29 up",
    )
    cases = {
        "agent-ansi-colour": each(lambda line: line.replace("  info  ", "  \x1b[32minfo\x1b[0m  ")),
        "agent-byte-order-mark": [variant(hardware, lambda line: "\ufeff" + line), dcgm, efa],
        "agent-crlf": each(lambda line: line + "\r\n"),
        "agent-zap-console-columns": each(zap),
        "agent-logfmt": each(logfmt),
        "agent-docker-json": each(docker),
        "agent-syslog-prefix": each(syslog),
        "agent-raw-stress-ng-output": [stress_ng, *blocks],
        "agent-raw-dcgmi-table": [hardware, dcgmi, dcgm, efa],
        "agent-nccl-debug-lines": [*blocks, nccl_debug],
        "agent-debug-lines": [*blocks, debug],
    }
    out = {
        name: capture(events(lines, "lines"), ("passed", None), src, f"The 2026 lines through {name[6:]}.")
        for name, lines in cases.items()
    }
    out["agent-ansi-error-without-failure-word"] = capture(
        events([*blocks, ("2026-03-29T18:40:00Z  \x1b[31mERROR\x1b[0m  GPU 4 row remap pending",)], "lines"),
        ("failed", None), src, "A colour-coded error level on a line with no failure word: the level says it.",
    )  # fmt: skip
    out["agent-unknown-outcome-line"] = capture(
        events([*blocks, ("2026-03-29T18:40:00Z  info  GPU burn-in 8/8 complete (gpu_burn 60 s)",)], "lines"),
        ("inconclusive", None), src, "An outcome no rule places: never a pass (an operator teaches it).",
    )  # fmt: skip
    return out


def write() -> list[Path]:
    CHECKS_DIR.mkdir(exist_ok=True)
    written = []
    for name, doc in sorted(cases().items()):
        path = CHECKS_DIR / f"{name}.json"
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    print(f"wrote {len(write())} captured checks to {CHECKS_DIR}", file=sys.stderr)
