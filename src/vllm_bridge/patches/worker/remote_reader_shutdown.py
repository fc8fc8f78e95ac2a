"""Let a worker whose engine core is on another node leave when its node
shuts down, instead of waiting to be killed."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

# How often an idle remote reader looks at its queue's shutdown flag. A
# message wakes it at once; this only bounds how late it sees a shutdown.
IDLE_POLL_MS = 100


def waking_on_shutdown(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def dequeue(queue: Any, timeout: float | None = None, indefinite: bool = False):
        if queue._is_local_reader or not queue._is_remote_reader:
            return original(queue, timeout, indefinite)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_ms = IDLE_POLL_MS
            if deadline is not None:
                left_ms = int((deadline - time.monotonic()) * 1000)
                wait_ms = min(wait_ms, max(0, left_ms))
            if queue.remote_socket.poll(timeout=wait_ms):
                return original(queue, 0, indefinite)
            if queue.shutting_down:
                # what vLLM's shared-memory readers raise when shut down
                raise RuntimeError("cancelled")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError

    return dequeue


PATCH = Patch(
    name="remote-reader-shutdown",
    target="vllm.distributed.device_communicators.shm_broadcast:MessageQueue.dequeue",
    stage="worker",
    kind="wrap",
    new=waking_on_shutdown,
    why=(
        "A worker on a node without the engine core (vllm serve --headless, "
        "--nnodes > 1) reads the engine core's requests from a ZeroMQ socket "
        "and waits on it with no timeout. When its node shuts down, vLLM "
        "tells the worker's queues to stop (MessageQueue.shutdown), which "
        "wakes only shared-memory readers, and marks the shutdown as under "
        "way, so the worker's SIGTERM handler no longer raises: the worker "
        "stayed in its wait until vLLM killed it with SIGKILL after 9 s "
        "(every headless node's stop; the kill leaked its semaphores)."
    ),
    how=(
        "A remote reader's dequeue waits on its socket in slices of "
        f"{IDLE_POLL_MS} ms (a message ends the wait at once) and, once its "
        "queue is shut down, raises what vLLM's shared-memory readers raise "
        "(RuntimeError('cancelled')), so the worker leaves its loop and "
        "shuts down as the workers on the engine core's node do. Timeouts "
        "keep their meaning; local readers are untouched."
    ),
    upstream=(
        "https://github.com/vllm-project/vllm/pull/28053 (merged: wakes idle "
        "shared-memory readers on shutdown; remote readers not covered)"
    ),
    remove_when="vLLM's MessageQueue.shutdown wakes a remote reader",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="b428215d85396e41",
)
