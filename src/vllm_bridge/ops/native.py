"""vllm-bridge's own C++ libraries: built once per machine and torch version,
loaded into the processes that run models.

Each library is compiled with PyTorch's extension builder (g++ and ninja, both
present where vLLM's CPU build runs) into a cache directory keyed by the
sources, the flags and the torch version, so that a second build is a no-op.
``scripts/setup.sh`` builds them ahead (``python -m vllm_bridge.ops.native``);
a worker that finds one missing builds it at start (about 30 s, logged).
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vllm_bridge.device.isa import cpu_flags
from vllm_bridge.log import get_logger

logger = get_logger("ops")


@dataclass(frozen=True)
class NativeLibrary:
    name: str
    sources: tuple[Path, ...]
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    needs_flags: frozenset[str]
    """CPU flags the library's code needs: it is built only where all are."""

    def build_directory(self) -> Path:
        import torch

        digest = hashlib.sha256()
        for source in self.sources:
            digest.update(source.read_bytes())
        digest.update(" ".join(self.cflags + self.ldflags).encode())
        digest.update(torch.__version__.encode())
        cache_root = Path(
            os.environ.get("VLLM_CACHE_ROOT", Path.home() / ".cache" / "vllm")
        ).expanduser()
        return cache_root / "vllm_bridge" / "kernels" / digest.hexdigest()[:16]


KERNELS = NativeLibrary(
    name="vllm_bridge_kernels",
    sources=(Path(__file__).parent / "csrc" / "linear_avx2.cpp",),
    cflags=("-O3", "-mavx2", "-mfma", "-fopenmp", "-DNDEBUG"),
    ldflags=("-fopenmp",),
    needs_flags=frozenset({"avx2", "fma"}),
)
"""The linear kernels (ops/linear.py): AVX2/FMA code."""

ATTENTION_CALL = NativeLibrary(
    name="vllm_bridge_attention_call",
    sources=(Path(__file__).parents[1] / "attention" / "csrc" / "attention_call.cpp",),
    cflags=("-O3", "-DNDEBUG"),
    ldflags=(),
    needs_flags=frozenset(),
)
"""The attention call without Python (attention/direct_call.py): portable
C++ around vLLM's kernels, for every CPU."""

LIBRARIES = {"kernels": KERNELS, "attention-call": ATTENTION_CALL}


@dataclass(frozen=True)
class LoadResult:
    loaded: bool
    detail: str
    for_this_cpu: bool = True
    """False where the CPU lacks the flags the library's code needs."""


def build_and_load(
    directory: Path,
    name: str,
    sources: tuple[Path, ...],
    cflags: tuple[str, ...] = KERNELS.cflags,
    ldflags: tuple[str, ...] = KERNELS.ldflags,
) -> None:
    """Compile ``sources`` with ``cflags`` into ``directory`` (a no-op when
    built) and load the library as ``name``."""
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
        extra_cflags=list(cflags),
        extra_ldflags=list(ldflags),
        build_directory=str(directory),
        is_python_module=False,
        verbose=False,
    )


@cache
def load(library: NativeLibrary = KERNELS) -> LoadResult:
    """Build (if needed) and load ``library`` into this process, once."""
    missing = library.needs_flags - cpu_flags()
    if missing:
        return LoadResult(
            False, f"this CPU lacks {', '.join(sorted(missing))}", for_this_cpu=False
        )
    directory = library.build_directory()
    built = (directory / f"{library.name}.so").exists()
    if not built:
        logger.info("Building vllm-bridge's %s in %s (once).", library.name, directory)
    try:
        build_and_load(
            directory, library.name, library.sources, library.cflags, library.ldflags
        )
    except Exception as exc:  # no compiler, no headers: vLLM's code remains
        detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}"
        logger.warning("vllm-bridge's %s is unavailable: %s", library.name, detail)
        return LoadResult(False, detail)
    return LoadResult(True, str(directory / f"{library.name}.so"))


def main() -> None:
    """Build the libraries named as arguments (default: all), those this
    CPU can run; exit status 1 if one of them failed."""
    names = sys.argv[1:] or list(LIBRARIES)
    unknown = [name for name in names if name not in LIBRARIES]
    if unknown:
        choices = ", ".join(LIBRARIES)
        sys.exit(f"unknown library {', '.join(unknown)}: choose from {choices}")
    failed = False
    for name in names:
        result = load(LIBRARIES[name])
        if not result.for_this_cpu:
            print(f"{name}: not for this CPU ({result.detail})")
            continue
        state = "built and loaded" if result.loaded else "not built"
        print(f"{name}: {state}: {result.detail}")
        failed |= not result.loaded
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
