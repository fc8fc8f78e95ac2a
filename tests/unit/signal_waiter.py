"""A main thread that waits on a queue with no timeout, as vLLM's idle
engine core does, with a Python SIGTERM handler; with ``wakeup``, patch
engine-core-signal-wakeup's SignalWakeup puts a wake-up into the queue.

    python -m tests.unit.signal_waiter [wakeup]

Prints a side thread's native id, then, once the main thread wakes, the
signals its handler saw."""

from __future__ import annotations

import queue
import signal
import sys
import threading

from vllm_bridge.patches.platform.engine_core_signal_wakeup import SignalWakeup

if __name__ == "__main__":
    handled: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: handled.append(signum))
    requests: queue.Queue[str] = queue.Queue()
    if sys.argv[1:] == ["wakeup"]:
        assert SignalWakeup(lambda: requests.put_nowait("wake")).install()
    side = threading.Thread(target=threading.Event().wait, daemon=True)
    side.start()
    print(side.native_id, flush=True)
    requests.get()
    print("handled", handled, flush=True)
