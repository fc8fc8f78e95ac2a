"""CPU facts and the AMX permission request, in a fresh process each time
(the permission is per process and cannot be dropped once granted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vllm_bridge.device import cpu

CHECK = (
    "from vllm_bridge.device import cpu; "
    "before = cpu.amx_tile_permitted(); "
    "granted = cpu.request_amx_permission(); "
    "print(before, granted, cpu.amx_tile_permitted())"
)


@pytest.mark.skipif(not cpu.isa().amx_tile, reason="this CPU has no AMX")
def test_request_grants_amx_tile_permission_to_a_fresh_process():
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "True"]


def test_isa_description_names_the_machine():
    assert cpu.isa().describe().startswith(cpu.isa().machine)


def test_physical_cores_are_among_allowed_cpus():
    allowed = cpu.allowed_cpus()
    cores = cpu.physical_cores(allowed)
    assert cores and set(cores) <= set(allowed)


def test_available_memory_is_positive_and_below_total():
    import psutil

    assert 0 < cpu.available_memory_bytes() <= psutil.virtual_memory().total
