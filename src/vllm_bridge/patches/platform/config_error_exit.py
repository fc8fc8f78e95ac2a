"""End a process that fails on bad vllm-bridge input with the one-line
message, not a traceback through vLLM's internals."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.patching.spec import Patch

# The hook that was in place before install(): every other exception goes there.
_previous: Callable[..., object] = sys.__excepthook__


def _excepthook(
    kind: type[BaseException], error: BaseException, trace: TracebackType | None
) -> None:
    if isinstance(error, BridgeConfigError):
        sys.stderr.write(f"vllm-bridge: error: {error}\n")
        sys.stderr.flush()
        return
    _previous(kind, error, trace)


def install() -> None:
    global _previous
    if sys.excepthook is not _excepthook:
        _previous = sys.excepthook
        sys.excepthook = _excepthook


def uninstall() -> None:
    if sys.excepthook is _excepthook:
        sys.excepthook = _previous


PATCH = Patch(
    name="config-error-exit",
    target="sys:excepthook",
    stage="platform",
    kind="hook",
    new=install,
    undo=uninstall,
    why=(
        "A BridgeConfigError raised while `vllm serve` builds its config "
        "(bad --additional-config key, bad VLLM_BRIDGE_* value) leaves "
        "vLLM's CLI uncaught: the user sees a 40-line traceback through "
        "uvloop and EngineArgs before the one line that names the input."
    ),
    how=(
        "An excepthook, installed in every process where vllm-bridge is "
        "active, prints an uncaught BridgeConfigError as one line "
        "('vllm-bridge: error: ...'); any other exception goes to the "
        "previous hook. The process still exits with status 1."
    ),
    upstream="none: vLLM's CLI has no hook for a platform's config errors",
    remove_when="vLLM's CLI reports platform config errors without a traceback",
    vllm_versions=SUPPORTED_VLLM,
)
