"""A GPTQ-format 4-bit copy of a model directory (round-to-nearest, no
calibration): the checkpoint layout AutoGPTQ writes, for tests of what
vllm-bridge does with 4-bit checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

BITS = 4
PACK = 32 // BITS
LEVELS = 2**BITS
GPTQ_ZERO = LEVELS // 2  # symmetric: zero point in the middle of the range
PROJECTIONS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)


def _pack(values: torch.Tensor, dim: int) -> torch.Tensor:
    """Pack 4-bit values (0..15) along ``dim``, eight per int32."""
    moved = values.movedim(dim, -1).to(torch.int64)
    groups = moved.reshape(*moved.shape[:-1], -1, PACK)
    shifts = torch.arange(PACK, dtype=torch.int64) * BITS
    packed = (groups << shifts).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    return packed.movedim(-1, dim).contiguous()


def quantize_linear(weight: torch.Tensor, group_size: int) -> dict[str, torch.Tensor]:
    """GPTQ tensors of one [out, in] weight: qweight [in/8, out], qzeros
    [in/group, out/8], scales [in/group, out], g_idx [in]."""
    out_features, in_features = weight.shape
    w = weight.float().t().reshape(in_features // group_size, group_size, out_features)
    scales = (w.abs().amax(dim=1) / (GPTQ_ZERO - 1)).clamp(min=1e-8)
    q = (torch.round(w / scales[:, None, :]) + GPTQ_ZERO).clamp(0, LEVELS - 1)
    zeros = torch.full_like(scales, GPTQ_ZERO - 1)  # GPTQ stores zero - 1
    return {
        "qweight": _pack(q.reshape(in_features, out_features), dim=0),
        "qzeros": _pack(zeros, dim=1),
        "scales": scales.to(torch.float16),
        "g_idx": torch.arange(in_features, dtype=torch.int32) // group_size,
    }


def write_gptq_copy(source: Path, target: Path, group_size: int = 32) -> Path:
    """``source``'s model with its projections in GPTQ 4-bit format."""
    target.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(source.glob("*.safetensors")):
        for name, tensor in load_file(shard).items():
            module, _, leaf = name.rpartition(".")
            if leaf == "weight" and module.rpartition(".")[2] in PROJECTIONS:
                for key, value in quantize_linear(tensor, group_size).items():
                    tensors[f"{module}.{key}"] = value
            else:
                tensors[name] = tensor.to(torch.float16)
    save_file(tensors, target / "model.safetensors")
    for item in source.iterdir():
        if item.suffix != ".safetensors" and item.is_file():
            shutil.copy2(item, target / item.name)
    config = json.loads((source / "config.json").read_text())
    config["torch_dtype"] = config["dtype"] = "float16"
    config["quantization_config"] = {
        "quant_method": "gptq",
        "bits": BITS,
        "group_size": group_size,
        "desc_act": False,
        "sym": True,
    }
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target
