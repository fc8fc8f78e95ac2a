"""``--quantization bridge_int8`` against the unquantized model, side by side.

    python benchmarks/quantization.py --rounds 2 [--preset 0.5b] [--isa avx2] [--gptq]

Speed and memory: alternating runs of vllm-bridge at its defaults (the
checkpoint's bf16, or what the ISA table picks) and with bridge_int8, each
engine in a fresh process, compiled, the prompts and measurements of
benchmarks/throughput.py (32 prompts x 128 greedy tokens at once, then one
alone); the worker's resident memory added by loading the model.

Quality (the presets have random weights, so agreement, not perplexity):
16 sequences x 128 tokens of the preset's corpus, teacher-forced through
Hugging Face transformers in float32 (the reference), in bf16, and with every
linear layer replaced by the int8 GEMM bridge_int8 uses on this CPU; top-1
agreement with the reference and the mean KL divergence of the next-token
distributions. The bf16 row is the noise floor: how far rounding alone moves
this model.

``--gptq`` adds a third side to the speed runs: a GPTQ 4-bit copy of the
preset (round to nearest, groups of 128, written by
vllm_bridge_testmodel.gptq) on vLLM's 4-bit CPU GEMM with bf16 activations,
the kernel an online int4 method would use (AVX-512 and AMX classes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDES = ("bridge", "bridge-int8")


def int8_copy(model: object, kernel: str) -> None:
    """Replace every nn.Linear but the output head by bridge_int8's GEMM."""
    import torch

    from vllm_bridge.quantization.int8_linear import Int8Gemm

    class Int8Linear(torch.nn.Module):
        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            self.gemm = Int8Gemm(
                linear.weight.data, kernel, linear.weight.dtype, linear.bias
            )
            self.bias = linear.bias

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # vLLM hands the GEMM [tokens, features]
            rows = x.reshape(-1, x.shape[-1]).contiguous()
            return self.gemm(rows, self.bias).reshape(*x.shape[:-1], -1)

    for module in list(model.modules()):  # type: ignore[attr-defined]
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and name != "lm_head":
                setattr(module, name, Int8Linear(child))


def quality(model_dir: Path) -> list[tuple[str, float, float, float, float]]:
    import torch
    from transformers import AutoModelForCausalLM
    from vllm.platforms import current_platform

    from vllm_bridge.device.isa import detect
    from vllm_bridge.ops import linear
    from vllm_bridge.quantization.kernel_table import choose_int8_kernel
    from vllm_bridge_testmodel.teacher_forcing import (
        agreement,
        corpus_sequences,
        hf_logits,
        logits_top1,
        mean_kl,
    )

    current_platform.import_kernels()
    sequences = corpus_sequences(model_dir)
    reference = hf_logits(model_dir, sequences, torch.float32)
    rows = []
    bf16 = hf_logits(model_dir, sequences, torch.bfloat16)
    rows.append(("bf16", bf16))
    choice = choose_int8_kernel(
        detect().effective, "auto", torch.bfloat16, linear.available()
    )
    if choice.kernel is None:
        raise SystemExit(f"bridge_int8 cannot run here: {choice.reason}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    int8_copy(model, choice.kernel)
    with torch.no_grad():
        int8 = model(torch.tensor(sequences)).logits.float()
    rows.append((f"bridge_int8 ({choice.kernel} kernel)", int8))
    top1, bf16_top1 = logits_top1(reference), logits_top1(bf16)
    return [
        (
            name,
            agreement(logits_top1(logits), top1),
            mean_kl(reference, logits),
            agreement(logits_top1(logits), bf16_top1),
            mean_kl(bf16, logits),
        )
        for name, logits in rows
    ]


def main() -> None:
    sys.path.insert(0, str(REPO))
    from benchmarks.throughput import (
        SPEED_ROWS,
        add_ab_arguments,
        prepare_ab,
        print_speed_table,
        run_side,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ab_arguments(parser)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--gptq", action="store_true")
    args = parser.parse_args()
    model, machine = prepare_ab(args)
    print(machine)
    if not args.skip_speed:
        log_dir = REPO / "benchmarks" / "results"
        log_dir.mkdir(parents=True, exist_ok=True)
        models = {side: model for side in SIDES}
        if args.gptq:
            from vllm_bridge_testmodel.gptq import write_gptq_copy

            models["bridge-gptq"] = write_gptq_copy(
                model, model.with_name(f"{args.preset}-gptq4"), group_size=128
            )
        sides = list(models)
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for round_index in range(args.rounds):
            for side in sides if round_index % 2 == 0 else sides[::-1]:
                result = run_side(models[side], "compiled", side, log_dir)
                runs[side].append(result)
                print(f"{side}: {result}", file=sys.stderr)

        def median(side: str, key: str) -> float:
            return statistics.median(run[key] for run in runs[side])

        print(f"\nmedians of {args.rounds} round(s), compiled\n")
        medians = {
            label: {key: median(side, key) for key, _, _ in SPEED_ROWS}
            for side, label in (
                ("bridge", "unquantized"),
                ("bridge-int8", "bridge_int8"),
            )
        }
        print_speed_table(medians, "bridge_int8", "unquantized", "ratio")
        base = median("bridge", "model_load_resident_bytes")
        int8 = median("bridge-int8", "model_load_resident_bytes")
        print(
            f"| worker RSS added by the weights, MiB | {int8 / 2**20:.0f} "
            f"| {base / 2**20:.0f} | {int8 / base:.2f} |"
        )
        if args.gptq:
            medians["GPTQ 4-bit"] = {
                key: median("bridge-gptq", key) for key, _, _ in SPEED_ROWS
            }
            print()
            print_speed_table(medians, "GPTQ 4-bit", "bridge_int8", "ratio")
        mib = median("bridge-int8", "int8_weight_bytes") / 2**20
        print(f"\nint8 weights and scales of the linear layers: {mib:.0f} MiB")
    print("\nteacher-forced, 16 x 128 tokens, transformers\n")
    print(
        "| run | top-1 vs float32 | KL vs float32 (nats) | top-1 vs bf16 "
        "| KL vs bf16 (nats) |"
    )
    print("|---|---|---|---|---|")
    for name, agree, kl, agree16, kl16 in quality(model):
        print(f"| {name} | {agree:.3f} | {kl:.3f} | {agree16:.3f} | {kl16:.3f} |")


if __name__ == "__main__":
    main()
