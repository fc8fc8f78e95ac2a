"""oneDNN vs vLLM's SGL AMX linear kernel on a model's GEMM shapes.

For each linear layer shape of the preset and each batch size M, times
``_C::onednn_mm`` (what vLLM's CPU build uses for dense weights over 1 MiB)
and ``_C::weight_packed_linear`` (its SGL AMX kernel, used only for
smaller weights) over one weight per layer, called in the model's layer
order so that the weights stream from memory as in a real step, and prints
ms per step:

    python benchmarks/gemm_shapes.py --preset 0.5b --m 1 8 32 64
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from vllm import _custom_ops as ops

from benchmarks.throughput import model_dir


def shapes(config: dict) -> dict[str, tuple[int, int, int]]:
    """Linear layer name -> (N, K, copies per step)."""
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
    qkv = (config["num_attention_heads"] + 2 * config["num_key_value_heads"]) * head_dim
    layers = config["num_hidden_layers"]
    intermediate = config["intermediate_size"]
    return {
        "qkv_proj": (qkv, hidden, layers),
        "o_proj": (hidden, config["num_attention_heads"] * head_dim, layers),
        "gate_up_proj": (2 * intermediate, hidden, layers),
        "down_proj": (hidden, intermediate, layers),
        "lm_head": (config["vocab_size"], hidden, 1),
    }


def preset_shapes(preset: str) -> dict[str, tuple[int, int, int]]:
    """``shapes`` of a vllm_bridge_testmodel preset, the vocabulary at its
    upper bound (the trained tokenizer may stop a little below it)."""
    from vllm_bridge_testmodel.presets import PRESETS

    config = dataclasses.asdict(PRESETS[preset])
    config["vocab_size"] = config["target_vocab_size"]
    return shapes(config)


def time_step(
    layers: list[dict[str, Callable[[], object]]], repeats: int
) -> dict[str, float]:
    """Median ms per step of each layer name, running the calls in the
    model's order (all of layer 0, then layer 1, ...): the small weights then
    leave the cache between uses as in a real step."""
    for layer in layers:  # warm-up: primitives created, pages touched
        for call in layer.values():
            call()
    samples: dict[str, list[float]] = {name: [] for layer in layers for name in layer}
    for _ in range(repeats):
        spent = dict.fromkeys(samples, 0.0)
        for layer in layers:
            for name, call in layer.items():
                started = time.perf_counter()
                call()
                spent[name] += time.perf_counter() - started
        for name, seconds in spent.items():
            samples[name].append(seconds * 1000)
    return {name: statistics.median(ms) for name, ms in samples.items()}


def _onednn(handler: Any, x: torch.Tensor, n: int) -> torch.Tensor:
    return ops.onednn_mm(handler, x, None)


def _sgl(packed: Any, x: torch.Tensor, n: int) -> torch.Tensor:
    return ops.weight_packed_linear_cpu(x, packed, n, None)


def step_calls(
    kernel: Callable[[Any, torch.Tensor, int], torch.Tensor],
    weights: list[dict[str, Any]],
    inputs: dict[int, torch.Tensor],
    layer_shapes: dict[str, tuple[int, int, int]],
) -> list[dict[str, Callable[[], object]]]:
    """One call per weight: kernel(weight, input of its K, its N)."""
    return [
        {
            name: partial(
                kernel, weight, inputs[layer_shapes[name][1]], layer_shapes[name][0]
            )
            for name, weight in layer.items()
        }
        for layer in weights
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="0.5b", choices=("tiny", "0.5b"))
    parser.add_argument("--m", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    from vllm_bridge.device.cpu import request_amx_permission

    request_amx_permission()
    config = json.loads((model_dir(args.preset) / "config.json").read_text())
    layer_shapes = shapes(config)
    count = config["num_hidden_layers"]
    onednn: list[dict[str, Any]] = [{} for _ in range(count)]
    packed: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, (n, k, copies) in layer_shapes.items():
        for index in range(count - copies, count):  # the lm_head after the last layer
            weight = torch.randn(n, k).to(torch.bfloat16)
            onednn[index][name] = ops.create_onednn_mm(weight.t(), 32)
            packed[index][name] = torch.ops._C.convert_weight_packed(weight)

    print(f"{args.preset}, bf16, {torch.get_num_threads()} threads; ms per step")
    print("\n| layer | N x K | M | oneDNN ms | SGL ms | SGL / oneDNN |")
    print("|---|---|---|---|---|---|")
    totals = []
    for m in args.m:
        inputs = {
            k: torch.randn(m, k).to(torch.bfloat16) for _, k, _ in layer_shapes.values()
        }

        onednn_ms = time_step(
            step_calls(_onednn, onednn, inputs, layer_shapes), args.repeats
        )
        sgl_ms = time_step(step_calls(_sgl, packed, inputs, layer_shapes), args.repeats)
        for name, (n, k, _) in layer_shapes.items():
            print(
                f"| {name} | {n} x {k} | {m} | {onednn_ms[name]:.2f} "
                f"| {sgl_ms[name]:.2f} | {sgl_ms[name] / onednn_ms[name]:.2f} |"
            )
        totals.append((m, sum(onednn_ms.values()), sum(sgl_ms.values())))
    print("\n| M | oneDNN ms | SGL ms | SGL / oneDNN |\n|---|---|---|---|")
    for m, onednn_total, sgl_total in totals:
        ratio = sgl_total / onednn_total
        print(f"| {m} | {onednn_total:.2f} | {sgl_total:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
