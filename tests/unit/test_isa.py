"""The ISA class of a CPU from its flags, and the ISA switch's limits: pure
functions, checked for every class whatever this machine is."""

from __future__ import annotations

import pytest

from vllm_bridge.device import isa
from vllm_bridge.errors import BridgeConfigError

BASE = frozenset({"sse4_2", "avx", "f16c"})
AVX2 = BASE | {"avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}
AVX512_BF16 = AVX512 | {"avx512_bf16"}
AMX = AVX512_BF16 | {"amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize(
    ("machine", "flags", "expected"),
    [
        ("x86_64", BASE, "x86_64_baseline"),
        ("x86_64", AVX2, "avx2"),  # AMD Zen 2/3, Intel Haswell to Comet Lake
        ("x86_64", AVX2 | {"avx512f"}, "avx2"),  # incomplete AVX-512
        ("x86_64", AVX512, "avx512"),  # Skylake-SP, Cascade Lake, Ice Lake
        ("x86_64", AVX512_BF16, "avx512_bf16"),  # Cooper Lake, Zen 4/5
        ("x86_64", AMX, "amx"),  # Sapphire Rapids and later
        ("x86_64", AVX512_BF16 | {"amx_tile"}, "avx512_bf16"),  # tiles without bf16
        ("aarch64", frozenset({"asimd", "bf16"}), "other"),
    ],
)
def test_classify(machine: str, flags: frozenset[str], expected: str):
    assert isa.classify(machine, flags) == expected


@pytest.mark.parametrize(
    ("native", "asked", "effective"),
    [
        ("amx", "auto", "amx"),
        ("amx", "avx2", "avx2"),
        ("amx", "avx512", "avx512"),
        ("amx", "amx", "amx"),
        ("avx512_bf16", "avx512", "avx512"),
        ("avx2", "avx2", "avx2"),
        ("other", "auto", "other"),
    ],
)
def test_switch_lowers_the_class(native, asked, effective):
    assert isa.capped(native, asked) == effective


@pytest.mark.parametrize(
    ("native", "asked", "allowed"),
    [
        ("avx2", "avx512", "auto, avx2"),
        ("avx512", "amx", "auto, avx2, avx512"),
        ("other", "avx2", "auto."),
    ],
)
def test_switch_refuses_a_higher_class_and_names_what_is_allowed(
    native, asked, allowed
):
    with pytest.raises(BridgeConfigError) as info:
        isa.capped(native, asked)
    message = str(info.value)
    assert f"VLLM_BRIDGE_ISA={asked} cannot run on this CPU (class {native})" in (
        message
    )
    assert f"Allowed here: {allowed}" in message


def test_has_orders_the_x86_classes():
    cpu = isa.CpuIsa("x86_64", "amx", "avx512", AMX)
    assert cpu.switched
    assert cpu.has("avx2") and cpu.has("avx512")
    assert not cpu.has("avx512_bf16") and not cpu.has("amx")
    assert cpu.traits.vllm_kernel_library == "vllm._C_AVX512"
    assert "VLLM_BRIDGE_ISA on a CPU of class amx" in cpu.describe()


def test_detect_reads_the_switch(monkeypatch):
    native = isa.classify(isa.platform.machine(), isa.cpu_flags())
    if native not in isa.X86_CLASSES[1:]:
        pytest.skip(f"the switch needs an x86-64 CPU with AVX2; this one is {native}")
    monkeypatch.setenv("VLLM_BRIDGE_ISA", "avx2")
    isa.detect.cache_clear()
    try:
        detected = isa.detect()
        assert (detected.native, detected.effective) == (native, "avx2")
    finally:
        isa.detect.cache_clear()
