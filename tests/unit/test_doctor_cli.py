"""`vllm-bridge doctor` through the installed command: its report on this
machine (snapshot, volatile values masked) and its error exits."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.conftest import run_venv_command
from tests.snapshots import assert_matches_snapshot

CLEAN = ("LD_PRELOAD", "VLLM_BRIDGE_STRICT", "VLLM_BRIDGE_KV_CACHE_SHARE")


def doctor(env: dict[str, str] | None = None):
    unset = [name for name in CLEAN if name not in (env or {})]
    return run_venv_command("vllm-bridge", "doctor", env=env, unset=unset)


def _mask(stdout: str) -> str:
    text = stdout.replace(sys.prefix, "<VENV>")
    return re.sub(r"\d+\.\d\d GiB available", "<N> GiB available", text)


def test_doctor_report_on_this_machine():
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert_matches_snapshot("doctor.txt", _mask(proc.stdout))


def test_a_torchvision_that_cannot_load_is_an_error(tmp_path: Path):
    # A real package on the path whose import fails the way PyPI's
    # torchvision fails beside this torch.
    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    metadata = tmp_path / "torchvision-0.29.1.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.29.1\n"
    )
    proc = doctor(env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    assert "error  torchvision: torchvision 0.29.1 does not load" in proc.stdout
    assert "torchvision::nms does not exist" in proc.stdout
    assert "fix: pip uninstall -y torchvision" in proc.stdout


def test_a_bad_setting_is_an_error():
    proc = doctor(env={"VLLM_BRIDGE_KV_CACHE_SHARE": "lots"})
    assert proc.returncode == 1
    assert "error  settings: VLLM_BRIDGE_KV_CACHE_SHARE='lots' is invalid" in (
        proc.stdout
    )
