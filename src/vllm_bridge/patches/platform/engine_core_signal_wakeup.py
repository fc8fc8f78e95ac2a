"""An engine-core process stops on SIGTERM (or SIGINT) whenever it arrives,
not only when it interrupts the main thread's wait for requests."""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.log import get_logger
from vllm_bridge.patching.spec import Patch

logger = get_logger("engine_core_signal_wakeup")


class SignalWakeup(threading.Thread):
    """Calls ``wake`` each time a signal with a Python handler arrives,
    whichever thread the kernel ran the signal on.

    Python runs signal handlers in the main thread only, between bytecodes;
    the C-level handler, which runs at once on any thread, writes the
    signal's number to the wake-up fd (``signal.set_wakeup_fd``). This
    thread reads that fd, so ``wake`` can end the main thread's wait and let
    the pending handler run.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__(name="BridgeSignalWakeup", daemon=True)
        self.wake = wake
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)

    def install(self) -> bool:
        """Take the process's wake-up fd and start reading it; False (and
        nothing changed) where another owner, e.g. an event loop, has it.
        Main thread only, as ``signal.set_wakeup_fd``."""
        previous = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        if previous != -1:
            signal.set_wakeup_fd(previous)
            os.close(self.read_fd)
            os.close(self.write_fd)
            return False
        self.start()
        return True

    def run(self) -> None:
        while os.read(self.read_fd, 64):
            self.wake()


def waking_on_signals(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _process_input_queue(engine_core: Any) -> None:
        # Installed at the first wait rather than at construction: vLLM
        # loads the platform plugin, and so this patch, while it builds the
        # engine core.
        if vars(engine_core).get("_bridge_signal_wakeup") is None:
            engine_core._bridge_signal_wakeup = install_wakeup(engine_core)
        original(engine_core)

    return _process_input_queue


def install_wakeup(engine_core: Any) -> bool:
    """Whether the engine core's busy loop now wakes on signals."""
    # A Ray actor's engine core may run off the main thread, where no
    # wake-up fd can be set; its stop does not go through signals.
    if threading.current_thread() is not threading.main_thread():
        return False
    from vllm.v1.engine import EngineCoreRequestType

    def wake() -> None:
        # What vLLM's own signal callback puts there: a no-op request that
        # ends the busy loop's wait on the input queue.
        engine_core.input_queue.put_nowait((EngineCoreRequestType.WAKEUP, None))

    installed = SignalWakeup(wake).install()
    if not installed:
        logger.debug("engine core: the wake-up fd is taken; not installed")
    return installed


PATCH = Patch(
    name="engine-core-signal-wakeup",
    target="vllm.v1.engine.core:EngineCoreProc._process_input_queue",
    stage="platform",
    kind="wrap",
    new=waking_on_signals,
    why=(
        "An idle engine core's main thread waits for requests on a queue "
        "with no timeout. Python runs a signal handler only in the main "
        "thread, between bytecodes: a SIGTERM whose C-level handler ran on "
        "another thread, or on the main thread just before it began that "
        "wait, leaves vLLM's handler pending while the main thread sleeps. "
        "The engine core then ignored its client's SIGTERM and was "
        "force-killed 45 s later with its workers, leaving their "
        "shared-memory segments (a PP=2 LLM(...) script: 3 of 24 stops "
        "with a second script running beside it; seen with gdb: SIGTERM "
        "tripped, main thread in sem_wait)."
    ),
    how=(
        "At the busy loop's first wait for requests (main thread), the "
        "process's signal wake-up fd is set to a pipe; a thread reads it and puts "
        "the no-op WAKEUP request vLLM's own signal callback uses into the "
        "input queue, so the main thread wakes and runs the pending "
        "handler. Not installed where the wake-up fd already has an owner."
    ),
    upstream=(
        "not reported yet (vLLM 0.32's EngineCoreProc._process_input_queue "
        "blocks on input_queue.get() with no timeout; vllm-project/vllm#52299 "
        "covered a signal during construction only)"
    ),
    remove_when=(
        "vLLM's engine core wakes its busy loop from a signal wake-up fd or "
        "waits on its input queue with a timeout"
    ),
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="e3f6aa10d4b6e2e5",
)
