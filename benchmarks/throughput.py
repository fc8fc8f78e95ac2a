"""vllm-bridge at its defaults vs vLLM's built-in CPU platform, side by side.

Alternating runs (bridge, built-in, bridge, ...), each engine in a fresh
process, same model, same prompts: 32 prompts x 128 output tokens at once,
then one prompt x 128 tokens alone (single stream, the median of three
generates since 2026-12-07; one before), greedy, ignore_eos, and the time to
the first token of one prompt. The built-in platform gets the
manual fixes it needs to run at all (benchmarks/builtin_fixes.py). Prints a
Markdown table of tokens/s and the ratios bridge / built-in per cell.

    python benchmarks/throughput.py --presets tiny 0.5b --modes eager compiled
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
MODELS = REPO / ".cache" / "models"
PRESET_DTYPES = {"tiny": "float32", "0.5b": "bfloat16"}
SIDES = ("bridge", "builtin")
N_PROMPTS = 32
OUTPUT_TOKENS = 128
SINGLE_STREAM_REPEATS = 3

TOPICS = [
    "the history of the river",
    "a recipe for bread",
    "the rules of chess",
    "how engines work",
    "a walk in the forest",
    "the price of tea",
    "a letter to a friend",
    "the weather tomorrow",
]


def prompts() -> list[str]:
    return [
        f"Write about {TOPICS[i % len(TOPICS)]}, part {i}:" for i in range(N_PROMPTS)
    ]


def model_dir(preset: str) -> Path:
    from vllm_bridge_testmodel import build_model

    dtype = PRESET_DTYPES[preset]
    return build_model(preset, MODELS / f"{preset}-{dtype}", dtype=dtype)


def child(model: str, mode: str, side: str) -> None:
    """One engine, one measured generate; prints a RESULT line."""
    from vllm import LLM, SamplingParams

    kwargs: dict[str, object] = {"enforce_eager": mode == "eager"}
    if side == "bridge-int8":
        kwargs["quantization"] = "bridge_int8"
    if side == "bridge-gptq":
        # a GPTQ copy stores float16 non-quantized weights; vLLM's 4-bit CPU
        # GEMM runs with bf16 activations
        kwargs["dtype"] = "bfloat16"
    if side == "builtin":
        from benchmarks.builtin_fixes import WORKER_CLS

        kwargs["worker_cls"] = WORKER_CLS
    started = time.perf_counter()
    llm = LLM(model=model, **kwargs)
    start_s = time.perf_counter() - started
    from vllm.platforms import current_platform

    llm.generate(prompts()[:4], SamplingParams(max_tokens=8), use_tqdm=False)
    params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    started = time.perf_counter()
    outputs = llm.generate(prompts(), params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    # One stream's rate moves by several percent from one generate to the
    # next on a VM: the median of three.
    single_rates = []
    for _ in range(SINGLE_STREAM_REPEATS):
        started = time.perf_counter()
        single = llm.generate(prompts()[:1], params, use_tqdm=False)
        single_rates.append(
            len(single[0].outputs[0].token_ids) / (time.perf_counter() - started)
        )
    first_token = SamplingParams(temperature=0.0, max_tokens=1)
    started = time.perf_counter()
    llm.generate(prompts()[1:2], first_token, use_tqdm=False)
    ttft_s = time.perf_counter() - started
    result = {
        "platform": type(current_platform).__name__,
        "tok_s": tokens / elapsed,
        "single_tok_s": statistics.median(single_rates),
        "ttft_s": ttft_s,
        "start_s": start_s,
        "tokens": tokens,
    }
    if side != "builtin":
        (report,) = llm.collective_rpc("bridge_report")
        result["model_load_resident_bytes"] = report["model_load_resident_bytes"]
        result["int8_weight_bytes"] = report["int8_weight_bytes"]
    print("RESULT " + json.dumps(result), flush=True)


def run_side(
    model: Path,
    mode: str,
    side: str,
    log_dir: Path,
    env_overrides: dict[str, str] | None = None,
) -> dict:
    # The built-in side's worker imports benchmarks.builtin_fixes.
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_overrides or {})}
    if side == "builtin":
        from benchmarks.builtin_fixes import KV_CACHE_GIB

        env.update(
            VLLM_BRIDGE_DISABLE="1",
            VLLM_CPU_KVCACHE_SPACE=KV_CACHE_GIB,
            # the ISA switch (VLLM_BRIDGE_ISA), if set, for vLLM's own platform
            PYTHONPATH=os.pathsep.join(
                [str(REPO / "benchmarks" / "builtin_isa"), str(REPO)]
            ),
        )
    log = log_dir / f"{model.name}-{mode}-{side}-{time.time_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(model), mode, side],
            env=env,
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            check=False,
        )
    return child_result(proc, f"{side} {mode} {model.name} failed, see {log}")


def add_ab_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the A/B benchmarks built on this one."""
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--preset", default="0.5b")
    parser.add_argument("--isa", default="auto", help="VLLM_BRIDGE_ISA for every run")


def prepare_ab(args: argparse.Namespace) -> tuple[Path, str]:
    """Set the ISA switch for every run, build the preset, and measure the
    machine: the model directory and a line naming the machine class."""
    from benchmarks.peers import THREADS, run_child

    if args.isa != "auto":
        os.environ["VLLM_BRIDGE_ISA"] = args.isa
    model = model_dir(args.preset)
    machine = run_child(Path(sys.executable), "machine", model)
    return model, (
        f"{args.preset} preset, {THREADS} threads; CPU {machine['isa']}, "
        f"VLLM_BRIDGE_ISA={args.isa}; measured read bandwidth "
        f"{machine['bandwidth'] / 1e9:.1f} GB/s"
    )


SPEED_ROWS = (
    ("single_tok_s", "tok/s, 1 stream", 1),
    ("tok_s", "tok/s, 32 concurrent", 1),
    ("ttft_s", "TTFT s", 3),
)


def print_speed_table(
    medians: dict[str, dict[str, float]], left: str, right: str, ratio: str
) -> None:
    """Markdown rows of ``SPEED_ROWS`` for two sides' medians, with the
    ratio ``left / right`` headed ``ratio``."""
    print(f"| | {left} | {right} | {ratio} |")
    print("|---|---|---|---|")
    for key, label, digits in SPEED_ROWS:
        a, b = medians[left][key], medians[right][key]
        cells = (f"{a:.{digits}f}", f"{b:.{digits}f}", f"{a / b:.2f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


def child_result(proc: subprocess.CompletedProcess, failure: str) -> dict:
    """The JSON of a child process's last RESULT line; RuntimeError(failure)
    if it failed or printed none."""
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(failure)
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "0.5b"])
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "SIDE"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    sys.path.insert(0, str(REPO))
    log_dir = REPO / "benchmarks" / "results"
    log_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for preset in args.presets:
        model = model_dir(preset)
        for mode in args.modes:
            runs: dict[str, list[dict]] = {side: [] for side in SIDES}
            for round_index in range(args.rounds):
                order = SIDES if round_index % 2 == 0 else SIDES[::-1]
                for side in order:
                    result = run_side(model, mode, side, log_dir)
                    runs[side].append(result)
                    print(f"{preset} {mode} {side}: {result}", file=sys.stderr)

            def median(key: str, side: str, runs: dict = runs) -> float:
                return statistics.median(r[key] for r in runs[side])

            cells = [preset, mode]
            for key in ("tok_s", "single_tok_s"):
                bridge, builtin = median(key, "bridge"), median(key, "builtin")
                cells += [f"{bridge:.1f}", f"{builtin:.1f}", f"{bridge / builtin:.2f}"]
            for key, digits in (("ttft_s", 3), ("start_s", 0)):
                cells += [f"{median(key, side):.{digits}f}" for side in SIDES]
            rows.append("| " + " | ".join(cells) + " |")
    print(
        "| preset | mode | bridge tok/s (32) | built-in tok/s (32) | ratio "
        "| bridge tok/s (1) | built-in tok/s (1) | ratio "
        "| bridge TTFT s | built-in TTFT s | bridge start s | built-in start s |"
    )
    print("|" + "---|" * 12)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
