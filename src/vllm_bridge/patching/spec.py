"""A patch declared as data: what it changes in vLLM, why, and until when."""

from __future__ import annotations

import hashlib
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Stage = Literal["startup", "platform", "worker"]
STAGES: tuple[Stage, ...] = ("startup", "platform", "worker")
"""``startup``: at interpreter start, from a ``.pth`` file, before any vLLM
hook (only for fixes needed before vLLM loads plugins); ``platform``: every
process that builds configs or schedules; ``worker``: each worker process."""

Kind = Literal["replace", "wrap", "hook"]
"""``replace`` sets the target to ``new``; ``wrap`` sets it to
``new(original)``; ``hook`` calls ``new()`` to install something that is not
an attribute (and ``undo()`` to remove it)."""


@dataclass(frozen=True)
class Patch:
    name: str
    target: str
    """``package.module:Attr.path`` (``hook`` patches: what they hook)."""
    stage: Stage
    kind: Kind
    new: Callable[..., Any]
    why: str
    how: str
    upstream: str
    remove_when: str
    vllm_versions: str
    """A ``packaging`` specifier set, e.g. ``">=0.32,<0.33"``."""
    fingerprint: str | None = None
    """``source_fingerprint`` of the original target when the patch was
    written; ``None`` for hooks, which replace no code."""
    required: bool = True
    undo: Callable[[], None] | None = None
    active_when: Callable[[], bool] | None = None
    """Whether this process needs the patch (e.g. only under a setting);
    where it returns False the patch is recorded as inactive, unapplied.
    ``None``: always needed."""

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def attribute_path(self) -> list[str]:
        return self.target.partition(":")[2].split(".")


def source_fingerprint(obj: Any) -> str:
    """A short hash of ``obj``'s source, insensitive to indentation and
    trailing blanks, so that a re-indented but identical upstream function
    does not count as drift."""
    raw = inspect.unwrap(obj.__func__ if hasattr(obj, "__func__") else obj)
    source = textwrap.dedent(inspect.getsource(raw))
    normalised = "\n".join(
        line.rstrip() for line in source.splitlines() if line.strip()
    )
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]
