"""Patch engine-core-signal-wakeup: a SIGTERM whose C-level handler runs on
a thread other than the main one still reaches a main thread that waits on
a queue. Its engine test: tests/engine/test_llm_parallel.py (a real engine
core, SIGTERM on one of its side threads).

The signal goes to one chosen thread (tgkill) to make deterministic what
the kernel does now and then with a signal sent to the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO, signal_thread
from vllm_bridge.patches.platform.engine_core_signal_wakeup import SignalWakeup


def start_waiter(*args: str) -> tuple[subprocess.Popen, int]:
    waiter = subprocess.Popen(
        [sys.executable, "-m", "tests.unit.signal_waiter", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waiter.stdout is not None
    return waiter, int(waiter.stdout.readline())


def test_a_signal_on_a_side_thread_wakes_the_waiting_main_thread():
    waiter, side_thread = start_waiter("wakeup")
    signal_thread(waiter.pid, side_thread, signal.SIGTERM)
    out, _ = waiter.communicate(timeout=30)
    assert out.strip() == f"handled [{int(signal.SIGTERM)}]"
    assert waiter.returncode == 0


def test_without_it_the_main_thread_sleeps_through_the_signal():
    waiter, side_thread = start_waiter()
    signal_thread(waiter.pid, side_thread, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        waiter.communicate(timeout=3)
    waiter.kill()
    waiter.communicate()


def test_a_wakeup_fd_with_another_owner_is_left_alone():
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd)
    try:
        assert SignalWakeup(lambda: None).install() is False
        assert signal.set_wakeup_fd(write_fd) == write_fd
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
