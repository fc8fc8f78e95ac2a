#!/usr/bin/env bash
# Set up (idempotent), lint, and run the whole test suite. Extra arguments go
# to pytest (e.g. `bash scripts/test.sh tests/unit -x`, or `-n 0` for one
# process).
set -euo pipefail
cd "$(dirname "$0")/.."
# vLLM's compile cache, vllm-bridge's kernels and the models the tests
# build stay inside the checkout.
export VLLM_CACHE_ROOT="$PWD/.cache/vllm"
export HF_HUB_OFFLINE=1
# The ray extra: the suite serves on a local Ray cluster too.
bash scripts/setup.sh ray

.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
# Two test files at a time (each file's tests stay in one process, so one
# engine serves a module; files that share a compiled graph run in turn,
# see tests/conftest.py): an engine start is mostly single-threaded
# (imports, dynamo, inductor), so two of them fill two cores. `-n 0` after
# this runs everything in one process.
exec .venv/bin/python -m pytest -n 2 --dist loadfile --durations=25 "$@"
