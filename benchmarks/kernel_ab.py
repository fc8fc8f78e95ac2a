"""vllm-bridge's linear kernel against the same kernel at another git
revision, side by side: the bf16 linear layers of a preset in the model's
layer order, per batch size M.

Each side runs in a fresh process: the working tree's kernel as built by
vllm_bridge.ops.native, the other revision's source (``git show``) built the
same way into a directory of its own. Sides alternate round by round;
medians of the best-of-3 step times are printed as ms per step and GFLOP/s
(2 x M x N x K per layer), with the ratio working tree / revision.

    python benchmarks/kernel_ab.py --against HEAD --m 1 4 8 12 16 32 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = "src/vllm_bridge/ops/csrc/linear_avx2.cpp"
THREADS = 2
# 0.5b preset: hidden 896, intermediate 4864, 24 layers, 32000-token head
HIDDEN, INTERMEDIATE, LAYERS, VOCAB = 896, 4864, 24, 32000


def load_revision(revision: str) -> None:
    """Build and load the kernel source of ``revision`` (once per source)."""
    import hashlib

    from torch.utils import cpp_extension

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
    cpp_extension.load(
        name=f"kernel_ab_{digest}",
        sources=[str(directory / "linear_avx2.cpp")],
        extra_cflags=list(native.CFLAGS),
        extra_ldflags=list(native.LDFLAGS),
        build_directory=str(directory),
        is_python_module=False,
    )


def child(side: str, sizes: list[int]) -> dict[str, float]:
    import torch

    if side == "tree":
        from vllm_bridge.ops import native

        assert native.load().loaded, native.load().detail
    else:
        load_revision(side)
    torch.set_num_threads(THREADS)
    generator = torch.Generator().manual_seed(0)
    shapes = [(1152, HIDDEN), (HIDDEN, HIDDEN), (2 * INTERMEDIATE, HIDDEN)]
    shapes.append((HIDDEN, INTERMEDIATE))
    layers = [
        [(torch.randn(n, k, generator=generator) * 0.02).bfloat16() for n, k in shapes]
        for _ in range(LAYERS)
    ]
    head = (torch.randn(VOCAB, HIDDEN, generator=generator) * 0.02).bfloat16()
    linear = torch.ops.vllm_bridge.bf16_linear
    result = {}
    for m in sizes:
        inputs = {
            k: torch.randn(m, k, generator=generator).bfloat16()
            for k in (HIDDEN, INTERMEDIATE)
        }
        times = []
        for _ in range(4):  # the first warms the caches
            started = time.perf_counter()
            for weights in layers:
                for weight in weights:
                    linear(inputs[weight.shape[1]], weight, None)
            linear(inputs[HIDDEN], head, None)
            times.append(time.perf_counter() - started)
        result[str(m)] = min(times[1:])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 4, 8, 12, 16, 32, 64])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", metavar="SIDE")
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.m)), flush=True)
        return
    sys.path.insert(0, str(REPO))
    from benchmarks.throughput import child_result

    sides = ("tree", args.against)
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for round_index in range(args.rounds):
        for side in sides if round_index % 2 == 0 else sides[::-1]:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", side, "--m", *map(str, args.m)],
                env={**os.environ, "PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                check=False,
            )
            runs[side].append(child_result(proc, f"{side}:\n{proc.stderr[-3000:]}"))
    weights = LAYERS * (1152 + HIDDEN + 2 * INTERMEDIATE) * HIDDEN
    weights += LAYERS * HIDDEN * INTERMEDIATE + VOCAB * HIDDEN
    print(
        f"bf16 linear layers of the 0.5b preset, {THREADS} threads, medians of "
        f"{args.rounds} round(s); working tree vs {args.against}\n"
    )
    print("| M | tree ms | tree GFLOP/s | revision ms | revision GFLOP/s | ratio |")
    print("|---|---|---|---|---|---|")
    for m in args.m:
        tree, other = (
            statistics.median(run[str(m)] for run in runs[side]) for side in sides
        )
        flops = 2 * m * weights
        print(
            f"| {m} | {tree * 1e3:.1f} | {flops / tree / 1e9:.1f} | "
            f"{other * 1e3:.1f} | {flops / other / 1e9:.1f} | {other / tree:.2f} |"
        )


if __name__ == "__main__":
    main()
