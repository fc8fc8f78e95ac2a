"""vllm-bridge's fusion passes on and off, side by side.

    python benchmarks/fusion_passes.py --rounds 2 [--preset 0.5b] [--isa avx512_bf16]
    python benchmarks/fusion_passes.py --pass attention-direct --side bridge --rounds 3

Alternating runs with the passes on and off, each engine in a fresh
process, compiled, the prompts and measurements of benchmarks/throughput.py.
By default every pass (VLLM_BRIDGE_ENABLE_PASSES=all against
VLLM_BRIDGE_DISABLE_PASSES=all) on ``--quantization bridge_int8`` (the path
int8-quant-inline rewrites: oneDNN's int8 GEMM after a separate per-token
quantization, which vllm-bridge picks on AVX-512 CPUs without AMX);
``--pass NAME`` compares vllm-bridge's defaults with that one pass disabled,
and ``--side bridge`` serves the unquantized model. On a CPU of another
class, ``--isa`` runs as one of the classes a pass acts on (label the
figures so). Prints medians and the ratio on / off.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sides(pass_name: str) -> dict[str, dict[str, str]]:
    """The environment of each side. Passes that are off by default run
    only when named; an inherited VLLM_BRIDGE_DISABLE_PASSES would win over
    the names."""
    if pass_name == "all":
        return {
            "passes on": {
                "VLLM_BRIDGE_ENABLE_PASSES": "all",
                "VLLM_BRIDGE_DISABLE_PASSES": "",
            },
            "passes off": {"VLLM_BRIDGE_DISABLE_PASSES": "all"},
        }
    return {
        f"{pass_name} on": {
            "VLLM_BRIDGE_ENABLE_PASSES": pass_name,
            "VLLM_BRIDGE_DISABLE_PASSES": "",
        },
        f"{pass_name} off": {"VLLM_BRIDGE_DISABLE_PASSES": pass_name},
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
    from vllm_bridge.fusion.catalogue import NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ab_arguments(parser)
    parser.add_argument(
        "--pass", dest="pass_name", default="all", choices=["all", *NAMES]
    )
    parser.add_argument(
        "--side", default="bridge-int8", choices=["bridge-int8", "bridge"]
    )
    args = parser.parse_args()
    model, machine = prepare_ab(args)
    print(f"{args.side}, compiled; {machine}")
    log_dir = REPO / "benchmarks" / "results"
    log_dir.mkdir(parents=True, exist_ok=True)
    environments = sides(args.pass_name)
    names = list(environments)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            result = run_side(model, "compiled", args.side, log_dir, environments[name])
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
    print_speed_table(medians, names[0], names[1], "on / off")


if __name__ == "__main__":
    main()
