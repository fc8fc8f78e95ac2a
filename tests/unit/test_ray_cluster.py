"""Joining or starting the Ray cluster for CPU workers: where no Ray cluster
runs, vLLM's own set-up (patched by ray-cpu-worker-slots) starts one that
declares this machine's worker slots, and gets its placement group at once.
Without the patch vLLM's cluster declares none and vLLM waits for the
placement group (30 minutes), so the script below times out."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vllm_bridge.distributed.ray_cluster import WORKER_RESOURCE, local_worker_slots

SCRIPT = Path(__file__).with_name("ray_local_cluster.py")
TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="the ray extra is not installed (pip install 'vllm-bridge[ray]'; "
    "scripts/test.sh installs it)",
)


def test_without_a_cluster_vllm_starts_one_with_this_machine_worker_slots():
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("RAY_ADDRESS", "VLLM_BRIDGE_DISABLE_PATCHES")
    }
    # A Ray directory of its own (short: Ray's socket paths must stay under
    # 108 bytes), so that no other Ray cluster on this machine is found.
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as ray_dir:
        env["RAY_TMPDIR"] = ray_dir
        result = subprocess.run(
            [sys.executable, str(SCRIPT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    started = json.loads(result.stdout.strip().splitlines()[-1])
    assert started["slots"] == local_worker_slots()
    assert started["bundles"] == [{WORKER_RESOURCE: 1.0}, {WORKER_RESOURCE: 1.0}]
