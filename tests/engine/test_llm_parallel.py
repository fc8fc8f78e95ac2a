"""LLM(model=tiny) with two workers at defaults (eager): the same greedy
tokens as Hugging Face transformers (float32), each worker on cores of its
own, the memory node of its cores, and the communicator this machine's
kernel library offers.

The suite runs the pipeline-parallel layout, which depends on both of
vllm-bridge's parts below; the tensor-parallel one (same binding, vLLM's
shared-memory all-reduce) runs with TEST_PARALLEL_LAYOUTS=pp2,nodes2,tp2
(docs/distributed.md): a second two-worker engine costs the suite 30 s of
its 8-minute budget, where TP=2 already runs on Ray (test_serve_ray.py).

On a machine with fewer NUMA nodes than workers vLLM's automatic binding
refuses to start ("Not enough allowed NUMA nodes"): rule rank_binding gives
each worker its own cores. Pipeline parallelism in eager mode failed at the
first step of the second stage until BridgeWorker allocated its receive
buffers. The script stops its engine core with a SIGTERM to one of the
engine core's side threads, then ends."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    PARALLEL_LAYOUTS,
    ipc_files_left,
    short_temporary_directory,
)
from tests.engine.llm_support import generate_in_subprocess
from vllm_bridge.config.parallel_rules import THREADS_BIND_ENV
from vllm_bridge.device import cpu

pytestmark = pytest.mark.engine
LAYOUTS = {
    "tp2": {"tensor_parallel_size": 2},
    "pp2": {"pipeline_parallel_size": 2},
}
# "nodes2" is tests/engine/test_serve_two_nodes.py's
CHOSEN = [layout for layout in PARALLEL_LAYOUTS if layout in LAYOUTS]


@pytest.fixture(scope="module", params=CHOSEN)
def run(request: pytest.FixtureRequest, tiny_model: Path) -> Iterator[tuple[str, dict]]:
    layout = request.param
    temporary = short_temporary_directory()
    # An engine this test process ran earlier (module-scoped LLM fixtures)
    # left its one-worker binding in os.environ; a user starting a fresh
    # process has none.
    result = generate_in_subprocess(
        tiny_model,
        eager=True,
        llm_kwargs=LAYOUTS[layout],
        unset=(THREADS_BIND_ENV, "GOMP_SPINCOUNT", "VLLM_RPC_BASE_PATH"),
        sigterm_side_thread=True,
        TMPDIR=str(temporary),
    )
    result["left_in_tmpdir"] = ipc_files_left(temporary)
    shutil.rmtree(temporary, ignore_errors=True)
    yield layout, result


def test_the_script_leaves_no_ipc_socket_files(run):
    # 9 socket files per PP=2 script without patch ipc-socket-directory
    _, result = run
    assert result["left_in_tmpdir"] == []


def test_greedy_tokens_match_transformers(run, hf_greedy):
    _, result = run
    assert result["tokens"] == hf_greedy


def test_each_worker_has_its_own_cores_and_their_memory_node(run):
    layout, result = run
    reports = result["reports"]
    assert [r["rank"] for r in reports] == [0, 1]
    stage = "tp_rank" if layout == "tp2" else "pp_rank"
    assert [r[stage] for r in reports] == [0, 1]
    first, second = (set(r["affinity"]) for r in reports)
    assert first and second and not first & second
    for report in reports:
        assert report["affinity"] == cpu.rank_cpus(
            report["threads_bind_env"], report["local_rank"]
        )
        assert report["memory_node"] == cpu.numa_node_of(report["affinity"][0])
        assert report["omp_threads"] == len(report["affinity"])


def test_tensor_parallel_collectives_use_shared_memory_where_offered(run):
    layout, result = run
    for report in result["reports"]:
        if layout == "pp2":
            assert report["tp_communicator"] == "none (one worker)"
        elif report["shm_collectives_available"]:
            assert report["tp_communicator"] == "shared memory"
        else:
            assert report["tp_communicator"] == "torch.distributed (gloo)"


def test_a_sigterm_on_a_side_thread_of_the_engine_core_stops_it(run):
    """The kernel may run a process's SIGTERM on any thread that does not
    block it; Python's handler then waits for the main thread, which an
    idle engine core parks on its input queue. Without patch
    engine-core-signal-wakeup the engine core is still running 60 s later
    (run); with a second such script beside it, 3 of its 24 stops went
    that way (force-killed after 45 s)."""
    _, result = run
    stop = result["side_thread_sigterm"]
    assert stop["stopped_after_s"] is not None, (stop, result["log_tail"])
    assert "EngineCore: trigger received signal=SIGTERM" in result["log_tail"]


def test_the_script_ends_without_force_killing_its_engine_core(run):
    """An LLM(...) script's exit: the engine core stops both workers and
    exits by itself (patch engine-core-exit-grace; its deterministic test is
    tests/unit/test_engine_core_exit_grace.py)."""
    _, result = run
    assert not result["force_killed"], result["log_tail"]
