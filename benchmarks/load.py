"""Load on a real `vllm serve` with the plugin active: N concurrent
streaming clients (the official openai async client) send M requests in
all. Reports requests sent / completed / failed / lost, tokens, p50/p99
time to first token and inter-token latency, and the resident memory of the
server's processes after warm-up and at the end.

    python benchmarks/load.py --preset tiny --concurrency 64 --requests 5000
    python benchmarks/load.py --preset 0.5b --concurrency 32 --requests 500

A request counts as completed when its stream ends with finish_reason
"length" and a usage record of exactly --max-tokens tokens; failed when the
client gets an error; lost otherwise (a timeout, or a stream cut short).
Inter-token latency is the gap between stream chunks (a chunk may carry
more than one token when the server falls behind).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import openai
import psutil

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / ".cache" / "models"
PRESET_DTYPES = {"tiny": "float32", "0.5b": "bfloat16"}
START_TIMEOUT_S = 900
REQUEST_TIMEOUT_S = 600
WORDS = ["river", "bread", "chess", "engine", "forest", "tea", "letter", "city"]


def model_dir(preset: str) -> Path:
    from vllm_bridge_testmodel import build_model

    dtype = PRESET_DTYPES[preset]
    return build_model(preset, MODELS / f"{preset}-{dtype}", dtype=dtype)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    model: Path, log_path: Path, extra_args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "vllm"),
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra_args,
        ],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"vllm serve exited {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2):
                return process, base_url
        except OSError:
            time.sleep(1)
    process.kill()
    raise SystemExit(f"vllm serve not healthy in {START_TIMEOUT_S}s; see {log_path}")


def server_rss_bytes(server: subprocess.Popen) -> int:
    root = psutil.Process(server.pid)
    return sum(
        process.memory_info().rss for process in [root, *root.children(recursive=True)]
    )


@dataclass
class Tally:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


async def one_request(
    client: openai.AsyncOpenAI, model: str, index: int, max_tokens: int, tally: Tally
) -> None:
    prompt = " ".join(WORDS[(index + k) % len(WORDS)] for k in range(8 + index % 24))
    tally.sent += 1
    started = time.perf_counter()
    last = started
    tokens = 0
    finish = None
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            stream = await client.completions.create(
                model=model,
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            async for chunk in stream:
                if chunk.usage is not None:
                    tokens = chunk.usage.completion_tokens
                if not chunk.choices:
                    continue
                now = time.perf_counter()
                if last == started:
                    tally.ttft_s.append(now - started)
                else:
                    tally.itl_s.append(now - last)
                last = now
                finish = chunk.choices[0].finish_reason or finish
    except TimeoutError:
        tally.lost += 1
        return
    except openai.APIError as error:
        tally.failed += 1
        key = f"{type(error).__name__}: {str(error)[:120]}"
        tally.errors[key] = tally.errors.get(key, 0) + 1
        return
    tally.tokens += tokens
    if finish == "length" and tokens == max_tokens:
        tally.completed += 1
    else:
        tally.lost += 1


async def drive(
    base_url: str, model: str, concurrency: int, requests: int, max_tokens: int
) -> Tally:
    client = openai.AsyncOpenAI(
        base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=None
    )
    tally = Tally()
    next_index = 0

    async def client_loop() -> None:
        nonlocal next_index
        while next_index < requests:
            index = next_index
            next_index += 1
            await one_request(client, model, index, max_tokens, tally)

    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    await client.close()
    return tally


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESET_DTYPES), default="tiny")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--warmup", type=int, default=0, help="default: concurrency x 2"
    )
    parser.add_argument("--log", type=Path, default=Path("/tmp/vllm-bridge-load.log"))
    args = parser.parse_args()
    warmup = args.warmup or args.concurrency * 2

    model = model_dir(args.preset)
    server, base_url = start_server(model, args.log)
    try:
        warm = asyncio.run(
            drive(base_url, str(model), args.concurrency, warmup, args.max_tokens)
        )
        rss_start = server_rss_bytes(server)
        started = time.perf_counter()
        tally = asyncio.run(
            drive(
                base_url, str(model), args.concurrency, args.requests, args.max_tokens
            )
        )
        elapsed = time.perf_counter() - started
        rss_end = server_rss_bytes(server)
        alive = server.poll() is None
    finally:
        server.send_signal(signal.SIGTERM)
        exit_status = server.wait(timeout=120)

    growth = (rss_end - rss_start) / rss_start
    print(
        f"{args.preset} preset, {args.concurrency} concurrent streams, "
        f"{args.requests} requests x {args.max_tokens} tokens (after {warmup} "
        f"warm-up requests, {warm.failed} failed); {platform.machine()}, "
        f"{os.cpu_count()} CPUs; log {args.log}"
    )
    print()
    print("| sent | completed | failed | lost | tokens | tok/s | req/s |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {tally.sent} | {tally.completed} | {tally.failed} | {tally.lost} | "
        f"{tally.tokens} | {tally.tokens / elapsed:.1f} | "
        f"{tally.completed / elapsed:.2f} |"
    )
    print()
    print(
        "| TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms "
        "| RSS after warm-up | RSS at end | growth |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {percentile(tally.ttft_s, 0.5):.3f} | {percentile(tally.ttft_s, 0.99):.3f} "
        f"| {1000 * percentile(tally.itl_s, 0.5):.1f} "
        f"| {1000 * percentile(tally.itl_s, 0.99):.1f} "
        f"| {rss_start / 2**20:.0f} MiB | {rss_end / 2**20:.0f} MiB "
        f"| {100 * growth:+.1f}% |"
    )
    print()
    print(
        f"server alive after the run: {alive}; exit status after SIGTERM: "
        f"{exit_status}; mean ITL {1000 * statistics.fmean(tally.itl_s or [0]):.1f} ms"
    )
    for error, count in sorted(tally.errors.items()):
        print(f"  {count} x {error}")


if __name__ == "__main__":
    main()
