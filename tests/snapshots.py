"""Snapshot comparison for command output: volatile values are masked by
the caller; ``UPDATE_SNAPSHOTS=1`` rewrites the stored file instead."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

SNAPSHOTS = Path(__file__).parent / "unit" / "snapshots"


def assert_matches_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path}: run with UPDATE_SNAPSHOTS=1"
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{name} (stored)",
                tofile=f"{name} (now)",
            )
        )
        raise AssertionError(f"output differs from {path}:\n{diff}")
