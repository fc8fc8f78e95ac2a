"""Shared fixtures: the tiny model (built by the repo, no hub) and the
Hugging Face reference tokens it is checked against."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from vllm_bridge import envs
from vllm_bridge.device import isa
from vllm_bridge_testmodel import build_model

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / ".cache" / "models"
VENV_BIN = Path(sys.executable).parent

PROMPTS = [
    "Hello world",
    "The cat sat on the mat because",
    "In 1984 the committee decided",
    "Numbers: 1, 2, 3, 4,",
    "Once upon a time there was a small",
    "The quick brown fox",
    "Why is the sky blue? Because",
    "A list of things to do today:",
]
MAX_TOKENS = 32

# Parallel layouts the engine tests run: "pp2" (tests/engine/test_llm_parallel.py,
# one machine) and "nodes2" (tests/engine/test_serve_two_nodes.py, two
# simulated hosts) by default; on request "tp2" (one machine, shared-memory
# all-reduce), which costs a third two-worker engine.
PARALLEL_LAYOUTS = os.environ.get("TEST_PARALLEL_LAYOUTS", "pp2,nodes2").split(",")


def child_environ(
    env: dict[str, str] | None = None, unset: Iterable[str] = ()
) -> dict[str, str]:
    """This process's environment for a child: ``unset`` removed, ``env``
    added."""
    removed = set(unset)
    return {
        **{name: value for name, value in os.environ.items() if name not in removed},
        **(env or {}),
    }


def short_temporary_directory() -> Path:
    """A fresh temporary directory for a child's TMPDIR, to see what it
    leaves there; short, as Unix socket paths below it hold 107 bytes."""
    return Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))


def ipc_files_left(directory: Path) -> list[str]:
    """What vLLM's processes left in a temporary directory: IPC sockets, or
    a directory that holds them (patch ipc-socket-directory's vb-ipc-*)."""
    return sorted(
        path.name
        for path in directory.iterdir()
        if path.is_socket() or "ipc" in path.name
    )


def signal_thread(pid: int, tid: int, signum: int) -> None:
    """Send ``signum`` to thread ``tid`` of process ``pid`` (tgkill; Python
    offers it only within its own process), as the kernel may deliver a
    signal sent to the process."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {signum}) failed")


def run_venv_command(
    command: str,
    *args: str,
    env: dict[str, str] | None = None,
    unset: Iterable[str] = (),
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """Run one of the virtual environment's commands (`vllm`, `vllm-bridge`)
    as a user would, capturing its output."""
    return subprocess.run(
        [str(VENV_BIN / command), *args],
        env=child_environ(env, unset),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return build_model("tiny", MODELS / "tiny-float32", dtype="float32")


@pytest.fixture(scope="session")
def hf_greedy(tiny_model: Path) -> list[list[int]]:
    """Greedy tokens from Hugging Face transformers on the same float32
    weights: the independent reference for the engine's output."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    tokens = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            out = model.generate(
                ids,
                max_new_tokens=MAX_TOKENS,
                min_new_tokens=MAX_TOKENS,
                do_sample=False,
            )
            tokens.append(out[0, ids.shape[1] :].tolist())
    return tokens


@pytest.fixture(scope="module", autouse=True)
def module_environ() -> Iterator[None]:
    """Config rules set environment variables in the process that builds
    the config, for the workers it starts (e.g. VLLM_BRIDGE_INT8_KERNEL): an
    engine module's must not reach the next module in the same xdist worker
    (the doctor's settings line then named one)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def restore_environ():
    """Config rules set environment variables meant for worker processes;
    undo them after each test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


AVX2_MACHINE = {"avx2", "fma"} <= isa.cpu_flags()


@pytest.fixture
def as_isa(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run as on an AVX2 CPU (VLLM_BRIDGE_ISA=avx2): what the rules and the
    dtype patch read. Needs an x86-64 CPU with AVX2."""
    if not AVX2_MACHINE:
        pytest.skip("the ISA switch needs an x86-64 CPU with AVX2")
    monkeypatch.setenv(envs.ISA.name, "avx2")
    monkeypatch.delenv(envs.LINEAR_KERNEL.name, raising=False)
    isa.detect.cache_clear()
    yield
    isa.detect.cache_clear()


# Test files that start engines on the same compiled graph (same model,
# dtype and compile sizes): one xdist worker runs them in turn, in
# collection order, so the first compiles and the others load its graph
# from vLLM's compile cache (scripts/test.sh distributes by file).
SHARED_COMPILE_SCOPES = {
    "tests/engine/test_llm_compiled.py": "compiled-tiny-float32",
    "tests/engine/test_serve.py": "compiled-tiny-float32",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Engine test files first (each starts engines: 15-100 s a file), unit
    files after them: the two xdist workers then share out the long files
    first and end on short ones, rather than one of them waiting for the
    other's last engine. The sort is stable: each file's tests, and the files
    of a shared compile scope, keep their order."""
    items.sort(key=lambda item: item.get_closest_marker("engine") is None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """With `--dist loadfile`: a file's tests stay in one process (one
    engine per module), and the files of a shared compile scope too. (The
    `xdist_group` mark does not group with pytest 9: the node-id suffix it
    relies on no longer takes.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # Files in collection order (engine files first, see below), not
    # pytest-xdist's order by number of tests, which put the engine files
    # with few tests last.
    config.option.loadscopereorder = False

    class SharedCompileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return SHARED_COMPILE_SCOPES.get(file, file)

    return SharedCompileScheduling(config, log)
