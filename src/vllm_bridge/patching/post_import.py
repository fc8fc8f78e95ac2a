"""Run callbacks right after a module is imported (for deferred patches)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class PostImportHooks:
    """A ``sys.meta_path`` entry that finds nothing itself: for a watched
    module it asks the finders behind it for the spec and wraps the loader's
    ``exec_module`` so the callbacks run once the module has executed."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callable[[], Any]]] = {}

    def watch(self, module: str, callback: Callable[[], Any]) -> None:
        if module in sys.modules:
            callback()
            return
        self._callbacks.setdefault(module, []).append(callback)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        callbacks = self._callbacks.pop(fullname, None)
        if callbacks is None:
            return None
        spec = self._spec_from_other_finders(fullname, path, target)
        if (
            spec is None
            or spec.loader is None
            or not hasattr(spec.loader, "exec_module")
        ):
            self._callbacks[fullname] = callbacks
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            for callback in callbacks:
                callback()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def _spec_from_other_finders(
        self, fullname: str, path: Any, target: ModuleType | None
    ) -> ModuleSpec | None:
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


POST_IMPORT = PostImportHooks()
