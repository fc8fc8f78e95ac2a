"""The platform-stage patch that keeps vLLM's IPC socket files out of the
temporary directory: real processes (a spawned child binding a real ZeroMQ
socket at vLLM's own IPC address and leaving it behind, as vLLM's processes
do), in a temporary directory of the test's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.unit.ipc_leaker import ADDRESS_PREFIX
from vllm_bridge.patches.platform import ipc_socket_directory


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (pytest's are too long for a
    Unix socket two levels below them)."""
    directory = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run_leaker(tmp_path: Path, **env: str) -> Path:
    """The socket path the leaker's child bound, after the leaker exited."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.ipc_leaker"],
        cwd=REPO,
        env={
            **{k: v for k, v in os.environ.items() if k != "VLLM_RPC_BASE_PATH"},
            "TMPDIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith(ADDRESS_PREFIX)]
    return Path(line.removeprefix(ADDRESS_PREFIX).removeprefix("ipc://"))


def test_the_sockets_go_with_the_process_that_made_their_directory(short_tmp: Path):
    socket = run_leaker(short_tmp)
    assert socket.parent.parent == short_tmp
    assert socket.parent.name.startswith("vb-ipc-")
    assert not socket.parent.exists()
    # (torch leaves its torchinductor_<user> directory there)
    left = [p for p in short_tmp.iterdir() if p.is_socket() or "ipc" in p.name]
    assert left == []


def test_without_the_patch_the_socket_file_stays(short_tmp: Path):
    socket = run_leaker(short_tmp, VLLM_BRIDGE_DISABLE_PATCHES="ipc-socket-directory")
    assert socket.parent == short_tmp
    assert socket.is_socket()


def test_a_base_path_you_set_is_kept(short_tmp: Path):
    chosen = short_tmp / "chosen"
    chosen.mkdir()
    socket = run_leaker(short_tmp, VLLM_RPC_BASE_PATH=str(chosen))
    assert socket.parent == chosen
    assert chosen.is_dir()


def test_a_temporary_directory_too_deep_for_sockets_keeps_vllms_default(
    tmp_path: Path, monkeypatch
):
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.delenv(ipc_socket_directory.BASE_PATH_ENV, raising=False)
    ipc_socket_directory.install()
    assert ipc_socket_directory.BASE_PATH_ENV not in os.environ
    assert list(deep.iterdir()) == []
