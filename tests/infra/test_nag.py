"""cdk-nag AwsSolutions: no unacknowledged finding, and every acknowledgement is specific and used.

cdk-nag 3 is a policy-validation plugin: a finding makes ``synth()`` raise. It runs here on its own
App (with the plugin on the session App, ``Template.from_stack`` would raise too).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import hyperpod_dhc.infra.acknowledgements
from hyperpod_dhc.infra.app import build
from tests.harness import synth

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"
GENERIC = re.compile(r"^(ok|n/?a|fine|needed|required|wildcard|todo|suppress(ed)?)\W*$", re.IGNORECASE)


def synthesize_with_nag(outdir: Path) -> tuple[Exception | None, dict[str, Any]]:
    """(the error synth raised, if any; the validation report) for the app of ``hyperpod_dhc.infra.app``."""
    app = synth.app(outdir=outdir)
    build(app, nag=True)
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as err:  # jsii surfaces ValidationFailed as RuntimeError
        error = err
    return error, json.loads((outdir / "validation-report.json").read_text())


def violations(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(rule id, construct path) of every finding in a validation report."""
    return {
        (v["ruleName"], c["constructPath"])
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
        for c in v["violatingConstructs"]
    }


@pytest.fixture(scope="session")
def nag_outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nag")


@pytest.fixture(scope="session")
def nagged(nag_outdir: Path) -> tuple[Exception | None, dict[str, Any]]:
    return synthesize_with_nag(nag_outdir)


@pytest.fixture(scope="session")
def acknowledgements(nagged: tuple[Exception | None, dict[str, Any]], nag_outdir: Path) -> list[tuple[str, str, str]]:
    """(construct path, rule id, reason) of every acknowledgement in the synthesized stack."""
    error, _ = nagged
    assert error is None, f"nag failed synth: {error}"
    metadata = json.loads((nag_outdir / f"{synth.STACK_ID}.metadata.json").read_text())
    return [
        (path.lstrip("/"), rule_id, reason)
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == ACKNOWLEDGED
        for rule_id, reason in entry["data"].items()
    ]


@pytest.fixture(scope="session")
def unacknowledged_findings(
    tmp_path_factory: pytest.TempPathFactory,
) -> set[tuple[str, str]]:
    """The findings nag reports when no acknowledgement is made (to prove each one is used)."""
    real = hyperpod_dhc.infra.acknowledgements.Validations

    class IgnoreAcknowledgements:
        @staticmethod
        def of(_scope: Any) -> Any:
            return IgnoreAcknowledgements()

        def acknowledge(self, *_rules: Any) -> None:
            pass

    mp = pytest.MonkeyPatch()
    mp.setattr(hyperpod_dhc.infra.acknowledgements, "Validations", IgnoreAcknowledgements)
    try:
        error, report = synthesize_with_nag(tmp_path_factory.mktemp("nag-raw"))
    finally:
        mp.undo()
    assert hyperpod_dhc.infra.acknowledgements.Validations is real
    assert error is not None, "expected findings without acknowledgements"
    return violations(report)


def test_awssolutions_passes_with_zero_errors(nagged: tuple[Exception | None, dict[str, Any]]) -> None:
    error, report = nagged
    assert error is None, str(error)
    assert violations(report) == set()
    assert all(plugin.get("conclusion") != "failure" for plugin in report["pluginReports"])


def test_every_acknowledgement_names_one_exact_finding(acknowledgements: list[tuple[str, str, str]]) -> None:
    assert acknowledgements
    for path, rule_id, _ in acknowledgements:
        assert rule_id.startswith("AwsSolutions::AwsSolutions-"), rule_id
        assert path.count("/") >= 2, f"{rule_id} acknowledged on a stack-wide scope {path}"
        if "IAM5" in rule_id:
            assert re.fullmatch(r"AwsSolutions::AwsSolutions-IAM5\[(Resource|Action)::.+\]", rule_id), rule_id
        assert "IAM4" not in rule_id, "no managed policies are used; nothing to acknowledge"


def test_every_acknowledgement_gives_a_specific_reason(acknowledgements: list[tuple[str, str, str]]) -> None:
    for path, rule_id, reason in acknowledgements:
        assert len(reason) >= 80 and not GENERIC.match(reason), (path, rule_id, reason)
    iam5_reasons = {reason for _, rule_id, reason in acknowledgements if "IAM5[Resource::" in rule_id}
    assert any("cluster id" in r for r in iam5_reasons)  # why cluster/* cannot be a cluster name


def test_every_acknowledgement_is_used(
    acknowledgements: list[tuple[str, str, str]], unacknowledged_findings: set[tuple[str, str]]
) -> None:
    stale = [
        (path, rule_id)
        for path, rule_id, _ in acknowledgements
        if not any(
            rule_id.split("::", 1)[1] == finding and (at == path or at.startswith(path + "/"))
            for finding, at in unacknowledged_findings
        )
    ]
    assert not stale, f"acknowledgements without a finding: {stale}"
    assert {finding for finding, _ in unacknowledged_findings} <= {
        rule_id.split("::", 1)[1] for _, rule_id, _ in acknowledgements
    }
