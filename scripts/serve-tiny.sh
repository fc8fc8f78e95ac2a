#!/usr/bin/env bash
# Set up (idempotent), build the tiny test model (idempotent) and serve it
# with `vllm serve` on localhost, vllm-bridge active. PORT overrides 8000.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=.cache/models/tiny-float32
PORT=${PORT:-8000}
export VLLM_CACHE_ROOT="$PWD/.cache/vllm"
export HF_HUB_OFFLINE=1
bash scripts/setup.sh

.venv/bin/python -m vllm_bridge_testmodel --preset tiny --dtype float32 --out "$MODEL"

cat <<EOT
Serving $MODEL on http://127.0.0.1:$PORT once "Application startup complete" shows. Query it with:
  curl http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \\
       -d '{"model": "$MODEL", "prompt": "Hello world", "max_tokens": 16}'
Stop with Ctrl-C.
EOT
exec .venv/bin/vllm serve "$MODEL" --host 127.0.0.1 --port "$PORT"
