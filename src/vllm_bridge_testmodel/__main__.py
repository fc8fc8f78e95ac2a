"""Command line: build one model directory and print its path.

python -m vllm_bridge_testmodel --preset tiny --dtype float32 --out DIR
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from vllm_bridge_testmodel.directory import build_model, is_complete
from vllm_bridge_testmodel.presets import DTYPES, PRESETS


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build one model directory and print its path."""
    parser = argparse.ArgumentParser(
        prog="python -m vllm_bridge_testmodel",
        description="Build a small random-weight Llama model directory "
        "(no model hub needed).",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="model directory")
    args = parser.parse_args(argv)
    start = time.monotonic()
    reused = is_complete(args.out, args.preset, args.dtype, args.seed)
    path = build_model(args.preset, args.out, dtype=args.dtype, seed=args.seed)
    status = "up to date" if reused else f"built in {time.monotonic() - start:.1f}s"
    print(f"{path}: {args.preset} {args.dtype} seed {args.seed}, {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
