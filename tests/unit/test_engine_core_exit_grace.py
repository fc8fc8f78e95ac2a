"""The platform-stage patch that gives an engine-core process time to tear
down before vLLM's process manager force-kills it, and does not kill one
another thread has already reaped.

A real process stands for the engine core: one that, like an engine core
stopping its workers, needs a few seconds after SIGTERM before it exits.
A real engine core's teardown time depends on the machine's load, so it
cannot be made to take a chosen time (tests/engine/test_llm_compiled.py
checks a real one is not force-killed).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from types import FrameType

import vllm.v1.engine.utils

from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.platform.engine_core_exit_grace import PATCH, exit_grace_s

# Longer than vLLM's own 5 s, well inside the patched grace.
TEARDOWN_S = 6.5


def slow_teardown_process() -> None:
    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        time.sleep(TEARDOWN_S)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    while True:
        time.sleep(0.1)


def stop_slow_process() -> int | None:
    """Exit code of a slow-to-stop process after vLLM's process-manager
    shutdown with no timeout given (what LLM(...) does at exit)."""
    process = multiprocessing.get_context("fork").Process(
        target=slow_teardown_process, name="EngineCore"
    )
    process.start()
    # Let the child install its SIGTERM handler.
    time.sleep(0.5)
    vllm.v1.engine.utils.shutdown([process])
    process.join(30)
    return process.exitcode


def test_grace_exceeds_the_worker_grace():
    import vllm.envs

    assert exit_grace_s() > vllm.envs.VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS + 10


def test_a_slow_engine_core_exits_by_itself():
    REGISTRY.apply("platform")
    assert REGISTRY.records()[PATCH.name].status == "applied"
    assert stop_slow_process() == 0


def test_without_the_patch_it_is_force_killed():
    REGISTRY.apply("platform")
    with REGISTRY.reverted(PATCH.name):
        assert stop_slow_process() == -signal.SIGKILL


def quick_exit_process() -> None:
    time.sleep(0.3)


def stop_process_reaped_elsewhere() -> None:
    """What vLLM's process-manager shutdown logs for an engine core that has
    exited and been reaped by another thread (as the client's engine monitor
    thread does when it wins the race for waitpid)."""
    process = multiprocessing.get_context("fork").Process(
        target=quick_exit_process, name="EngineCore"
    )
    process.start()
    monitor = threading.Thread(target=os.waitpid, args=(process.pid, 0))
    monitor.start()
    monitor.join(10)
    vllm.v1.engine.utils.shutdown([process], timeout=2)


def test_a_process_reaped_by_another_thread_is_not_killed(caplog):
    REGISTRY.apply("platform")
    stop_process_reaped_elsewhere()
    assert "force killing" not in caplog.text


def test_without_the_patch_a_reaped_process_is_killed(caplog):
    REGISTRY.apply("platform")
    with REGISTRY.reverted(PATCH.name):
        stop_process_reaped_elsewhere()
    assert "force killing remaining process EngineCore" in caplog.text


def test_a_process_still_running_after_the_timeout_is_killed(caplog):
    REGISTRY.apply("platform")
    process = multiprocessing.get_context("fork").Process(
        target=slow_teardown_process, name="EngineCore"
    )
    process.start()
    time.sleep(0.5)
    vllm.v1.engine.utils.shutdown([process], timeout=1)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL
    assert "force killing remaining process EngineCore" in caplog.text
