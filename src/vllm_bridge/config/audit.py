"""Records of every change vllm-bridge makes to the user's configuration.

Each process keeps its own records: the main process usually makes the
changes, and the engine-core process re-runs the same rules on the already
updated config, where a correct rule finds nothing left to change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vllm_bridge.log import get_logger

logger = get_logger("config")


@dataclass(frozen=True)
class Change:
    option: str
    """``section.field`` of VllmConfig, or ``env.NAME`` for an environment
    variable meant for the worker processes."""
    requested: object
    applied: object
    reason: str
    rule: str


_records: list[Change] = []


def records() -> tuple[Change, ...]:
    """Every change recorded in this process, oldest first."""
    return tuple(_records)


def format_table(changes: Iterable[Change]) -> str:
    rows = [("option", "requested", "applied", "rule", "reason")]
    rows += [
        (c.option, repr(c.requested), repr(c.applied), c.rule, c.reason)
        for c in changes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[4]
        for row in rows
    ]
    return "\n".join(lines)


def report(changes: list[Change]) -> None:
    """Record ``changes`` and log them as one table (nothing when empty)."""
    if not changes:
        return
    _records.extend(changes)
    logger.info(
        "vllm-bridge changed %d option(s):\n%s", len(changes), format_table(changes)
    )
