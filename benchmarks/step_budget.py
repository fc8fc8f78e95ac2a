"""Where the time of one engine step goes, in ms per step.

    python benchmarks/step_budget.py --preset 0.5b --batch 1
    python benchmarks/step_budget.py --preset 0.5b --batch 32 --side builtin

Runs LLM(model) with engine core and worker in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, so there is no IPC to measure), times
the parts of each step with wrappers on the live objects, generates
``--batch`` prompts x ``--tokens`` tokens greedily and prints the mean over
the decode steps (the first two steps, prefill and warm-up, are left out):

- model forward: the model runner's ``_model_forward``
- logits: ``model.compute_logits``
- inputs and rest of execute_model: execute_model minus the two above
- sampling: the model runner's ``_sample``; rest of sample_tokens
- scheduler: ``schedule`` + ``update_from_output``
- rest of the step; and outside the step (LLM's output processing,
  detokenisation), from the wall time of the whole generate.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
PARTS = (
    "step",
    "execute_model",
    "forward",
    "logits",
    "sample_tokens",
    "sampling",
    "schedule",
    "update_from_output",
)


class StepTimer:
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)

    def timed(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.current[part] += time.perf_counter() - started
                if part == "step":
                    self.steps.append(dict(self.current))
                    self.current = defaultdict(float)

        return run


def instrument(llm: Any, timer: StepTimer) -> None:
    core = llm.llm_engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    for owner, attribute, part in (
        (core, "step_fn", "step"),
        (core.scheduler, "schedule", "schedule"),
        (core.scheduler, "update_from_output", "update_from_output"),
        (core.model_executor, "execute_model", "execute_model"),
        (core.model_executor, "sample_tokens", "sample_tokens"),
        (runner, "_model_forward", "forward"),
        (runner.model, "compute_logits", "logits"),
        (runner, "_sample", "sampling"),
    ):
        setattr(owner, attribute, timer.timed(part, getattr(owner, attribute)))


def budget(steps: list[dict[str, float]], wall_per_step: float) -> list[tuple]:
    def mean(part: str) -> float:
        return 1000 * statistics.fmean(step.get(part, 0.0) for step in steps)

    step = mean("step")
    rows = [
        ("model forward", mean("forward")),
        ("logits", mean("logits")),
        (
            "inputs and rest of execute_model",
            mean("execute_model") - mean("forward") - mean("logits"),
        ),
        ("sampling", mean("sampling")),
        ("rest of sample_tokens", mean("sample_tokens") - mean("sampling")),
        ("scheduler", mean("schedule") + mean("update_from_output")),
    ]
    rows.append(("rest of the step", step - sum(ms for _, ms in rows)))
    rows.append(("outside the step (output processing)", 1000 * wall_per_step - step))
    rows.append(("total per step", 1000 * wall_per_step))
    return rows


def print_operators(profile: torch.profiler.profile, steps: int, top: int) -> None:
    events = sorted(
        profile.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True
    )
    print("\n| operator | calls per step | self ms per step |\n|---|---|---|")
    for event in events[:top]:
        print(
            f"| {event.key} | {event.count / steps:.1f} "
            f"| {event.self_cpu_time_total / 1000 / steps:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="0.5b", choices=("tiny", "0.5b"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--mode", default="compiled", choices=("compiled", "eager"))
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also print the N operators with the most self CPU time per step "
        "(torch profiler; inductor's C++ kernels are named with "
        "cpp.enable_kernel_profile, so the timings above include its overhead)",
    )
    parser.add_argument(
        "--side",
        default="bridge",
        choices=("bridge", "builtin"),
        help="builtin: vLLM's own CPU platform, with the fixes it needs",
    )
    args = parser.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    sys.path.insert(0, str(REPO))
    kwargs: dict[str, object] = {"enforce_eager": args.mode == "eager"}
    if args.side == "builtin":
        from benchmarks.builtin_fixes import KV_CACHE_GIB, WORKER_CLS

        os.environ.update(VLLM_BRIDGE_DISABLE="1", VLLM_CPU_KVCACHE_SPACE=KV_CACHE_GIB)
        kwargs["worker_cls"] = WORKER_CLS

    from vllm import LLM, SamplingParams

    from benchmarks.throughput import model_dir, prompts

    if args.profile:
        from torch._inductor import config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True
    llm = LLM(model=str(model_dir(args.preset)), **kwargs)
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    batch = (prompts() * (args.batch // len(prompts()) + 1))[: args.batch]
    llm.generate(batch, SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    timer = StepTimer()
    instrument(llm, timer)
    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with profile if args.profile else contextlib.nullcontext():
        started = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        wall = time.perf_counter() - started
    decode = timer.steps[2:]
    wall_per_step = (wall - sum(s["step"] for s in timer.steps[:2])) / len(decode)
    print(
        f"{args.side}, {args.preset}, {args.mode}, batch {args.batch}: "
        f"{len(decode)} decode steps, {args.batch / wall_per_step:.1f} tok/s\n"
    )
    print("| part | ms per step |\n|---|---|")
    for name, ms in budget(decode, wall_per_step):
        print(f"| {name} | {ms:.2f} |")
    if args.profile:
        print_operators(profile, len(timer.steps), args.profile)


if __name__ == "__main__":
    main()
