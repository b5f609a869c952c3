"""The captured-check corpus (tests/corpus/checks): every file is what `captures.py` builds from AWS's documented lines
(no hand edit, no drift), the healthy ones hold those lines byte for byte, and each file is judged as it says,
through the code `hpdhc readings classify` runs (the controller's own: `hyperpod_dhc.deephealth.evidence`)."""

from __future__ import annotations

import io
import json

import pytest

from hyperpod_dhc.hpdhc import classify
from tests.corpus import aws_doc
from tests.corpus.captures import CHECKS_DIR, cases

FILES = sorted(CHECKS_DIR.glob("*.json"))


def test_the_files_are_the_generated_corpus():
    built = cases()
    assert {p.stem for p in FILES} == set(built), "run `python -m tests.corpus.captures` to write the corpus"
    for path in FILES:
        assert json.loads(path.read_text()) == built[path.stem], f"{path.name} drifted from captures.py"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_captured_check_gets_its_verdict(path):
    out = io.StringIO()
    assert classify.main([str(path), "--json"], out=out) == 0
    judged = json.loads(out.getvalue())
    expect = json.loads(path.read_text())["expect"]
    assert (judged["verdict"], judged["hint"]) == (expect["verdict"], expect["hint"]), judged["why"]
    assert judged["lines"] and all(line["rule"] for line in judged["lines"]), "every record says which rule placed it"


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        ("d24-lines-healthy", aws_doc.HARDWARE_2024 + aws_doc.DCGM_2024 + aws_doc.EFA_2024),
        ("d26-lines-healthy", aws_doc.HARDWARE_2026 + aws_doc.DCGM_2026 + aws_doc.EFA_2026),
        ("d24-lines-connectivity", aws_doc.HARDWARE_2024 + aws_doc.DCGM_2024 + aws_doc.EFA_2024 + aws_doc.NCCL_2024),
    ],
)
def test_the_healthy_checks_hold_the_documented_lines_byte_for_byte(name, lines):
    events = json.loads((CHECKS_DIR / f"{name}.json").read_text())["events"]
    assert tuple(e["message"] for e in events) == lines
    records = json.loads((CHECKS_DIR / name.replace("-lines-", "-records-")).with_suffix(".json").read_text())
    assert "\n".join(e["message"] for e in records["events"]) == "\n".join(lines), "the same lines, one per record"


def test_the_documented_lines_are_the_pages():
    """Spot checks against the pages' text (tests/corpus/aws_doc.py names the sources)."""
    assert aws_doc.DCGM_2024[0].endswith("replacementRequired: false rebootRequired:false")
    assert aws_doc.EFA_2024[0].split("    info    ")[1].startswith("EFA Loopback check passed for device: rdmap0s29 . ")
    assert aws_doc.DCGM_2026[1:] == (
        "  dcgmVersion: 3.3.7 gpuDriverVersion: 535.183.01",
        "  gpuDeviceIds: [2237] replacementRequired: false rebootRequired: false",
    )
    assert (
        aws_doc.HARDWARE_2026[0]
        == "2026-03-29T18:03:14Z  info  Executing Hardware stress check with command: stress-ng"
    )
    assert len(aws_doc.NCCL_2024) == 36 and aws_doc.NCCL_2024[31] == "2024-08-20T16:22:43.831-07:00"
