"""Does a prompt cost less mixed into a decode step, or in a step of its
own? The measurement behind the SLO scheduler having no separate
prefill/decode mode (docs/scheduling.md).

    python benchmarks/mix_or_separate.py --preset 0.5b --prompts 256,1024

Runs LLM(model) with the engine core in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) and times single engine steps
(LLMEngine.step, which schedules, runs the model and handles the output):

- decode alone: ``--streams`` sequences decoding, nothing else;
- prompt alone: one prompt of P tokens, nothing else running;
- mixed: the same prompt arriving beside the decoding sequences (vLLM's
  scheduler puts all of it into one step with them).

Separating costs "prompt alone + decode alone" per prompt; mixing costs
"mixed". Each is the median of ``--repeats`` measurements. The engine runs
the SLO scheduler with an objective no step reaches, so that nothing is
limited. With ``--record FILE``, a last phase serves traffic under a
``--record-objective-ms`` objective (the decoding streams, and a prompt of
64-1,024 tokens arriving every 10 steps) and writes the steps the scheduler
measured (shape and time): tests/unit/test_step_cost_recorded.py fits them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEVER_REACHED_MS = 60_000.0
SHORT_PROMPT = "a short chat prompt of a few words"


def timed_step(engine) -> float:
    started = time.perf_counter()
    engine.step()
    return time.perf_counter() - started


def drain(engine) -> None:
    while engine.has_unfinished_requests():
        engine.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="0.5b")
    parser.add_argument("--prompts", default="256,1024", help="prompt lengths")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", type=Path, help="write the recorded steps here")
    parser.add_argument("--record-objective-ms", type=float, default=100.0)
    parser.add_argument("--record-steps", type=int, default=300)
    args = parser.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CACHE_ROOT", str(REPO / ".cache" / "vllm"))
    sys.path.insert(0, str(REPO))
    from vllm import LLM, SamplingParams

    from benchmarks.peers import THREADS, run_child
    from benchmarks.throughput import model_dir

    model = model_dir(args.preset)
    machine = run_child(Path(sys.executable), "machine", model)
    llm = LLM(
        model=str(model),
        additional_config={"tpot_objective_ms": NEVER_REACHED_MS},
    )
    engine = llm.llm_engine
    vocab = llm.get_tokenizer().vocab_size
    decode = SamplingParams(temperature=0.0, max_tokens=4096, ignore_eos=True)
    prefill = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    request_ids = iter(range(10**9))

    def add(prompt_tokens: list[int], params: SamplingParams) -> str:
        request_id = str(next(request_ids))
        engine.add_request(request_id, {"prompt_token_ids": prompt_tokens}, params)
        return request_id

    def prompt_of(length: int, seed: int) -> list[int]:
        # Distinct tokens per prompt: no prefix-cache hits between repeats.
        return [(seed * 7919 + i * 31) % (vocab - 10) + 5 for i in range(length)]

    results = []
    for length in [int(v) for v in args.prompts.split(",")]:
        alone, decode_only, mixed = [], [], []
        for repeat in range(args.repeats):
            seed = length * 1000 + repeat
            add(prompt_of(length, seed), prefill)
            alone.append(timed_step(engine))
            drain(engine)
            streams = [
                add(prompt_of(48, seed * 100 + s), decode) for s in range(args.streams)
            ]
            for _ in range(4):
                engine.step()  # prefill of the streams, then decoding
            decode_only.append(statistics.median(timed_step(engine) for _ in range(3)))
            add(prompt_of(length, seed + 500), prefill)
            mixed.append(timed_step(engine))
            engine.abort_request(streams)
            drain(engine)
        row = {
            "prompt_tokens": length,
            "prompt_alone_ms": 1e3 * statistics.median(alone),
            "decode_alone_ms": 1e3 * statistics.median(decode_only),
            "mixed_ms": 1e3 * statistics.median(mixed),
        }
        row["separate_ms"] = row["prompt_alone_ms"] + row["decode_alone_ms"]
        row["mixed_vs_separate"] = row["mixed_ms"] / row["separate_ms"]
        results.append(row)
        print(json.dumps(row), flush=True)

    scheduler = engine.engine_core.engine_core.scheduler
    print()
    print(
        f"{args.preset} preset, {args.streams} decoding streams, {THREADS} threads; "
        f"CPU {machine['isa']}; read bandwidth {machine['bandwidth'] / 1e9:.1f} GB/s; "
        f"median of {args.repeats}"
    )
    print()
    print(
        "| prompt tokens | prompt alone ms | decode alone ms | separate ms "
        "| mixed ms | mixed / separate |"
    )
    print("|---|---|---|---|---|---|")
    for row in results:
        print(
            f"| {row['prompt_tokens']} | {row['prompt_alone_ms']:.0f} "
            f"| {row['decode_alone_ms']:.0f} | {row['separate_ms']:.0f} "
            f"| {row['mixed_ms']:.0f} | {row['mixed_vs_separate']:.2f} |"
        )
    if args.record:
        # The objective is read once, at start; this phase needs a real one.
        scheduler.objective_s = args.record_objective_ms / 1e3
        streams = [add(prompt_of(48, 10**6 + s), decode) for s in range(args.streams)]
        rng = random.Random(0)
        for step in range(args.record_steps):
            if step % 10 == 5:
                add(prompt_of(rng.randint(64, 1024), 10**7 + step), prefill)
            engine.step()
        engine.abort_request(streams)
        drain(engine)
        steps = [
            {**dataclasses.asdict(shape), "seconds": seconds}
            for shape, seconds in scheduler.cost_model.recorded()
        ]
        args.record.write_text(
            json.dumps(
                {
                    "what": f"{args.preset} preset steps recorded by the SLO scheduler "
                    f"(benchmarks/mix_or_separate.py --record-objective-ms "
                    f"{args.record_objective_ms:g}), {THREADS} threads, "
                    f"{machine['isa']}",
                    "steps": steps,
                },
                indent=0,
            )
        )
        print(f"\nrecorded {len(steps)} steps in {args.record}")


if __name__ == "__main__":
    main()
