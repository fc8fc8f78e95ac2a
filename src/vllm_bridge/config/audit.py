"""Records of every change vllm-bridge makes to the user's configuration.

Each process logs its own: the main process usually makes the changes, and
the engine-core process re-runs the same rules on the already updated
config, where a correct rule finds nothing left to change. Whoever needs the
changes as data takes them with ``capture()``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum

from vllm_bridge.log import get_logger

logger = get_logger("config")


@dataclass(frozen=True)
class Change:
    option: str
    """``section.field`` of VllmConfig, ``env.NAME`` for an environment
    variable meant for the worker processes, or ``workers.binding`` for the
    per-worker plan vLLM's own binding carries out (recorded, not set)."""
    requested: object
    applied: object
    reason: str
    rule: str
    user_set: bool = False
    """The requested value was set by the user (not a vLLM default): strict
    mode refuses such a change instead of making it."""


def show(value: object) -> str:
    """A value as the user would write it: enums by name."""
    return value.name if isinstance(value, Enum) else repr(value)


_captures: list[list[Change]] = []


@contextmanager
def capture() -> Iterator[list[Change]]:
    """The changes recorded while the block runs (nested blocks see theirs
    too), in order."""
    captured: list[Change] = []
    _captures.append(captured)
    try:
        yield captured
    finally:
        _captures.remove(captured)


def format_changes(changes: Iterable[Change], width: int = 100) -> str:
    """One block per change: the option, its values and rule on one line,
    the reason wrapped below it (readable at any terminal width)."""
    blocks = []
    for change in changes:
        origin = f"{change.rule}, set by the user" if change.user_set else change.rule
        head = (
            f"{change.option}: {show(change.requested)} -> {show(change.applied)}"
            f"  [{origin}]"
        )
        reason = textwrap.fill(
            change.reason, width, initial_indent="    ", subsequent_indent="    "
        )
        blocks.append(f"{head}\n{reason}")
    return "\n".join(blocks)


def report(changes: list[Change]) -> None:
    """Record ``changes`` and log them as one table (nothing when empty)."""
    if not changes:
        return
    for captured in _captures:
        captured.extend(changes)
    logger.info(
        "vllm-bridge changed %d option(s):\n%s", len(changes), format_changes(changes)
    )
