"""Idempotent, atomic builds of a model directory (concurrent builders of
one directory take turns)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vllm_bridge_testmodel.presets import (
    BOS,
    BUILDER_VERSION,
    DTYPES,
    EOS,
    MARKER_FILE,
    PAD,
    PRESETS,
    REQUIRED_FILES,
    UNK,
    Preset,
)
from vllm_bridge_testmodel.tokenizer import build_tokenizer
from vllm_bridge_testmodel.weights import make_model


def _marker(preset: Preset, dtype: str, seed: int) -> dict[str, Any]:
    return {
        "builder_version": BUILDER_VERSION,
        "preset": preset.name,
        "dtype": dtype,
        "seed": seed,
        "preset_params": asdict(preset),
    }


def _read_marker(model_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((model_dir / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_preset(model_dir: Path) -> Preset:
    """The preset a model directory was built from (its build marker)."""
    marker = _read_marker(model_dir)
    if marker is None or marker.get("preset") not in PRESETS:
        raise ValueError(f"{model_dir} was not built by vllm_bridge_testmodel")
    return PRESETS[marker["preset"]]


def is_complete(
    model_dir: str | os.PathLike[str],
    preset: str,
    dtype: str = "float32",
    seed: int = 0,
) -> bool:
    """True if ``model_dir`` holds a finished build of exactly these parameters."""
    model_dir = Path(model_dir)
    if _read_marker(model_dir) != _marker(PRESETS[preset], dtype, seed):
        return False
    return all((model_dir / name).is_file() for name in REQUIRED_FILES)


def _write_model(preset: Preset, dtype: str, seed: int, target: Path) -> None:
    import torch
    from transformers import GenerationConfig

    tokenizer = build_tokenizer(preset)
    tokenizer.save_pretrained(target)
    model = make_model(preset, tokenizer, seed)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    model.save_pretrained(target)  # safetensors; the tied lm_head is not stored
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(target)
    special_map = target / "special_tokens_map.json"
    if not special_map.exists():
        # transformers 5 keeps these in tokenizer_config.json only; older
        # readers look for this file.
        tokens = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK}
        special_map.write_text(json.dumps({**tokens, "pad_token": PAD}, indent=2))
    # Written last: a marker means everything above is complete.
    marker = json.dumps(_marker(preset, dtype, seed), indent=2) + "\n"
    (target / MARKER_FILE).write_text(marker)


def build_model(
    preset: str,
    out_dir: str | os.PathLike[str],
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Build (or reuse) the model directory ``out_dir`` and return its path.

    Returns at once when ``out_dir`` holds a complete build with the same
    preset, dtype, seed and builder version.  Otherwise builds into a temporary
    sibling and renames it into place, replacing an older build.  Refuses to
    replace a non-empty directory that this builder did not make.  Leaves a
    lock file ``.<name>.lock`` beside ``out_dir``.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; choose from {DTYPES}")
    out = Path(out_dir).absolute()
    if is_complete(out, preset, dtype, seed):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Concurrent builders of one directory (e.g. pytest-xdist workers) take
    # turns; the second then finds the first one's build complete.
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(out, preset, dtype, seed):
            return out
        if out.exists() and any(out.iterdir()) and _read_marker(out) is None:
            raise FileExistsError(
                f"{out} is not empty and was not made by vllm_bridge_testmodel; "
                "not replacing it"
            )
        # Leftovers of killed builds; nobody else uses them while we hold the lock.
        for stale in out.parent.glob(f".{out.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            _write_model(PRESETS[preset], dtype, seed, tmp)
            # mkdtemp's 0700 (and safetensors' 0600) would lock out other users.
            tmp.chmod(0o755)
            for path in tmp.iterdir():
                path.chmod(0o644)
            _replace_dir(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _replace_dir(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, replacing ``dst`` if it exists."""
    if not dst.exists():
        os.replace(src, dst)
        return
    # rename(2) cannot replace a non-empty directory: move the old one aside.
    old = dst.parent / f".{dst.name}.tmp-old-{os.getpid()}"
    os.replace(dst, old)
    os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)
