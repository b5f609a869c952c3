"""Speed only: moto's Step Functions interpreter parses what does not change, once.

- A state machine's definition was parsed (ANTLR, then the preprocessor's component tree) at every execution's
  start: now once a definition. The tree is read-only while it runs (its components keep an execution's state
  in the `Environment`, under each component's `heap_key`; only Map and Parallel states keep some of their own, and
  our workflow has neither, which `tests/integration/test_moto_patches.py` checks), so executions running at once
  share it. Every component's `heap_key` (made on first use) is made at the parse, under a lock: two executions
  making one at once would each keep a different key and lose, say, a Retry's attempt count.
- A JSONPath (`InputPath`, `ResultPath`, a `"key.$"` field) was parsed with PLY at every evaluation: now once a
  path. A parsed path is only read (`find`, `update_or_create` change the data they are given, not the path).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.utils import json_path
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

PATHS_KEPT = 4096  # distinct JSONPaths our workflow has: a few dozen


def components(program: Any) -> Iterator[EvalComponent]:
    """Every component of a parsed program (reached through its attributes, lists and maps)."""
    seen: set[int] = set()
    todo = [program]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, EvalComponent):
            yield node
        if isinstance(node, list | tuple | set | frozenset):
            todo.extend(node)
        elif isinstance(node, dict):
            todo.extend(node.values())
        elif hasattr(node, "__dict__") and type(node).__module__.startswith("moto.stepfunctions"):
            todo.extend(vars(node).values())


def keyed(program: Any) -> Any:
    """`program` with the `heap_key` of every component in it made."""
    for component in components(program):
        _ = component.heap_key
    return program


def _program_once_a_definition() -> Any:
    programs: dict[str, Any] = {}
    lock = threading.Lock()

    def entrypoint(self: ExecutionWorker) -> Any:
        definition = self._evaluation_details.state_machine_details.definition
        with lock:
            if definition not in programs:
                programs[definition] = keyed(AmazonStateLanguageParser.parse(definition)[0])
            return programs[definition]

    return entrypoint


@contextlib.contextmanager
def parsed_once() -> Iterator[None]:
    with (
        mock.patch.object(ExecutionWorker, "_get_evaluation_entrypoint", _program_once_a_definition()),
        mock.patch.object(json_path, "parse", functools.lru_cache(maxsize=PATHS_KEPT)(json_path.parse)),
        mock.patch.object(result_path, "parse", functools.lru_cache(maxsize=PATHS_KEPT)(result_path.parse)),
    ):
        yield
