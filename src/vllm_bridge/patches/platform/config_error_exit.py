"""End a process that fails on bad input (a vllm-bridge setting, or a value
one of vLLM's config classes refuses) with one line, not a traceback
through vLLM's internals."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.patching.spec import Patch

# The hook that was in place before install(): every other exception goes there.
_previous: Callable[..., object] = sys.__excepthook__


def one_line(error: BaseException) -> str | None:
    """The bad-input message of ``error``, or None for any other error."""
    if isinstance(error, BridgeConfigError):
        return str(error)
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return None
    import vllm.config

    # Only vLLM's own config classes: they validate what the user gave
    # (e.g. --max-model-len above the model's limit).
    if not hasattr(vllm.config, error.title):
        return None
    problems = "; ".join(
        " ".join(problem["msg"].removeprefix("Value error, ").split())
        for problem in error.errors()
    )
    return f"vLLM's {error.title} refuses the configuration: {problems}"


def _excepthook(
    kind: type[BaseException], error: BaseException, trace: TracebackType | None
) -> None:
    message = one_line(error)
    if message is None:
        _previous(kind, error, trace)
        return
    sys.stderr.write(f"vllm-bridge: error: {message}\n")
    sys.stderr.flush()


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
        "uvloop and EngineArgs before the one line that names the input; "
        "so does a value vLLM's own config classes refuse (e.g. "
        "--max-model-len above the model's limit, a pydantic ValidationError)."
    ),
    how=(
        "An excepthook, installed in every process where vllm-bridge is "
        "active, prints an uncaught BridgeConfigError as one line "
        "('vllm-bridge: error: ...'), and an uncaught pydantic "
        "ValidationError of a class in vllm.config as one line naming the "
        "class and each problem; any other exception goes to the previous "
        "hook. The process still exits with status 1."
    ),
    upstream="none: vLLM's CLI has no hook for a platform's config errors",
    remove_when="vLLM's CLI reports platform config errors without a traceback",
    vllm_versions=SUPPORTED_VLLM,
)
