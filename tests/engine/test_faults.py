"""A worker or the engine core killed (SIGKILL, as the OOM killer does)
while `vllm serve` streams: the in-flight requests fail with a message, and
the server exits with status 1 within 5 s so that a supervisor restarts it.

Each test kills its own server. The servers run eager: what a fault does to
the processes does not depend on the compile mode, and an eager start does
not wait for another test's compile of the same model (the compiled server
is tests/engine/test_serve.py's)."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ipc_files_left, short_temporary_directory
from tests.engine.server_support import InFlightStreams, Server, start_server
from vllm_bridge.patches.platform.engine_dead_message import ENGINE_DEAD_MESSAGE
from vllm_bridge.patches.platform.serve_shutdown_status import EXIT_MESSAGE

pytestmark = pytest.mark.engine

BOUND_S = 5.0
STREAMS = 3
# Long enough that every stream is still running when the process dies.
MAX_TOKENS = 1500
# vLLM's process titles (setproctitle).
TITLES = {"worker": "VLLM::Worker", "engine core": "VLLM::EngineCore"}
EAGER = ("--enforce-eager",)


def kill_while_streaming(
    server: Server, model: Path, victim: str
) -> tuple[int, float, list, list[psutil.Process]]:
    """Returns the exit status, the seconds from the kill to the exit, the
    stream outcomes and the server's child processes."""
    try:
        children = psutil.Process(server.process.pid).children(recursive=True)
        (target,) = [child for child in children if child.name() == TITLES[victim]]
        streams = InFlightStreams(server, model, STREAMS, MAX_TOKENS).start()
        killed_at = time.monotonic()
        target.send_signal(signal.SIGKILL)
        status = server.process.wait(timeout=60)
        exit_s = time.monotonic() - killed_at
        outcomes = [
            (outcome, outcome.ended_at - killed_at)
            for outcome in streams.join(timeout_s=60)
        ]
    finally:
        server.stop(signal.SIGKILL)
    return status, exit_s, outcomes, children


@pytest.mark.parametrize("victim", sorted(TITLES))
def test_killed_process_fails_the_requests_and_ends_serve_with_status_1(
    tiny_model: Path, tmp_path: Path, victim: str
):
    temporary = short_temporary_directory()
    server = start_server(
        tiny_model,
        tmp_path / "serve.log",
        *EAGER,
        env={"TMPDIR": str(temporary)},
        unset=("VLLM_RPC_BASE_PATH",),
    )
    status, exit_s, outcomes, children = kill_while_streaming(
        server, tiny_model, victim
    )
    log = server.log()
    assert status == 1, log[-3000:]
    assert exit_s < BOUND_S, log[-3000:]
    assert log.count(EXIT_MESSAGE) == 1, log[-3000:]
    for outcome, ended_s in outcomes:
        assert outcome.finish_reason != "length", outcome
        # patch engine-dead-message (vLLM: "... See stack trace (above) ...")
        assert outcome.error and ENGINE_DEAD_MESSAGE in outcome.error
        assert ended_s < BOUND_S, outcome
    # With the serve-shutdown-status patch switched off (its name in
    # VLLM_BRIDGE_DISABLE_PATCHES) vLLM exits 0 here, up to 5 s later.
    # Nothing of the server outlives it for long (the worker of a killed
    # engine core notices its parent's death by polling).
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [process.pid for process in alive]
    # the API server removes its runtime directory even after a crash below
    # it (not checked: the vllm_dist_<uuid> file of the workers'
    # torch.distributed store, which a killed engine core leaves;
    # docs/reliability.md)
    left = ipc_files_left(temporary)
    shutil.rmtree(temporary, ignore_errors=True)
    assert left == []


def test_sigterm_with_drain_off_aborts_the_streams_and_exits_0(
    tiny_model: Path, tmp_path: Path
):
    """vLLM's abort mode (what VLLM_BRIDGE_DRAIN_TIMEOUT=0 keeps): the
    streams end at once, marked aborted, instead of hanging the shutdown."""
    server = start_server(
        tiny_model,
        tmp_path / "serve.log",
        *EAGER,
        env={"VLLM_BRIDGE_DRAIN_TIMEOUT": "0"},
    )
    try:
        streams = InFlightStreams(server, tiny_model, STREAMS, MAX_TOKENS).start()
        signalled_at = time.monotonic()
        status = server.stop(signal.SIGTERM, timeout_s=60)
        exit_s = time.monotonic() - signalled_at
        outcomes = streams.join(timeout_s=60)
    finally:
        server.stop(signal.SIGKILL)
    log = server.log()
    assert status == 0, log[-3000:]
    assert exit_s < BOUND_S, log[-3000:]
    assert "mode=abort" in log
    for outcome in outcomes:
        assert (outcome.error, outcome.finish_reason) == (None, "abort"), outcome
        assert outcome.tokens < MAX_TOKENS
    assert "Traceback" not in log
    assert "ERROR" not in log
