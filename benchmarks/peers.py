"""vllm-bridge at its defaults vs vLLM's built-in CPU platform, llama.cpp and
Hugging Face transformers, on the same 0.5b weights and the same prompts.

    python benchmarks/peers.py --rounds 2 [--int8]

One command: it installs llama-cpp-python (built from PyPI, about 5 min on
2 cores) and gguf into .cache/peers-venv, converts the model to a bf16 GGUF
file with benchmarks/to_gguf.py, and alternates the engines round by round,
each in a fresh process. Reports single-stream tok/s (one prompt, 128
greedy tokens), 32-concurrent tok/s (32 prompts x 128 tokens at once; "-"
for llama.cpp, whose Python binding runs one sequence at a time), time to
the first token and start-up time; medians over the rounds. --int8 adds
vllm-bridge with --quantization bridge_int8 and llama.cpp on a Q8_0 file.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]
PEER_PACKAGES = ("llama-cpp-python==0.3.36", "gguf==0.19.0")
# llama.cpp compiles for the CPU it is built on; under the ISA switch it is
# built for that class instead (its own build options, ggml/CMakeLists.txt).
LLAMA_CPP_CMAKE_ARGS = {
    "avx2": "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON "
    "-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF "
    "-DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF",
}
THREADS = len(os.sched_getaffinity(0))
HUGE_PAGE_BYTES = 2 << 20
MADV_COLLAPSE = 25  # linux/mman.h, Linux 6.1+
ENGINES = ("bridge", "builtin", "llama.cpp", "transformers")
INT8_ENGINES = ("bridge-int8", "llama.cpp-q8_0")
"""With --int8: vllm-bridge with --quantization bridge_int8 and llama.cpp on
a Q8_0 GGUF file of the same weights."""


def peers_python(isa: str) -> Path:
    """A venv with llama-cpp-python built for ``isa`` ('auto': this CPU)."""
    venv = REPO / ".cache" / ("peers-venv" if isa == "auto" else f"peers-venv-{isa}")
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import llama_cpp, gguf"], check=False)
    if probe.returncode != 0:
        env = dict(os.environ)
        if isa != "auto":
            env["CMAKE_ARGS"] = LLAMA_CPP_CMAKE_ARGS[isa]
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-cache-dir",
                *PEER_PACKAGES,
            ],
            check=True,
            env=env,
        )
    return python


def gguf_file(model: Path, python: Path, kind: str = "bf16") -> Path:
    suffix = "" if kind == "bf16" else f"-{kind}"
    out = model.parent / f"{model.name}{suffix}.gguf"
    if not out.exists():
        subprocess.run(
            [
                str(python),
                str(REPO / "benchmarks" / "to_gguf.py"),
                str(model),
                str(out),
                "--type",
                kind,
            ],
            check=True,
        )
    return out


def without_extra_buffers() -> None:
    """Load weights without llama.cpp's extra buffer types (AMX, repacked
    layouts): with them, llama-cpp-python 0.3.36 segfaults at the first
    evaluation of the Q8_0 file on the AMX machine (the bf16 file runs)."""
    import llama_cpp
    import llama_cpp.llama

    default = llama_cpp.llama_model_default_params

    def params() -> object:
        model_params = default()
        model_params.use_extra_bufts = False
        return model_params

    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def llama_cpp_q8_0_child(gguf_path: str) -> dict[str, float]:
    without_extra_buffers()
    return llama_cpp_child(gguf_path)


def llama_cpp_child(gguf_path: str) -> dict[str, float]:
    from llama_cpp import Llama

    from benchmarks.throughput import OUTPUT_TOKENS, prompts

    started = time.perf_counter()
    llm = Llama(model_path=gguf_path, n_threads=THREADS, n_ctx=512, verbose=False)
    start_s = time.perf_counter() - started

    def greedy(prompt: str, tokens: int) -> None:
        llm.reset()
        llm.eval(llm.tokenize(prompt.encode(), add_bos=False))
        for _ in range(tokens):  # no EOS check: a fixed number of tokens
            llm.eval([int(llm.sample(temp=0.0))])

    greedy(prompts()[2], 8)  # warm-up
    started = time.perf_counter()
    greedy(prompts()[0], OUTPUT_TOKENS)
    single_s = time.perf_counter() - started
    started = time.perf_counter()
    llm.reset()
    llm.eval(llm.tokenize(prompts()[1].encode(), add_bos=False))
    llm.sample(temp=0.0)
    ttft_s = time.perf_counter() - started
    return {
        "single_tok_s": OUTPUT_TOKENS / single_s,
        "ttft_s": ttft_s,
        "start_s": start_s,
    }


def transformers_child(model: str) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.throughput import OUTPUT_TOKENS, prompts

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16)
    start_s = time.perf_counter() - started

    def generate(batch: list[str], tokens: int) -> float:
        inputs = tokenizer(batch, return_tensors="pt", padding=True)
        started = time.perf_counter()
        net.generate(
            **inputs,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
        return time.perf_counter() - started

    with torch.inference_mode():
        generate(prompts()[:2], 4)  # warm-up
        batch_s = generate(prompts(), OUTPUT_TOKENS)
        single_s = generate(prompts()[:1], OUTPUT_TOKENS)
        ttft_s = generate(prompts()[1:2], 1)
    return {
        "tok_s": len(prompts()) * OUTPUT_TOKENS / batch_s,
        "single_tok_s": OUTPUT_TOKENS / single_s,
        "ttft_s": ttft_s,
        "start_s": start_s,
    }


def read_bandwidth(data: torch.Tensor) -> float:
    """Bytes per second of the best of 5 sums over ``data``."""
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        data.sum()
        seconds.append(time.perf_counter() - started)
    return data.nbytes / min(seconds)


def collapse_into_huge_pages(data: torch.Tensor) -> int:
    """Collapse the memory of ``data`` into 2 MB pages in place; the bytes
    the kernel put on them (0 where it cannot)."""
    import ctypes

    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    start = -(-data.data_ptr() // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    end = (data.data_ptr() + data.nbytes) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    return sum(
        HUGE_PAGE_BYTES
        for region in range(start, end, HUGE_PAGE_BYTES)
        if madvise(region, HUGE_PAGE_BYTES, MADV_COLLAPSE) == 0
    )


def machine_child(model: str) -> dict[str, float]:
    """Read bandwidth (best of 5 sums over 1 GiB, on 4 KB pages and again
    once collapsed into 2 MB pages, which read faster on some machines: the
    bound is the faster of the two) and matmul rate (best of 5 products of 2048 x 2048
    matrices) in the dtype the linear layers compute in on this ISA class:
    bf16 where the CPU has bf16 arithmetic, float32 elsewhere. The
    roofline's inputs, measured under the same ISA caps."""
    import torch

    from vllm_bridge.device.isa import detect

    torch.set_num_threads(THREADS)
    data = torch.ones(2**28, dtype=torch.float32)
    bandwidth_4k = read_bandwidth(data)
    huge_page_bytes = collapse_into_huge_pages(data)
    bandwidth_2m = read_bandwidth(data)
    bandwidth = max(bandwidth_4k, bandwidth_2m)
    cpu_isa = detect()
    dtype = torch.bfloat16 if cpu_isa.traits.bf16_arithmetic else torch.float32
    a = torch.randn(2048, 2048, dtype=dtype)
    b = torch.randn(2048, 2048, dtype=dtype)
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        a @ b
        seconds.append(time.perf_counter() - started)
    weights = sum(f.stat().st_size for f in Path(model).glob("*.safetensors"))
    return {
        "bandwidth": bandwidth,
        "bandwidth_4k_pages": bandwidth_4k,
        "huge_page_bytes": huge_page_bytes,
        "matmul_flops": 2 * 2048**3 / min(seconds),
        "matmul_dtype": str(dtype).removeprefix("torch."),
        "weight_bytes": weights,
        "isa": cpu_isa.describe(),
        "aten": torch.backends.cpu.get_cpu_capability(),
    }


def roofline(machine: dict[str, float], batch: int) -> float:
    """tok/s if every step only read the weights once and ran the matmuls
    at the measured rate: bf16 weights, 2 flops per parameter per token."""
    read_s = machine["weight_bytes"] / machine["bandwidth"]
    compute_s = machine["weight_bytes"] * batch / machine["matmul_flops"]
    return batch / max(read_s, compute_s)


def run_child(python: Path, engine: str, target: Path) -> dict[str, float]:
    proc = subprocess.run(
        [str(python), __file__, "--child", engine, str(target)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    from benchmarks.throughput import child_result

    return child_result(proc, f"{engine} failed:\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--isa",
        default="auto",
        choices=["auto", *LLAMA_CPP_CMAKE_ARGS],
        help="run every engine as on a CPU of this class (VLLM_BRIDGE_ISA; "
        "llama.cpp built for it)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="add vllm-bridge with --quantization bridge_int8 and llama.cpp "
        "on a Q8_0 GGUF file",
    )
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "TARGET"))
    args = parser.parse_args()
    if args.child:
        engine, target = args.child
        child = {
            "llama.cpp": llama_cpp_child,
            "llama.cpp-q8_0": llama_cpp_q8_0_child,
            "transformers": transformers_child,
            "machine": machine_child,
        }[engine]
        print("RESULT " + json.dumps(child(target)), flush=True)
        return
    sys.path.insert(0, str(REPO))
    from benchmarks.throughput import model_dir, run_side

    if args.isa != "auto":
        os.environ["VLLM_BRIDGE_ISA"] = args.isa  # every child starts with it
    model = model_dir("0.5b")
    python = peers_python(args.isa)
    gguf_path = gguf_file(model, python)
    engines = ENGINES + (INT8_ENGINES if args.int8 else ())
    q8_path = gguf_file(model, python, "q8_0") if args.int8 else None
    log_dir = REPO / "benchmarks" / "results"
    log_dir.mkdir(parents=True, exist_ok=True)
    machine = run_child(Path(sys.executable), "machine", model)
    runs: dict[str, list[dict[str, float]]] = {engine: [] for engine in engines}
    for round_index in range(args.rounds):
        order = engines if round_index % 2 == 0 else engines[::-1]
        for engine in order:
            if engine in ("bridge", "builtin", "bridge-int8"):
                result = run_side(model, "compiled", engine, log_dir)
            elif engine == "llama.cpp":
                result = run_child(python, engine, gguf_path)
            elif engine == "llama.cpp-q8_0":
                result = run_child(python, engine, q8_path)
            else:
                result = run_child(Path(sys.executable), engine, model)
            runs[engine].append(result)
            print(f"{engine}: {result}", file=sys.stderr)

    def median(engine: str, key: str, digits: int) -> str:
        values = [run[key] for run in runs[engine] if key in run]
        return f"{statistics.median(values):.{digits}f}" if values else "-"

    print(
        f"0.5b preset, bf16, {THREADS} threads, medians of {args.rounds} round(s); "
        f"CPU {machine['isa']} (ATen {machine['aten']}); measured read bandwidth "
        f"{machine['bandwidth'] / 1e9:.1f} GB/s (on 4 KB pages "
        f"{machine['bandwidth_4k_pages'] / 1e9:.1f}; of the 1 GiB read "
        f"{machine['huge_page_bytes'] / 2**30:.2f} GiB on 2 MB pages), "
        f"{machine['matmul_dtype']} matmul "
        f"{machine['matmul_flops'] / 1e12:.3f} TFLOP/s, weights "
        f"{machine['weight_bytes'] / 1e9:.2f} GB\n"
    )
    print(
        "| engine | tok/s (1) | tok/s (32) | TTFT s | start s |\n|---|---|---|---|---|"
    )
    for engine in engines:
        print(
            f"| {engine} | {median(engine, 'single_tok_s', 1)} | "
            f"{median(engine, 'tok_s', 1)} | {median(engine, 'ttft_s', 3)} | "
            f"{median(engine, 'start_s', 1)} |"
        )
    print(
        f"| roofline | {roofline(machine, 1):.1f} | {roofline(machine, 32):.1f} | | |"
    )

    def value(engine: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[engine])

    single, batch = value("bridge", "single_tok_s"), value("bridge", "tok_s")
    print(
        f"\nvllm-bridge vs built-in: {single / value('builtin', 'single_tok_s'):.2f} "
        f"(1), {batch / value('builtin', 'tok_s'):.2f} (32); vs llama.cpp: "
        f"{single / value('llama.cpp', 'single_tok_s'):.2f} (1); share of the "
        f"roofline: {single / roofline(machine, 1):.2f} (1), "
        f"{batch / roofline(machine, 32):.2f} (32)"
    )
    if args.int8:
        int8 = value("bridge-int8", "single_tok_s")
        print(
            f"bridge_int8 vs llama.cpp Q8_0: "
            f"{int8 / value('llama.cpp-q8_0', 'single_tok_s'):.2f} (1); vs "
            f"vllm-bridge unquantized: {int8 / single:.2f} (1), "
            f"{value('bridge-int8', 'tok_s') / batch:.2f} (32)"
        )


if __name__ == "__main__":
    main()
