"""vllm-bridge's own C++ kernels: built once per machine and torch version,
loaded into the processes that run models.

The library is compiled with PyTorch's extension builder (g++ and ninja, both
present where vLLM's CPU build runs) into a cache directory keyed by the
sources, the flags and the torch version, so that a second build is a no-op.
``scripts/setup.sh`` builds it ahead (``python -m vllm_bridge.ops.native``);
a worker that finds it missing builds it at start (about 30 s, logged).
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vllm_bridge.log import get_logger

logger = get_logger("ops")

LIBRARY = "vllm_bridge_kernels"
SOURCES = (Path(__file__).parent / "csrc" / "linear_avx2.cpp",)
# The library is AVX2/FMA code only: the loader is asked for it only on CPUs
# that have both (see device.isa).
CFLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-DNDEBUG")
LDFLAGS = ("-fopenmp",)


@dataclass(frozen=True)
class LoadResult:
    loaded: bool
    detail: str


def build_directory() -> Path:
    import torch

    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.read_bytes())
    digest.update(" ".join(CFLAGS + LDFLAGS).encode())
    digest.update(torch.__version__.encode())
    cache_root = Path(
        os.environ.get("VLLM_CACHE_ROOT", Path.home() / ".cache" / "vllm")
    ).expanduser()
    return cache_root / "vllm_bridge" / "kernels" / digest.hexdigest()[:16]


def build_and_load(
    directory: Path, name: str = LIBRARY, sources: tuple[Path, ...] = SOURCES
) -> None:
    """Compile ``sources`` with the kernel flags into ``directory`` (a no-op
    when built) and load the library as ``name``."""
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    # PyTorch's builder runs `ninja` from PATH; the venv that holds torch
    # has one (a vLLM dependency) even when the shell's PATH does not.
    venv_bin = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if venv_bin not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([venv_bin, path]) if path else venv_bin
    cpp_extension.load(
        name=name,
        sources=[str(source) for source in sources],
        extra_cflags=list(CFLAGS),
        extra_ldflags=list(LDFLAGS),
        build_directory=str(directory),
        is_python_module=False,
        verbose=False,
    )


@cache
def load() -> LoadResult:
    """Build (if needed) and load the library into this process, once."""
    directory = build_directory()
    built = (directory / f"{LIBRARY}.so").exists()
    if not built:
        logger.info("Building vllm-bridge's C++ kernels in %s (once).", directory)
    try:
        build_and_load(directory)
    except Exception as exc:  # no compiler, no headers: vLLM's kernels remain
        detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}"
        logger.warning("vllm-bridge's C++ kernels are unavailable: %s", detail)
        return LoadResult(False, detail)
    return LoadResult(True, str(directory / f"{LIBRARY}.so"))


def main() -> None:
    result = load()
    print(("built and loaded: " if result.loaded else "not built: ") + result.detail)
    sys.exit(0 if result.loaded else 1)


if __name__ == "__main__":
    main()
