"""Stop engine-core processes the way vLLM's process manager means to, with
time for a CPU engine core to stop its workers and without killing one
that has already exited."""

from __future__ import annotations

import time
from multiprocessing import connection
from multiprocessing.process import BaseProcess

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.log import get_logger
from vllm_bridge.patching.spec import Patch

logger = get_logger("shutdown")

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


def has_exited(process: BaseProcess) -> bool:
    """Whether ``process`` has ended, whoever reaped it.

    The sentinel (a pipe only the child holds open) is readable once the
    child is gone, for every waiter; ``is_alive()`` reaps with waitpid and
    answers True when another thread reaped the child first (ECHILD).
    """
    return process.exitcode is not None or bool(
        connection.wait([process.sentinel], timeout=0)
    )


def stop_processes(procs: list[BaseProcess], timeout: float | None = None) -> None:
    """SIGTERM each started process, wait up to ``timeout`` (by default
    :func:`exit_grace_s`) for all to end, then kill the process trees of
    those still running."""
    from vllm.utils.system_utils import kill_process_tree

    started = [proc for proc in procs if proc.pid is not None]
    running = [proc for proc in started if not has_exited(proc)]
    for proc in running:
        logger.info("[shutdown] Process manager: send sigterm to process %s", proc.name)
        proc.terminate()

    deadline = time.monotonic() + (exit_grace_s() if timeout is None else timeout)
    while running and (remaining := deadline - time.monotonic()) > 0:
        connection.wait([proc.sentinel for proc in running], timeout=remaining)
        running = [proc for proc in running if not has_exited(proc)]

    for proc in running:
        logger.warning(
            "[shutdown] Process manager: force killing remaining process %s pid %d",
            proc.name,
            proc.pid,
        )
        kill_process_tree(proc.pid)
    for proc in started:
        # Reaps the ended ones (a no-op where another thread already did).
        proc.join(timeout=0)


PATCH = Patch(
    name="engine-core-exit-grace",
    target="vllm.v1.engine.utils:shutdown",
    stage="platform",
    kind="replace",
    new=stop_processes,
    why=(
        "Two faults in the function that stops engine-core processes. (1) "
        "When an LLM(...) script ends, vLLM gives its engine-core process 5 s "
        "(a constant) to exit, while the engine core itself gives its workers "
        "up to VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (5 s) and then tears "
        "down: a CPU worker's teardown (gloo process groups, garbage "
        "collection of the model) and exit took 3 s on an idle 2-core machine "
        "and over 10 s with a second engine compiling beside it, so the "
        "engine core was force-killed mid-teardown. (2) It asks "
        "is_alive() whether the engine core still runs, while the client's "
        "engine monitor thread waits for the same process: when the monitor "
        "reaps it first, waitpid fails with ECHILD, is_alive() answers True, "
        "and vLLM logs 'force killing remaining process EngineCore' and "
        "kills the process tree of a pid that no longer exists (seen in 1 "
        "of 4 runs of a plain LLM(...) script on this machine)."
    ),
    how=(
        "Replaced by stop_processes: SIGTERM, then wait on each process's "
        "sentinel (readable for every waiter once the process is gone) for "
        "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS + 40 s when no timeout is given "
        "(a given timeout, e.g. a drain's remaining budget, is kept); only "
        "processes whose sentinel is still open are killed. Same log lines "
        "as vLLM's."
    ),
    upstream=(
        "none yet: to be reported to vLLM (the engine-core grace should exceed "
        "the worker grace; the process manager races the engine monitor "
        "thread for waitpid)"
    ),
    remove_when=(
        "vLLM's engine-core process grace exceeds its worker grace and its "
        "shutdown no longer reads liveness from waitpid"
    ),
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="2c77d4740264cd9f",
)
