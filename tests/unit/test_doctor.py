"""`vllm-bridge doctor`: its report (one run of the installed command,
snapshotted with this machine's facts masked) and each check's findings as
function calls, per ISA class."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import run_venv_command
from tests.snapshots import assert_matches_snapshot
from vllm_bridge import envs
from vllm_bridge.device import isa
from vllm_bridge.ops import native
from vllm_bridge.startup import ISA_CAP_ENV
from vllm_bridge.tools import cli, doctor

AVX2_MACHINE = {"avx2", "fma"} <= isa.cpu_flags()
# Checks whose details are facts of the machine (sizes, core ids, libraries
# found): the snapshot keeps their level and name only.
MACHINE_FACTS = ("memory", "cores", "Intel OpenMP", "tcmalloc")


def _mask(stdout: str) -> str:
    lines: list[str] = []
    masked = False
    for line in stdout.replace(sys.prefix, "<VENV>").splitlines():
        level, _, rest = line.partition("  ")
        check = rest.strip().partition(":")[0]
        if line.startswith("       fix: ") and masked:
            continue
        masked = check in MACHINE_FACTS
        if masked:
            line = f"{level}  {rest.strip().partition(':')[0]}: <machine fact>"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    text = re.sub(r"on a CPU of class \w+", "on a CPU of class <NATIVE>", text)
    return text.replace(str(native.KERNELS.build_directory()), "<KERNEL_DIRECTORY>")


@pytest.mark.skipif(not AVX2_MACHINE, reason="the ISA switch needs x86-64 with AVX2")
def test_doctor_command_report_as_an_avx2_cpu():
    proc = run_venv_command(
        "vllm-bridge",
        "doctor",
        env={envs.ISA.name: "avx2"},
        # a fresh shell: none of what the switch or an in-process engine of
        # this test process set
        unset=(
            "LD_PRELOAD",
            "VLLM_BRIDGE_STRICT",
            "VLLM_BRIDGE_KV_CACHE_SHARE",
            envs.LINEAR_KERNEL.name,
            *ISA_CAP_ENV["avx2"],
        ),
    )
    # AVX2 findings are warnings, not errors: the command still succeeds
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert_matches_snapshot("doctor_avx2.txt", _mask(proc.stdout))


def test_doctor_command_exits_1_on_an_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("VLLM_BRIDGE_KV_CACHE_SHARE", "lots")
    result = CliRunner().invoke(cli.app, ["doctor"])
    assert result.exit_code == 1
    assert "error  settings: VLLM_BRIDGE_KV_CACHE_SHARE='lots' is invalid" in (
        result.stdout
    )


@pytest.fixture
def as_isa(monkeypatch: pytest.MonkeyPatch):
    def switch(value: str) -> None:
        monkeypatch.setenv(envs.ISA.name, value)
        isa.detect.cache_clear()

    yield switch
    isa.detect.cache_clear()


def test_isa_finding_on_this_cpu(as_isa):
    as_isa("auto")
    findings = doctor.check_isa()
    native = isa.detect().native
    assert findings[0].level == doctor.ISA_FINDINGS[native][0]
    assert findings[0].detail.startswith(isa.detect().describe())
    assert "{" not in findings[0].detail  # every measured figure filled in


@pytest.mark.skipif(not AVX2_MACHINE, reason="the ISA switch needs x86-64 with AVX2")
@pytest.mark.parametrize("isa_class", ["avx2", "avx512"])
def test_classes_without_bf16_arithmetic_are_warned_with_figures(as_isa, isa_class):
    if isa_class not in isa.switch_choices(isa.classify("x86_64", isa.cpu_flags())):
        pytest.skip(f"this CPU cannot run as {isa_class}")
    as_isa(isa_class)
    cpu_isa, kernel = doctor.check_isa()
    assert cpu_isa.level == "warn"
    assert "no bf16 arithmetic" in cpu_isa.detail
    assert re.search(r"\d+\.\d (tok/s|GFLOP/s)", cpu_isa.detail)  # a measured figure
    assert "AVX-512-BF16 or AMX" in cpu_isa.fix
    assert (kernel.check, kernel.level) == ("bf16 kernel", "ok")


def test_unavailable_kernel_is_a_warning_with_the_fix(as_isa, monkeypatch):
    from vllm_bridge.ops import linear, native

    # Mocked: the kernel builds on this machine; a machine without a compiler
    # cannot be made here.
    monkeypatch.setattr(linear, "available", lambda: False)
    monkeypatch.setattr(
        native, "load", lambda: native.LoadResult(False, "g++: not found")
    )
    finding = doctor.check_bridge_kernel()
    assert finding.level == "warn"
    assert "g++: not found" in finding.detail and "float32" in finding.detail
    assert "install g++" in finding.fix


def test_a_torchvision_that_cannot_load_is_an_error(tmp_path: Path, monkeypatch):
    # A real package on the path whose import fails the way PyPI's
    # torchvision fails beside this torch.
    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    metadata = tmp_path / "torchvision-0.29.1.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.29.1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    findings = {f.check: f for f in doctor.check_torch_extensions()}
    torchvision = findings["torchvision"]
    assert torchvision.level == "error"
    assert "torchvision 0.29.1 does not load" in torchvision.detail
    assert "torchvision::nms does not exist" in torchvision.detail
    assert torchvision.fix == "pip uninstall -y torchvision"


def test_a_bad_setting_is_an_error(monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_KV_CACHE_SHARE", "lots")
    finding = doctor.check_settings()
    assert finding.level == "error"
    assert "VLLM_BRIDGE_KV_CACHE_SHARE='lots' is invalid" in finding.detail


def test_a_ray_other_than_the_extras_pin_is_a_warning(tmp_path: Path, monkeypatch):
    # A real distribution found first on the path, as an older Ray would be.
    metadata = tmp_path / "ray-2.40.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ray\nVersion: 2.40.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    finding = doctor.check_ray()
    assert finding.level == "warn"
    assert "ray 2.40.0 is not the release vllm-bridge is tested with (ray==" in (
        finding.detail
    )
    assert finding.fix == "pip install 'vllm-bridge[ray]'"


@pytest.mark.parametrize("installed", [False, True])
def test_tcmalloc_is_optional_with_its_measured_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: bool
):
    library = tmp_path / "libtcmalloc_minimal.so.4"
    if installed:
        library.touch()
    monkeypatch.setattr(doctor, "TCMALLOC_PATHS", (str(library),))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    (finding,) = [f for f in doctor.check_preloads() if f.check == "tcmalloc"]
    assert finding.level == "info"
    assert "start-up 1 s shorter" in finding.detail
    assert "within run-to-run noise" in finding.detail
    assert finding.fix == (
        f"LD_PRELOAD={library}"
        if installed
        else "apt install libtcmalloc-minimal4, then set LD_PRELOAD to it"
    )
    monkeypatch.setenv("LD_PRELOAD", str(library))
    (preloaded,) = [f for f in doctor.check_preloads() if f.check == "tcmalloc"]
    assert (preloaded.level, preloaded.detail) == (
        ("ok", f"{library} is preloaded")
        if installed
        else (finding.level, finding.detail)
    )
