"""A headless node (`vllm serve --headless`, --nnodes > 1) stops when the
node that runs the engine core is gone, instead of waiting for it forever."""

from __future__ import annotations

import functools
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.log import get_logger
from vllm_bridge.patching.spec import Patch

logger = get_logger("headless_leader_watch")

PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0
# Consecutive failed probes before the leader counts as gone: a moment's
# refusal (a busy accept queue) is not a lost node.
FAILED_PROBES = 3


def stop_this_process() -> None:
    """The SIGTERM that vLLM's headless mode stops on."""
    os.kill(os.getpid(), signal.SIGTERM)


class LeaderWatch(threading.Thread):
    """Connects to the leader's torch.distributed store (master address and
    port, served by the first worker on the engine core's node) once a
    second; after FAILED_PROBES failures in a row, logs why and calls
    ``on_lost``."""

    def __init__(
        self, host: str, port: int, on_lost: Callable[[], None] = stop_this_process
    ) -> None:
        super().__init__(name="BridgeLeaderWatch", daemon=True)
        self.host, self.port, self.on_lost = host, port, on_lost
        self.lost_reason: str | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        failures = 0
        while not self.stopped.wait(PROBE_INTERVAL_S):
            problem = self.probe()
            if problem is None:
                failures = 0
                continue
            failures += 1
            if failures < FAILED_PROBES:
                continue
            self.lost_reason = problem
            logger.error(
                "vllm-bridge: lost the engine core's node: its torch.distributed "
                "store at %s:%d no longer answers (%s). This headless node "
                "cannot serve without it and stops with exit status 1, so "
                "that its supervisor restarts it to join the restarted "
                "engine core's node.",
                self.host,
                self.port,
                problem,
            )
            self.on_lost()
            return

    def probe(self) -> str | None:
        """None if the store accepts a connection, else why not."""
        try:
            with socket.create_connection(
                (self.host, self.port), timeout=PROBE_TIMEOUT_S
            ):
                return None
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"


def watching_the_leader(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start_worker_monitor(executor: Any, inline: bool = False) -> None:
        # inline: vLLM's headless mode, which blocks here on its workers
        if not inline:
            return original(executor, inline)
        config = executor.parallel_config
        watch = LeaderWatch(config.master_addr, config.master_port)
        watch.start()
        try:
            original(executor, inline)
        finally:
            watch.stopped.set()
            if watch.lost_reason is not None:
                raise SystemExit(1)

    return start_worker_monitor


PATCH = Patch(
    name="headless-leader-watch",
    target="vllm.v1.executor.multiproc_executor:MultiprocExecutor.start_worker_monitor",
    stage="platform",
    kind="wrap",
    new=watching_the_leader,
    why=(
        "A node started with --headless runs workers for an engine core on "
        "another node and watches only its own workers. When the engine "
        "core's node died (killed, crashed, powered off), the headless node "
        "stayed up forever: its workers wait for requests that never come, "
        "nothing is logged, and a supervisor sees a live process, so the "
        "node never restarts to join the restarted engine core's node."
    ),
    how=(
        "Once its workers are up, the headless node connects to the "
        "leader's torch.distributed store (--master-addr, --master-port, "
        "served by the first worker on the engine core's node) once a "
        f"second; after {FAILED_PROBES} failures in a row it logs an error "
        "that names the address and the cause, stops as on SIGTERM (its "
        "workers leave through patch remote-reader-shutdown) and exits "
        "with status 1. A node that is told to stop exits 0 as before."
    ),
    upstream="not reported yet (vLLM 0.32's run_headless watches only its workers)",
    remove_when="vLLM's headless mode stops when it loses the engine core's node",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="8389e972cb21882f",
)
