"""The bad-input corpus: hostile and garbled input for every entry point, as data.

`events.json` (Intake, EventBridge events) and `api.json` (operator API requests) are lists of cases
``{"name", "input", "expect": {...}}``; `tests/integration/test_bad_input_corpus.py` runs every case
against the real handlers. Values too large to keep in a file are built on load:
``{"$repeat": [text or list, n]}``, ``{"$concat": [part, ...]}`` and ``{"$entries": [[key, value], ...]}``
(an object whose key is built, e.g. a 100 kB field name).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
# The account and region of the twin (tests/harness/engine.py) and of the HyperPod fake.
ACCOUNT, REGION = "123456789012", "us-east-1"
_FIXTURE_ACCOUNT, _FIXTURE_REGION = "111122223333", "us-west-2"  # of the documented samples in tests/events


def load_cases(name: str) -> list[dict[str, Any]]:
    cases = json.loads((HERE / name).read_text())
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), f"{name}: duplicate case names"
    return [{**c, "input": expand(c["input"])} for c in cases]


def expand(value: Any) -> Any:
    """Build the ``$repeat`` / ``$concat`` / ``$entries`` values of a case, recursively."""
    if isinstance(value, dict):
        if set(value) == {"$repeat"}:
            item, n = value["$repeat"]
            return expand(item) * n
        if set(value) == {"$concat"}:
            parts = [expand(p) for p in value["$concat"]]
            return "".join(parts) if all(isinstance(p, str) for p in parts) else [x for p in parts for x in p]
        if set(value) == {"$entries"}:
            return {expand(k): expand(v) for k, v in value["$entries"]}
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def localize(event: Any, account: str = ACCOUNT, region: str = REGION) -> Any:
    """A documented sample event as if sent in `account`/`region` (envelope and every ARN in it)."""
    text = json.dumps(copy.deepcopy(event))
    text = text.replace(f":{_FIXTURE_REGION}:{_FIXTURE_ACCOUNT}:", f":{region}:{account}:")
    event = json.loads(text)
    if isinstance(event, dict):
        event.update(account=account, region=region)
    return event
