"""vllm-bridge's fusion passes on and off, side by side.

    python benchmarks/fusion_passes.py --rounds 2 [--preset 0.5b] [--isa avx512_bf16]

Alternating runs of ``--quantization bridge_int8`` (the path the passes
rewrite: oneDNN's int8 GEMM after a separate per-token quantization, which
vllm-bridge picks on AVX-512 CPUs without AMX) with every pass on
(VLLM_BRIDGE_ENABLE_PASSES=all) and with VLLM_BRIDGE_DISABLE_PASSES=all,
each engine in a fresh process, compiled, the prompts and measurements of
benchmarks/throughput.py. On a CPU of another
class, ``--isa`` runs as one of the classes the passes act on (label the
figures so). Prints medians and the ratio on / off.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Passes that are off by default run only when named; an inherited
# VLLM_BRIDGE_DISABLE_PASSES would win over the names.
SIDES = {
    "passes on": {"VLLM_BRIDGE_ENABLE_PASSES": "all", "VLLM_BRIDGE_DISABLE_PASSES": ""},
    "passes off": {"VLLM_BRIDGE_DISABLE_PASSES": "all"},
}


def main() -> None:
    sys.path.insert(0, str(REPO))
    from benchmarks.throughput import (
        SPEED_ROWS,
        add_ab_arguments,
        prepare_ab,
        print_speed_table,
        run_side,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ab_arguments(parser)
    args = parser.parse_args()
    model, machine = prepare_ab(args)
    print(f"bridge_int8, compiled; {machine}")
    log_dir = REPO / "benchmarks" / "results"
    log_dir.mkdir(parents=True, exist_ok=True)
    names = list(SIDES)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            result = run_side(model, "compiled", "bridge-int8", log_dir, SIDES[name])
            runs[name].append(result)
            print(f"{name}: {result}", file=sys.stderr)

    medians = {
        name: {
            key: statistics.median(run[key] for run in runs[name])
            for key, _, _ in SPEED_ROWS
        }
        for name in names
    }
    print(f"\nmedians of {args.rounds} round(s)\n")
    print_speed_table(medians, "passes on", "passes off", "on / off")


if __name__ == "__main__":
    main()
