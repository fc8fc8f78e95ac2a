"""One worker vs tensor parallel vs pipeline parallel on this machine, and
what one all-reduce costs.

Layouts (each engine in a fresh process, alternating rounds, vllm-bridge
at its defaults otherwise): TP=1, TP=2, PP=2 (multiprocessing executor),
and TP=2 on Ray (`distributed_executor_backend="ray"`: where no Ray
cluster runs, vllm-bridge starts one on this machine). Per layout: single-stream
and 16-concurrent greedy tok/s (128 tokens each, ignore_eos), and whether
the greedy tokens equal TP=1's (float32 by default, where layouts must
agree). Then two real ranks of vLLM's CPU communicator time one
all-reduce of a decode step's activations (shared memory where the kernel
library has it, gloo), and the all-reduce time per step this gives for the
model (2 per layer under TP).

    python benchmarks/parallel_layouts.py --preset 0.5b --modes eager compiled
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
sys.path.insert(0, str(REPO))

from benchmarks.load import free_port  # noqa: E402
from benchmarks.throughput import child_result, model_dir, prompts  # noqa: E402

# layout: (tensor_parallel_size, pipeline_parallel_size, executor backend;
# None: vLLM's default)
LAYOUTS = {
    "tp1": (1, 1, None),
    "tp2": (2, 1, None),
    "pp2": (1, 2, None),
    "tp2_ray": (2, 1, "ray"),
}
OUTPUT_TOKENS = 128
CONCURRENT = 16
ALLREDUCE_REPEATS = 2000


def engine_child(model: str, mode: str, layout: str, dtype: str) -> None:
    from vllm import LLM, SamplingParams

    tp, pp, backend = LAYOUTS[layout]
    llm = LLM(
        model=model,
        dtype=dtype,
        enforce_eager=mode == "eager",
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        distributed_executor_backend=backend,
    )
    params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    llm.generate(prompts()[:2], SamplingParams(max_tokens=8), use_tqdm=False)
    started = time.perf_counter()
    batch = llm.generate(prompts()[:CONCURRENT], params, use_tqdm=False)
    batch_s = time.perf_counter() - started
    started = time.perf_counter()
    single = llm.generate(prompts()[:1], params, use_tqdm=False)
    single_s = time.perf_counter() - started
    result = {
        "tok_s": sum(len(o.outputs[0].token_ids) for o in batch) / batch_s,
        "single_tok_s": len(single[0].outputs[0].token_ids) / single_s,
        "tokens": [list(o.outputs[0].token_ids) for o in batch],
    }
    print("RESULT " + json.dumps(result), flush=True)


def allreduce_child(rank: int, port: int, rows: int, width: int, dtype: str) -> None:
    """One rank: the mean time of an all-reduce of ``rows x width``, through
    vLLM's CPU communicator (its shared-memory path where available) and
    through plain gloo."""
    import torch
    import torch.distributed as dist
    import vllm._custom_ops  # noqa: F401  (loads the shared-memory kernels)
    from vllm.distributed.device_communicators import cpu_communicator

    from vllm_bridge.patches.catalogue import REGISTRY

    REGISTRY.apply("worker")
    os.environ["VLLM_DIST_IDENT"] = f"allreduce-bench-{port}"
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    group = dist.group.WORLD
    communicator = cpu_communicator.CpuCommunicator(
        group, torch.device("cpu"), group, unique_name="tp:0"
    )
    values = torch.randn(rows, width).to(getattr(torch, dtype))
    timings = {}
    paths = {"gloo": lambda: dist.all_reduce(values, group=group)}
    if isinstance(communicator.dist_module, cpu_communicator._CPUSHMDistributed):
        paths["shared_memory"] = lambda: communicator.all_reduce(values)
    for name, run in paths.items():
        for _ in range(50):
            run()
        dist.barrier()
        started = time.perf_counter()
        for _ in range(ALLREDUCE_REPEATS):
            run()
        timings[name] = (time.perf_counter() - started) / ALLREDUCE_REPEATS
    if rank == 0:
        print("RESULT " + json.dumps(timings), flush=True)
    dist.destroy_process_group()


def time_allreduce(rows: int, width: int, dtype: str) -> dict[str, float]:
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--allreduce-child",
                str(rank),
                port,
                str(rows),
                str(width),
                dtype,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=600) for rank in ranks]
    first = subprocess.CompletedProcess(ranks[0].args, ranks[0].returncode, *outputs[0])
    return child_result(first, f"all-reduce {rows}x{width} failed")


def run_layout(model: Path, mode: str, layout: str, dtype: str, logs: Path) -> dict:
    log = logs / f"{model.name}-{mode}-{layout}-{time.time_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(model), mode, layout, dtype],
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            check=False,
        )
    return child_result(proc, f"{layout} {mode} failed, see {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="0.5b")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=4)
    parser.add_argument("--allreduce-child", nargs=5)
    args = parser.parse_args()
    if args.child:
        engine_child(*args.child)
        return
    if args.allreduce_child:
        rank, port, rows, width, dtype = args.allreduce_child
        allreduce_child(int(rank), int(port), int(rows), int(width), dtype)
        return

    from vllm_bridge.device.isa import detect

    model = model_dir(args.preset)
    config = json.loads((model / "config.json").read_text())
    logs = REPO / "benchmarks" / "results" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.rounds):
        for mode in args.modes:
            for layout in args.layouts:
                result = run_layout(model, mode, layout, args.dtype, logs)
                runs.setdefault((mode, layout), []).append(result)
                print(
                    f"{mode} {layout}: {result['single_tok_s']:.1f} single, "
                    f"{result['tok_s']:.1f} x{CONCURRENT} tok/s",
                    file=sys.stderr,
                )
    print(
        f"\n{args.preset} preset ({args.dtype}), {os.cpu_count()} CPUs, "
        f"ISA class {detect().effective}, {args.rounds} alternating rounds\n"
    )
    print(
        f"| mode | layout | single tok/s | x{CONCURRENT} tok/s | vs TP=1 "
        "| tokens = TP=1 |"
    )
    print("|---|---|---|---|---|---|")
    for mode in args.modes:
        base = runs.get((mode, "tp1"))
        for layout in args.layouts:
            results = runs[(mode, layout)]
            single = statistics.mean(r["single_tok_s"] for r in results)
            batch = statistics.mean(r["tok_s"] for r in results)
            ratio = same = "-"
            if base:
                ratio = f"{batch / statistics.mean(r['tok_s'] for r in base):.2f}x"
                same = str(results[0]["tokens"] == base[0]["tokens"])
            print(
                f"| {mode} | {layout} | {single:.1f} | {batch:.1f} | {ratio} | {same} |"
            )

    width, layers = config["hidden_size"], config["num_hidden_layers"]
    print(f"\nAll-reduce of [tokens, {width}] {args.dtype}, 2 ranks, 1 thread each:\n")
    print("| tokens | path | us per all-reduce | ms per step (2 x layers) |")
    print("|---|---|---|---|")
    for rows in (1, CONCURRENT, 256):
        for path, seconds in time_allreduce(rows, width, args.dtype).items():
            per_step_ms = seconds * 2 * layers * 1e3
            print(f"| {rows} | {path} | {seconds * 1e6:.1f} | {per_step_ms:.2f} |")


if __name__ == "__main__":
    main()
