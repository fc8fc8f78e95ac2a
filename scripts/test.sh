#!/usr/bin/env bash
# Set up (idempotent), lint, and run the whole test suite. Extra arguments go
# to pytest (e.g. `bash scripts/test.sh tests/unit -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
# vLLM's compile cache, vllm-bridge's kernels and the models the tests
# build stay inside the checkout.
export VLLM_CACHE_ROOT="$PWD/.cache/vllm"
export HF_HUB_OFFLINE=1
bash scripts/setup.sh

.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
exec .venv/bin/python -m pytest "$@"
