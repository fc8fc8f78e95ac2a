"""vllm-bridge's CPU attention backend vs vLLM's CPU_ATTN backend, both under
vllm-bridge, side by side (VLLM_BRIDGE_ATTENTION=bridge / vllm).

Alternating runs, each engine in a fresh process, compiled at defaults:
single stream (one prompt, 128 greedy tokens, the median of 5 generates
in each process: one generate varies by several percent here) and 32
concurrent (32 prompts x 128 tokens); medians over the rounds, with the
machine class and the share of the bandwidth roofline
(benchmarks/peers.py measures it).

    python benchmarks/attention_backend.py --rounds 3 [--isa avx2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDES = ("bridge", "vllm")
SINGLE_REPEATS = 5


def child(model: str) -> None:
    from vllm import LLM, SamplingParams

    from benchmarks.throughput import OUTPUT_TOKENS, prompts

    llm = LLM(model=model)
    params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    llm.generate(prompts()[:4], SamplingParams(max_tokens=8), use_tqdm=False)
    single = []
    for _ in range(SINGLE_REPEATS):
        started = time.perf_counter()
        (alone,) = llm.generate(prompts()[:1], params, use_tqdm=False)
        single.append(OUTPUT_TOKENS / (time.perf_counter() - started))
    started = time.perf_counter()
    outputs = llm.generate(prompts(), params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    (report,) = llm.collective_rpc("bridge_report")
    # The single stream's tokens: in bf16 the 32 concurrent ones depend on
    # how the engine core happened to batch the first steps (GEMM results
    # depend on the row count).
    token_ids = list(alone.outputs[0].token_ids)
    result = {
        "tokens_md5": hashlib.md5(json.dumps(token_ids).encode()).hexdigest(),
        "single_tok_s": statistics.median(single),
        "tok_s": sum(len(o.outputs[0].token_ids) for o in outputs) / elapsed,
        "attention_backends": report["attention_backends"],
    }
    print("RESULT " + json.dumps(result), flush=True)


def run_side(model: Path, side: str) -> dict:
    from benchmarks.throughput import child_result

    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(model)],
        env={**os.environ, "PYTHONPATH": str(REPO), "VLLM_BRIDGE_ATTENTION": side},
        capture_output=True,
        text=True,
        check=False,
    )
    return child_result(proc, f"{side} failed:\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preset", default="0.5b")
    parser.add_argument(
        "--isa", default="auto", help="run as on a CPU of this class (VLLM_BRIDGE_ISA)"
    )
    parser.add_argument("--child", metavar="MODEL")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    sys.path.insert(0, str(REPO))
    from benchmarks.peers import roofline, run_child
    from benchmarks.throughput import model_dir

    if args.isa != "auto":
        os.environ["VLLM_BRIDGE_ISA"] = args.isa  # every child starts with it
    model = model_dir(args.preset)
    machine = run_child(Path(sys.executable), "machine", model)
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for round_index in range(args.rounds):
        for side in SIDES if round_index % 2 == 0 else SIDES[::-1]:
            result = run_side(model, side)
            runs[side].append(result)
            print(f"{side}: {result}", file=sys.stderr)

    def median(side: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[side])

    print(
        f"{args.preset} preset, compiled, medians of {args.rounds} round(s); CPU "
        f"{machine['isa']} (ATen {machine['aten']}), {os.cpu_count()} CPUs; "
        f"measured read bandwidth {machine['bandwidth'] / 1e9:.1f} GB/s\n"
    )
    print(
        "| attention | tok/s (1) | share of roofline (1) | tok/s (32) "
        "| share of roofline (32) |"
    )
    print("|---|---|---|---|---|")
    for side in SIDES:
        single, batch = median(side, "single_tok_s"), median(side, "tok_s")
        print(
            f"| {side} | {single:.1f} | {single / roofline(machine, 1):.2f} | "
            f"{batch:.1f} | {batch / roofline(machine, 32):.2f} |"
        )
    digests = {run["tokens_md5"] for side in SIDES for run in runs[side]}
    print(f"\nsingle-stream greedy tokens identical in all runs: {len(digests) == 1}")
    single_ratio = median("bridge", "single_tok_s") / median("vllm", "single_tok_s")
    batch_ratio = median("bridge", "tok_s") / median("vllm", "tok_s")
    print(
        f"bridge / vllm: {single_ratio:.3f} (1), {batch_ratio:.3f} (32); "
        f"roofline {roofline(machine, 1):.1f} tok/s (1), "
        f"{roofline(machine, 32):.1f} tok/s (32, {machine['matmul_dtype']} matmul "
        f"{machine['matmul_flops'] / 1e12:.3f} TFLOP/s)"
    )


if __name__ == "__main__":
    main()
