"""vllm-bridge's linear kernel against the same kernel at another git
revision, side by side: the bf16 linear layers of a preset in the model's
layer order, per batch size M.

Each side runs in a fresh process: the working tree's kernel as built by
vllm_bridge.ops.native, the other revision's source (``git show``) built the
same way into a directory of its own. Layer shapes and the step timing are
benchmarks/gemm_shapes.py's (one weight per layer, called in the model's
order, median of 3 steps per process). Sides alternate round by round;
medians over the rounds are printed as ms per step and GFLOP/s
(2 x M x N x K per layer), with the ratio revision / working tree (above 1:
the working tree is faster).

    python benchmarks/kernel_ab.py --against HEAD --m 1 4 8 12 16 32 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = "src/vllm_bridge/ops/csrc/linear_avx2.cpp"
THREADS = 2
REPEATS = 3


def load_revision(revision: str) -> None:
    """Build and load the kernel source of ``revision`` (once per source)."""
    import hashlib

    from vllm_bridge.ops import native

    source = subprocess.run(
        ["git", "show", f"{revision}:{SOURCE}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = REPO / ".cache" / "kernel_ab" / digest
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "linear_avx2.cpp").write_text(source)
    native.build_and_load(
        directory, f"kernel_ab_{digest}", (directory / "linear_avx2.cpp",)
    )


def child(side: str, preset: str, sizes: list[int]) -> dict[str, float]:
    """ms per step of all the preset's bf16 linear layers, per batch size."""
    import torch

    from benchmarks.gemm_shapes import preset_shapes, time_step

    if side == "tree":
        from vllm_bridge.ops import native

        assert native.load().loaded, native.load().detail
    else:
        load_revision(side)
    torch.set_num_threads(THREADS)
    linear = torch.ops.vllm_bridge.bf16_linear
    layer_shapes = preset_shapes(preset)
    copies = max(count for _, _, count in layer_shapes.values())
    weights = [
        {
            name: (torch.randn(n, k) * 0.02).bfloat16()
            for name, (n, k, count) in layer_shapes.items()
            if index < count
        }
        for index in range(copies)
    ]
    result = {}
    for m in sizes:
        inputs = {k: torch.randn(m, k).bfloat16() for _, k, _ in layer_shapes.values()}
        calls = [
            {
                name: partial(linear, inputs[weight.shape[1]], weight, None)
                for name, weight in layer.items()
            }
            for layer in weights
        ]
        result[str(m)] = sum(time_step(calls, REPEATS).values())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 4, 8, 12, 16, 32, 64])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--preset", default="0.5b", choices=("tiny", "0.5b"))
    parser.add_argument("--child", metavar="SIDE")
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.preset, args.m)
        print("RESULT " + json.dumps(result), flush=True)
        return
    sys.path.insert(0, str(REPO))
    from benchmarks.gemm_shapes import preset_shapes
    from benchmarks.throughput import child_result

    sides = ("tree", args.against)
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for round_index in range(args.rounds):
        for side in sides if round_index % 2 == 0 else sides[::-1]:
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    side,
                    "--preset",
                    args.preset,
                    "--m",
                    *map(str, args.m),
                ],
                env={**os.environ, "PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                check=False,
            )
            runs[side].append(child_result(proc, f"{side}:\n{proc.stderr[-3000:]}"))
    weights = sum(n * k * count for n, k, count in preset_shapes(args.preset).values())
    print(
        f"bf16 linear layers of the {args.preset} preset, {THREADS} threads, "
        f"medians of {args.rounds} round(s); working tree vs {args.against}\n"
    )
    print("| M | tree ms | tree GFLOP/s | revision ms | revision GFLOP/s | ratio |")
    print("|---|---|---|---|---|---|")
    for m in args.m:
        tree, other = (
            statistics.median(run[str(m)] for run in runs[side]) for side in sides
        )
        flops = 2 * m * weights
        print(
            f"| {m} | {tree:.1f} | {flops / tree / 1e6:.1f} | "
            f"{other:.1f} | {flops / other / 1e6:.1f} | {other / tree:.2f} |"
        )


if __name__ == "__main__":
    main()
