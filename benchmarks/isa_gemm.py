"""The linear layers of a preset per ISA class: what vLLM's dispatch runs for
bf16, fp16 and float32 weights, and vllm-bridge's bf16 kernel.

For each class this CPU can run as (``VLLM_BRIDGE_ISA``, set before the
child interpreter starts, as the switch requires), a fresh process gives
one weight per layer of the preset to vLLM's own
``dispatch_cpu_unquantized_gemm`` (oneDNN, its SGL kernel, or PyTorch's
fallback, whatever vLLM picks on that class) and to
``vllm_bridge::bf16_linear``, then times each in the model's layer order for
each batch size M. Classes alternate round by round; medians are printed
as GFLOP/s (2 x M x N x K per layer) and ms per step of all layers:

    python benchmarks/isa_gemm.py --preset 0.5b --m 1 32 --rounds 2

The entries of config/isa_defaults.py are decided by these figures
(docs/benchmarks.md, "Every CPU").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
THREADS = 2
PATHS = ("vllm bf16", "vllm fp16", "vllm float32", "bridge bf16")


def _vllm_linear(weight: Any) -> Callable[[Any], Any]:
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    return lambda x: layer.cpu_linear(x, layer.weight, None)


def _bridge_linear(weight: Any) -> Callable[[Any], Any]:
    from vllm_bridge.ops import linear

    return lambda x: linear.bf16_linear(x, weight, None)


def child(preset: str, batch_sizes: list[int], repeats: int) -> dict[str, Any]:
    import torch
    from vllm.platforms import current_platform

    from benchmarks.gemm_shapes import preset_shapes, time_step
    from vllm_bridge.device.isa import detect
    from vllm_bridge.diagnostics import mapped_vllm_kernel_libraries
    from vllm_bridge.ops import linear

    current_platform.import_kernels()
    torch.set_num_threads(THREADS)
    layer_shapes = preset_shapes(preset)
    dtypes = {
        "vllm bf16": torch.bfloat16,
        "vllm fp16": torch.float16,
        "vllm float32": torch.float32,
        "bridge bf16": torch.bfloat16,
    }
    paths = [p for p in PATHS if p != "bridge bf16" or linear.available()]
    results: dict[str, Any] = {}
    for path in paths:
        dtype = dtypes[path]
        make = _bridge_linear if path == "bridge bf16" else _vllm_linear
        copies = max(n for _, _, n in layer_shapes.values())
        layers = [
            {
                name: make(torch.randn(n, k, dtype=torch.float32).to(dtype) * 0.02)
                for name, (n, k, count) in layer_shapes.items()
                if index < count
            }
            for index in range(copies)
        ]
        for m in batch_sizes:
            inputs = {
                k: torch.randn(m, k, dtype=torch.float32).to(dtype)
                for _, k, _ in layer_shapes.values()
            }
            calls = [
                {
                    name: partial(call, inputs[layer_shapes[name][1]])
                    for name, call in layer.items()
                }
                for layer in layers
            ]
            ms = sum(time_step(calls, repeats).values())
            flops = sum(2 * m * n * k * count for n, k, count in layer_shapes.values())
            results[f"{path}|{m}"] = {"ms": ms, "gflops": flops / ms / 1e6}
    return {
        "isa": detect().describe(),
        "aten": torch.backends.cpu.get_cpu_capability(),
        "libraries": mapped_vllm_kernel_libraries(),
        "results": results,
    }


def run_child(isa_class: str, args: argparse.Namespace) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--preset",
            args.preset,
            "--repeats",
            str(args.repeats),
            "--m",
            *map(str, args.m),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "VLLM_BRIDGE_ISA": isa_class},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"child for {isa_class} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="0.5b", choices=("tiny", "0.5b"))
    parser.add_argument("--m", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--isa",
        nargs="+",
        help="classes to run as (default: every class this CPU can run as)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.preset, args.m, args.repeats)))
        return

    from vllm_bridge.device import isa

    native = isa.classify(os.uname().machine, isa.cpu_flags())
    classes = args.isa or [c for c in isa.switch_choices(native) if c != "auto"]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in classes}
    for round_index in range(args.rounds):
        order = classes if round_index % 2 == 0 else classes[::-1]
        for isa_class in order:
            runs[isa_class].append(run_child(isa_class, args))
            print(f"round {round_index + 1}: {isa_class} done", file=sys.stderr)

    print(f"preset {args.preset}, {THREADS} threads, CPU class {native}")
    print("| run as | ATen | vLLM library | path | M | GFLOP/s | ms per step |")
    print("|---|---|---|---|---|---|---|")
    for isa_class, class_runs in runs.items():
        first = class_runs[0]
        for key in first["results"]:
            path, m = key.split("|")
            ms = statistics.median(r["results"][key]["ms"] for r in class_runs)
            gflops = statistics.median(r["results"][key]["gflops"] for r in class_runs)
            print(
                f"| {isa_class} | {first['aten']} | {', '.join(first['libraries'])} "
                f"| {path} | {m} | {gflops:.1f} | {ms:.2f} |"
            )


if __name__ == "__main__":
    main()
