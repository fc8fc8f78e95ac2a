"""Start an engine N times with defaults and count worker deaths.

Each start is a fresh process running LLM(model) and a short greedy
generate. `--builtin` runs vLLM's built-in CPU platform instead (vllm-bridge
disabled, only the KV-cache size fixed so that it can start), to show the
failure rate the AMX permission request removes.

    python scripts/stress_starts.py --starts 20
    python scripts/stress_starts.py --starts 10 --builtin
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
from vllm import LLM, SamplingParams
if __name__ == "__main__":
    llm = LLM(model={model!r})
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    out = llm.generate(["Hello world"] * 4, params, use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == 16 for o in out)
    print("GENERATED OK", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--builtin", action="store_true")
    parser.add_argument("--preset", default="tiny")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "src"))
    from vllm_bridge_testmodel import build_model

    # bfloat16: the dtype on which vLLM's CPU attention takes the AMX kernel.
    model = build_model(
        args.preset, REPO / ".cache" / "models" / f"{args.preset}-bfloat16", "bfloat16"
    )
    env = dict(os.environ)
    if args.builtin:
        env.update(VLLM_BRIDGE_DISABLE="1", VLLM_CPU_KVCACHE_SPACE="1")
    log_dir = REPO / "benchmarks" / "results" / "stress"
    log_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for index in range(args.starts):
        started = time.perf_counter()
        log = log_dir / f"{'builtin' if args.builtin else 'bridge'}-{index}.log"
        with log.open("w") as out:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD.format(model=str(model))],
                env=env,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                check=False,
            )
        ok = proc.returncode == 0 and "GENERATED OK" in proc.stdout
        text = log.read_text(errors="replace")
        died = "died" in text or "exitcode=-4" in text or "SIGILL" in text
        failures += not ok
        print(
            f"start {index + 1}/{args.starts}: {'ok' if ok else 'FAILED'} "
            f"rc={proc.returncode} worker_death={died} "
            f"{time.perf_counter() - started:.0f}s log={log}",
            flush=True,
        )
    print(f"{args.starts - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
