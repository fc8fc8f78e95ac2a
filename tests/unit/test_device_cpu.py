"""Cores, memory and the AMX permission request. The request runs in a fresh
process each time (the permission is per process and cannot be dropped once
granted), and is checked for the ISA class this machine has."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vllm_bridge.device import cpu, isa

CHECK = (
    "from vllm_bridge.device import cpu; "
    "before = cpu.amx_tile_permitted(); "
    "granted = cpu.request_amx_permission(); "
    "print(before, granted, cpu.amx_tile_permitted())"
)


def amx_request_in_fresh_process(**env: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", CHECK],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    ).stdout.split()


def test_amx_permission_is_requested_exactly_on_amx_cpus():
    # the class a fresh process runs as: this CPU's, or VLLM_BRIDGE_ISA's
    effective = isa.detect().effective
    before, granted, after = amx_request_in_fresh_process()
    if effective == "amx":
        assert (before, granted, after) == ("False", "True", "True")
    else:
        # not asked: nothing to grant, and the kernel's state is unchanged
        assert granted == "False" and after == before


def test_no_amx_permission_under_the_avx2_switch():
    if {"avx2", "fma"} - isa.cpu_flags():
        pytest.skip("the ISA switch needs an x86-64 CPU with AVX2")
    before, granted, after = amx_request_in_fresh_process(VLLM_BRIDGE_ISA="avx2")
    assert granted == "False" and after == before


def test_physical_cores_are_among_allowed_cpus():
    allowed = cpu.allowed_cpus()
    cores = cpu.physical_cores(allowed)
    assert cores and set(cores) <= set(allowed)


def test_available_memory_is_positive_and_below_total():
    import psutil

    assert 0 < cpu.available_memory_bytes() <= psutil.virtual_memory().total
