"""Time to apply vllm-bridge's startup and platform stages in a fresh
process, as the engine core and workers do (`vllm.general_plugins`).

Two cases: the targets' modules not yet imported (the apply pays for
importing them), and already imported (the API server, which imports them
anyway). Prints the median over several fresh processes.

    python benchmarks/patch_apply_time.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = """
import time, importlib
import vllm.platforms
from vllm_bridge.patches.catalogue import REGISTRY
if {preimport}:
    for patch in REGISTRY.patches("platform"):
        importlib.import_module(patch.module)
started = time.perf_counter()
REGISTRY.apply("startup")
REGISTRY.apply("platform")
print("MS", (time.perf_counter() - started) * 1000)
"""


def measure(preimport: bool, runs: int) -> float:
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", CHILD.format(preimport=preimport)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        times.append(
            float(next(x for x in out.splitlines() if x.startswith("MS "))[3:])
        )
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print("| case | median ms |")
    print("|---|---|")
    print(f"| target modules already imported | {measure(True, args.runs):.2f} |")
    print(f"| target modules imported by the apply | {measure(False, args.runs):.1f} |")


if __name__ == "__main__":
    main()
