"""The leader watch of patch headless-leader-watch against a real TCP
listener standing for the leader's torch.distributed store. The engine
test (a killed leader node; the headless node exits 1) is
tests/engine/test_serve_two_nodes.py."""

from __future__ import annotations

import socket
import threading
import time

from vllm_bridge.patches.platform.headless_leader_watch import (
    FAILED_PROBES,
    PROBE_INTERVAL_S,
    LeaderWatch,
)


def listener() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))
    return server, server.getsockname()[1]


def test_a_leader_that_answers_is_not_lost():
    server, port = listener()
    lost = threading.Event()
    watch = LeaderWatch("127.0.0.1", port, on_lost=lost.set)
    watch.start()
    try:
        assert not lost.wait(PROBE_INTERVAL_S * (FAILED_PROBES + 1))
        assert watch.lost_reason is None
    finally:
        watch.stopped.set()
        server.close()
    watch.join(5)
    assert not watch.is_alive()


def test_a_leader_gone_for_several_probes_is_lost(caplog):
    server, port = listener()
    lost = threading.Event()
    watch = LeaderWatch("127.0.0.1", port, on_lost=lost.set)
    watch.start()
    time.sleep(PROBE_INTERVAL_S * 1.5)
    server.close()
    closed_at = time.monotonic()
    assert lost.wait(PROBE_INTERVAL_S * (FAILED_PROBES + 3))
    # not at the first refused probe
    assert time.monotonic() - closed_at >= PROBE_INTERVAL_S * (FAILED_PROBES - 1)
    assert "ConnectionRefusedError" in (watch.lost_reason or "")
    assert f"store at 127.0.0.1:{port} no longer answers" in caplog.text
