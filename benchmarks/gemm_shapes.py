"""oneDNN vs vLLM's SGL AMX linear kernel on a model's GEMM shapes.

For each linear layer shape of the preset and each batch size M, times
``_C::onednn_mm`` (what vLLM's CPU build uses for dense weights over 1 MiB)
and ``_C::weight_packed_linear`` (its SGL AMX kernel, used only for
smaller weights) over one weight copy per layer, so that the weights
stream from memory as in a real step, and prints ms per step:

    python benchmarks/gemm_shapes.py --preset 0.5b --m 1 8 32 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch

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


def time_per_step(calls: list[Callable[[], object]], repeats: int) -> float:
    """Median ms of one pass over ``calls`` (one call per layer)."""
    for call in calls:  # warm-up: primitives created, pages touched
        call()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for call in calls:
            call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="0.5b", choices=("tiny", "0.5b"))
    parser.add_argument("--m", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    from vllm import _custom_ops as ops

    from vllm_bridge.device.cpu import request_amx_permission

    request_amx_permission()
    config = json.loads((model_dir(args.preset) / "config.json").read_text())
    print(f"{args.preset}, bf16, {torch.get_num_threads()} threads; ms per step")
    print("\n| layer | N x K | M | oneDNN ms | SGL ms | SGL / oneDNN |")
    print("|---|---|---|---|---|---|")
    totals: dict[int, list[float]] = {m: [0.0, 0.0] for m in args.m}
    for name, (n, k, copies) in shapes(config).items():
        weights = [torch.randn(n, k).to(torch.bfloat16) for _ in range(copies)]
        onednn = [ops.create_onednn_mm(w.t(), 32) for w in weights]
        packed = [torch.ops._C.convert_weight_packed(w) for w in weights]
        for m in args.m:
            x = torch.randn(m, k).to(torch.bfloat16)
            onednn_ms = time_per_step(
                [partial(ops.onednn_mm, handler, x, None) for handler in onednn],
                args.repeats,
            )
            sgl_ms = time_per_step(
                [partial(ops.weight_packed_linear_cpu, x, w, n, None) for w in packed],
                args.repeats,
            )
            totals[m][0] += onednn_ms
            totals[m][1] += sgl_ms
            print(
                f"| {name} | {n} x {k} | {m} | {onednn_ms:.2f} | {sgl_ms:.2f} "
                f"| {sgl_ms / onednn_ms:.2f} |"
            )
    print("\n| M | oneDNN ms | SGL ms | SGL / oneDNN |\n|---|---|---|---|")
    for m, (onednn_ms, sgl_ms) in totals.items():
        print(f"| {m} | {onednn_ms:.2f} | {sgl_ms:.2f} | {sgl_ms / onednn_ms:.2f} |")


if __name__ == "__main__":
    main()
