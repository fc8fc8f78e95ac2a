"""Give the engine-core process time to stop its CPU workers before it is
force-killed, so an `LLM(...)` script ends without killing its engine."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

# The engine core itself waits up to VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS for
# its workers, then tears down its own process groups and exits: 3 s in all
# on an idle 2-core machine, over 10 s with a second engine compiling on the
# same cores; a PP=2 engine 4 s idle, 8 s beside two busy loops, and once
# over 25 s under the test suite's load. Its parent must wait longer than
# that; a hung engine core is still killed, after 45 s.
ENGINE_CORE_TEARDOWN_S = 40.0


def exit_grace_s() -> float:
    import vllm.envs

    return vllm.envs.VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS + ENGINE_CORE_TEARDOWN_S


def with_exit_grace(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def shutdown(procs: list[Any], timeout: float | None = None) -> None:
        # None: no deadline from the user (an explicit timeout, e.g. a
        # drain's remaining budget, is kept).
        original(procs, exit_grace_s() if timeout is None else timeout)

    return shutdown


PATCH = Patch(
    name="engine-core-exit-grace",
    target="vllm.v1.engine.utils:shutdown",
    stage="platform",
    kind="wrap",
    new=with_exit_grace,
    why=(
        "When an LLM(...) script ends, vLLM gives its engine-core process 5 s "
        "(a constant) to exit, while the engine core itself gives its workers "
        "up to VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (5 s) and then tears "
        "down: a CPU worker's teardown (gloo process groups, garbage "
        "collection of the model) and exit took 3 s on an idle 2-core machine "
        "and over 10 s with a second engine compiling beside it, so the "
        "engine core was force-killed mid-teardown ('Process manager: force "
        "killing remaining process EngineCore')."
    ),
    how=(
        "The process-manager shutdown that vllm/v1/engine/utils.py uses "
        "(also through its finalizer at interpreter exit) gets "
        "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS + 40 s when no timeout is given; "
        "a given timeout is kept."
    ),
    upstream=(
        "none yet: to be reported to vLLM (the engine-core grace should exceed "
        "the worker grace)"
    ),
    remove_when="vLLM's engine-core process grace exceeds its worker grace",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="2c77d4740264cd9f",
)
