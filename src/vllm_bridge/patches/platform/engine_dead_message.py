"""Tell a client whose request failed because the engine died what happened
and what to do, instead of pointing it at a stack trace it cannot see."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

# vLLM's own first sentence stays first: clients may match on it.
ENGINE_DEAD_MESSAGE = (
    "EngineCore encountered an issue: the engine-core process or one of its "
    "workers stopped (the server log names the cause, e.g. the kernel's OOM "
    "killer), and this engine serves no further requests. Retry the request "
    "once the server has been restarted, or on another replica."
)


def with_clear_message(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self: Exception, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.args = (ENGINE_DEAD_MESSAGE, *self.args[1:])

    return __init__


PATCH = Patch(
    name="engine-dead-message",
    target="vllm.v1.engine.exceptions:EngineDeadError.__init__",
    stage="platform",
    kind="wrap",
    new=with_clear_message,
    why=(
        "When a worker or the engine core dies, every in-flight request "
        "fails with vLLM's 'EngineCore encountered an issue. See stack trace "
        "(above) for the root cause.': the client has no stack trace above, "
        "and is not told that the engine is gone for good nor what to do."
    ),
    how=(
        "EngineDeadError keeps vLLM's first words and says what stopped, "
        "where the cause is, that the engine serves nothing more, and to "
        "retry after a restart or on another replica."
    ),
    upstream="none yet: to be proposed to vLLM (EngineDeadError's message)",
    remove_when="vLLM's EngineDeadError message tells the client what to do",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="7bcd864dc13e65fd",
)
