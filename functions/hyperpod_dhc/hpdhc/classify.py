"""`hpdhc readings classify FILE [--policy FILE] [--instance-type T] [--json]`: judge a captured check offline.

A captured check is what `hpdhc readings capture` writes (or a file of `tests/corpus/checks/`): a node's result
log events and its check's window. This runs the controller's own code on it (`hyperpod_dhc.deephealth.evidence`:
records, rules, attribution, proof) and prints the verdict, the hint, why, and every record with the rule that placed
it, the deciding ones marked. `--policy FILE` (JSON: `result_patterns`, or an object holding it) replaces the patterns
the capture carries, so a pattern can be tried before it is deployed. The verdict is the one the lines give as if the
node came back `Running` from its check; the controller also weighs its statuses and its clock.

Exit status 0 whatever the verdict; 2 when a file cannot be read, is not a captured check, or a pattern is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from hyperpod_dhc.deephealth.evidence.capture import Capture, CaptureError, Judged, judge_capture
from hyperpod_dhc.deephealth.evidence.rules import PatternError
from hyperpod_dhc.deephealth.evidence.text import printable

TEXT_SHOWN = 100  # characters of each record in the table


def main(argv: Sequence[str], prog: str = "hpdhc readings classify", out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a captured check (hpdhc readings capture --out FILE)")
    parser.add_argument("--policy", metavar="FILE", help="JSON: result_patterns {pass, neutral, failure} to judge with")
    parser.add_argument("--instance-type", help="judge as if the node were of this type (its EFA devices)")
    parser.add_argument("--json", action="store_true", help="print the judgement as JSON")
    args = parser.parse_args(list(argv))
    try:
        capture = Capture.of(_load(args.file))
        patterns = _patterns(_load(args.policy)) if args.policy else None
        if args.instance_type:
            capture = _retyped(capture, args.instance_type)
        judged = judge_capture(capture, patterns)
    except (OSError, ValueError) as err:  # unreadable, not JSON, not a capture (CaptureError), a pattern refused
        kind = "pattern refused" if isinstance(err, PatternError) else "cannot judge"
        print(f"{prog}: error: {kind}: {printable(str(err))}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(judged.as_json(), out, indent=2, ensure_ascii=True)
        out.write("\n")
    else:
        render(judged, out)
    return 0


def _load(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _patterns(doc: Any) -> Any:
    if isinstance(doc, dict) and "result_patterns" in doc:
        return doc["result_patterns"]
    if not isinstance(doc, dict):
        raise CaptureError("--policy: a JSON object of result_patterns (pass, neutral, failure)")
    return doc


def _retyped(capture: Capture, instance_type: str) -> Capture:
    return dataclasses.replace(capture, instance_type=instance_type, efa_devices=None)


def render(judged: Judged, out: TextIO) -> None:
    doc = judged.as_json()
    hint = f" (hint: {doc['hint']})" if doc["hint"] else ""
    print(f"verdict: {doc['verdict']}{hint}", file=out)
    print(f"why: {printable(doc['why'])}", file=out)
    print(f"required: {', '.join(doc['required'])}; EFA devices: {doc['efa_devices']}", file=out)
    if doc["missing"]:
        print(f"missing: {', '.join(doc['missing'])}", file=out)
    for line in doc["lines"]:
        mark = "*" if line["decided"] else " "
        text = printable(line["text"])[:TEXT_SHOWN]
        print(f" {mark} {line['finding']:<12} {line['rule']:<28} {text}", file=out)
    print("(* decided)", file=out)
