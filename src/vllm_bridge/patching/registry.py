"""Apply, verify, record and revert patches by stage.

The registry knows nothing of the patches themselves: the catalogue
(``vllm_bridge.patches.catalogue``) builds the process's registry from the
patch modules, which declare their ``Patch`` as data.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vllm_bridge import envs
from vllm_bridge.compat import VLLM_DISTRIBUTION
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.log import get_logger
from vllm_bridge.patching.post_import import POST_IMPORT as _POST_IMPORT
from vllm_bridge.patching.spec import STAGES, Patch, Stage, source_fingerprint

logger = get_logger("patching")

Status = Literal[
    "applied", "deferred", "disabled", "inactive", "skipped", "failed", "reverted"
]
_SETTLED: tuple[Status, ...] = (
    "applied",
    "deferred",
    "disabled",
    "inactive",
    "skipped",
)
ProblemKind = Literal["version_range", "target_missing", "fingerprint"]


@dataclass(frozen=True)
class Problem:
    """What no longer matches between a patch and the installed vLLM."""

    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return self.message


_MISSING = object()


class PatchError(RuntimeError):
    """A required patch cannot be applied; the message names the patch, its
    target and its upstream link."""


@dataclass(frozen=True)
class Record:
    patch: str
    stage: Stage
    status: Status
    detail: str
    pid: int


@dataclass(frozen=True)
class _Original:
    owner: Any
    attribute: str
    value: Any
    """The owner's own raw attribute (descriptor included), restored by
    revert; ``_MISSING`` when the owner only inherited it."""
    replaced: Any
    """What the patch replaced (possibly inherited): the fingerprinted code."""


@cache
def installed_vllm_version() -> Version:
    try:
        return Version(version(VLLM_DISTRIBUTION))
    except PackageNotFoundError:
        return Version(version("vllm"))


def _resolve(patch: Patch) -> tuple[Any, str, Any]:
    """The owner, attribute name and current raw value of the target."""
    owner: Any = importlib.import_module(patch.module)
    path = patch.attribute_path
    for name in path[:-1]:
        owner = getattr(owner, name)
    attribute = path[-1]
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attribute in vars(klass):
                return owner, attribute, vars(klass)[attribute]
        raise AttributeError(f"{owner.__qualname__} has no attribute {attribute!r}")
    return owner, attribute, getattr(owner, attribute)


def _wrap(raw: Any, factory: Any) -> Any:
    """``factory(original)``, keeping classmethod/staticmethod/property."""
    if isinstance(raw, classmethod):
        return classmethod(factory(raw.__func__))
    if isinstance(raw, staticmethod):
        return staticmethod(factory(raw.__func__))
    return factory(raw)


class Registry:
    def __init__(self, patches: Iterable[Patch] = ()) -> None:
        self._patches: dict[str, Patch] = {}
        self._records: dict[str, Record] = {}
        self._originals: dict[str, _Original] = {}
        self._held_off: set[str] = set()
        for patch in patches:
            self.register(patch)

    def register(self, patch: Patch) -> Patch:
        if patch.stage not in STAGES:
            raise ValueError(f"patch {patch.name}: unknown stage {patch.stage!r}")
        if patch.name in self._patches:
            raise ValueError(f"patch {patch.name} is declared twice")
        for other in self._patches.values():
            if other.target == patch.target:
                raise ValueError(
                    f"patch {patch.name} targets {patch.target}, already patched "
                    f"by {other.name}: merge them into one patch"
                )
        self._patches[patch.name] = patch
        return patch

    def patches(self, stage: Stage | None = None) -> list[Patch]:
        return [p for p in self._patches.values() if stage in (None, p.stage)]

    def records(self) -> dict[str, Record]:
        return dict(self._records)

    def disabled_names(self) -> set[str]:
        names = set(envs.DISABLE_PATCHES.get())
        if "all" in names:
            return set(self._patches)
        unknown = names - set(self._patches)
        if unknown:
            raise BridgeConfigError(
                f"{envs.DISABLE_PATCHES.name} names unknown patch(es) "
                f"{', '.join(sorted(unknown))}; known patches: "
                f"{', '.join(self._patches) or '(none)'}, or 'all'"
            )
        return names

    def problems(self, patch: Patch) -> list[Problem]:
        """What no longer matches: vLLM version range, target, fingerprint."""
        found: list[Problem] = []
        installed = installed_vllm_version()
        if installed not in SpecifierSet(patch.vllm_versions):
            found.append(
                Problem(
                    "version_range",
                    f"vLLM {installed} is outside the patch's range "
                    f"{patch.vllm_versions}",
                )
            )
        if patch.kind == "hook":
            return found
        try:
            _, _, raw = _resolve(patch)
        except (ImportError, AttributeError) as exc:
            return [*found, Problem("target_missing", f"target missing: {exc}")]
        original = self._originals.get(patch.name)
        if original is not None:
            raw = original.replaced
        if patch.fingerprint is not None:
            actual = source_fingerprint(raw)
            if actual != patch.fingerprint:
                found.append(
                    Problem(
                        "fingerprint",
                        f"target source changed: fingerprint {actual}, "
                        f"patch written against {patch.fingerprint}",
                    )
                )
        return found

    def apply(self, stage: Stage) -> list[Record]:
        """Apply the stage's patches in declaration order; idempotent.

        A patch whose target module is not imported yet is deferred until
        that import: importing it here would add its import time (seconds
        for some vLLM modules) to processes that never use it."""
        disabled = self.disabled_names()
        strict = envs.STRICT.get()
        newly_applied: list[str] = []
        newly_deferred: list[str] = []
        newly_inactive: list[str] = []
        for patch in self.patches(stage):
            record = self._records.get(patch.name)
            if patch.name in self._held_off or (
                record is not None and record.status in _SETTLED
            ):
                continue
            if patch.name in disabled:
                self._record(patch, "disabled", f"by {envs.DISABLE_PATCHES.name}")
            elif patch.active_when is not None and not patch.active_when():
                self._record(patch, "inactive", "not needed in this process")
                newly_inactive.append(patch.name)
            elif patch.kind != "hook" and patch.module not in sys.modules:
                self._record(patch, "deferred", f"until {patch.module} is imported")
                newly_deferred.append(patch.name)
                _POST_IMPORT.watch(
                    patch.module, partial(self._apply_deferred, patch, strict)
                )
            elif self._apply_checked(patch, strict):
                newly_applied.append(patch.name)
        if newly_applied or newly_deferred or newly_inactive:
            logger.info(
                "vllm-bridge %s stage in process %d: applied [%s], deferred until "
                "their module is imported [%s], not needed here [%s]",
                stage,
                os.getpid(),
                ", ".join(newly_applied),
                ", ".join(newly_deferred),
                ", ".join(newly_inactive),
            )
        return [r for r in self._records.values() if r.stage == stage]

    def _apply_deferred(self, patch: Patch, strict: bool) -> None:
        if self._records[patch.name].status != "deferred":
            return  # reverted or re-applied meanwhile
        if self._apply_checked(patch, strict):
            logger.info(
                "vllm-bridge applied deferred patch %s in process %d",
                patch.name,
                os.getpid(),
            )

    def _apply_checked(self, patch: Patch, strict: bool) -> bool:
        """Check and apply one patch; whether it was applied."""
        problems = self.problems(patch)
        described = "; ".join(map(str, problems))
        missing = [p for p in problems if p.kind == "target_missing"]
        if missing and not patch.required:
            logger.warning("Skipping optional patch %s: %s", patch.name, missing[0])
            self._record(patch, "skipped", str(missing[0]))
            return False
        if missing or (problems and strict):
            self._record(patch, "failed", described)
            raise PatchError(
                f"patch {patch.name} ({patch.target}) cannot be applied: "
                f"{described}. Upstream: {patch.upstream}. "
                f"Switch it off with {envs.DISABLE_PATCHES.name}={patch.name} "
                "if vLLM no longer needs it."
            )
        for problem in problems:
            logger.warning("Patch %s drifted: %s", patch.name, problem)
        self._apply_one(patch)
        self._record(patch, "applied", described or "ok")
        return True

    def _apply_one(self, patch: Patch) -> None:
        if patch.kind == "hook":
            patch.new()
            return
        owner, attribute, raw = _resolve(patch)
        own = vars(owner).get(attribute, _MISSING) if isinstance(owner, type) else raw
        new = _wrap(raw, patch.new) if patch.kind == "wrap" else patch.new
        self._originals[patch.name] = _Original(owner, attribute, own, raw)
        setattr(owner, attribute, new)

    def revert(self, name: str) -> None:
        """Restore the original target exactly (the same object)."""
        patch = self._patches[name]
        record = self._records.get(name)
        if record is None or record.status != "applied":
            return
        if patch.kind == "hook":
            if patch.undo is not None:
                patch.undo()
        else:
            original = self._originals.pop(name)
            if original.value is _MISSING:
                delattr(original.owner, original.attribute)
            else:
                setattr(original.owner, original.attribute, original.value)
        self._record(patch, "reverted", "by revert()")

    @contextmanager
    def reverted(self, name: str) -> Iterator[None]:
        """Run a block without patch ``name``, then re-apply it. Stage
        applications inside the block (vLLM calls the platform hooks again
        while it builds a config) leave it unapplied."""
        was_applied = self._records.get(name, None)
        self.revert(name)
        self._held_off.add(name)
        try:
            yield
        finally:
            self._held_off.discard(name)
            if was_applied is not None and was_applied.status == "applied":
                self._apply_one(self._patches[name])
                self._records[name] = was_applied

    def _record(self, patch: Patch, status: Status, detail: str) -> None:
        self._records[patch.name] = Record(
            patch.name, patch.stage, status, detail, os.getpid()
        )
