"""`--quantization bridge_int8` in a real engine: LLM(...) and `vllm serve`
at their defaults (compiled) on the tiny float32 checkpoint, checked
against Hugging Face transformers on the same float32 weights.

The server loads the graph the LLM compiled from vLLM's compile cache: the
engine test of the compile-cache-load patch (without it the load fails and
the server compiles again)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import torch
from vllm import LLM, SamplingParams

from tests.conftest import PROMPTS
from tests.engine.llm_support import (
    AOT_CACHE_HIT,
    SERVE_SCHEDULER_DEFAULTS,
    greedy,
    running_llm,
)
from tests.engine.server_support import start_server
from vllm_bridge import envs
from vllm_bridge.device.isa import detect
from vllm_bridge.quantization.kernel_table import choose_int8_kernel
from vllm_bridge_testmodel.teacher_forcing import (
    agreement,
    corpus_sequences,
    hf_logits,
    logits_top1,
    vllm_top1,
)

pytestmark = pytest.mark.engine
TINY_LINEAR_LAYERS = 2 * 4  # per layer: qkv, o, gate_up, down
# Teacher-forced top-1 agreement with float32 transformers measured on the
# tiny preset: 0.86 with int8 weights and activations (bf16 compute: 0.94);
# a broken quantizer or kernel lands near 0.
MIN_AGREEMENT = 0.75


def expected_kernel() -> str:
    """The kernel kernel_table.py gives this CPU for bf16 activations
    (vLLM runs the float32 checkpoint in bf16 unless told)."""
    from vllm_bridge.ops import linear

    choice = choose_int8_kernel(
        detect().effective, "auto", torch.bfloat16, linear.available()
    )
    assert choice.kernel is not None, choice.reason
    return choice.kernel


@pytest.fixture(scope="module")
def llm(tiny_model: Path) -> Iterator[LLM]:
    with running_llm(
        tiny_model, quantization="bridge_int8", **SERVE_SCHEDULER_DEFAULTS
    ) as engine:
        yield engine


def test_every_linear_layer_runs_on_the_int8_kernel_of_this_cpu(llm: LLM):
    (report,) = llm.collective_rpc("bridge_report")
    kernel = expected_kernel()
    assert report["int8_layers_by_kernel"] == {kernel: TINY_LINEAR_LAYERS}
    assert llm.llm_engine.vllm_config.model_config.quantization == "bridge_int8"
    # (out, in) of each layer: qkv, o, gate_up, down
    shapes = [(4 * 32 + 2 * 2 * 32, 64), (64, 128), (2 * 192, 64), (64, 192)]
    weights = 2 * sum(n * k for n, k in shapes)
    rows = 2 * sum(n for n, _ in shapes)
    # a byte per weight and a float32 scale per output row; the AMX layout
    # adds an int32 per row (the sums its unsigned-activation trick needs)
    per_row = 8 if kernel == "amx" else 4
    assert report["int8_weight_bytes"] == weights + per_row * rows


def test_greedy_output_is_stable_run_to_run(llm: LLM):
    assert greedy(llm) == greedy(llm)


def test_teacher_forced_top1_agrees_with_transformers(llm: LLM, tiny_model: Path):
    sequences = corpus_sequences(tiny_model)
    reference = logits_top1(hf_logits(tiny_model, sequences, torch.float32))
    assert agreement(vllm_top1(llm, sequences), reference) >= MIN_AGREEMENT


def test_vllm_serve_gives_the_same_tokens(llm: LLM, tiny_model: Path, tmp_path: Path):
    params = SamplingParams(temperature=0.0, max_tokens=16, min_tokens=16)
    expected = llm.generate(PROMPTS[:2], params, use_tqdm=False)
    server = start_server(
        tiny_model,
        tmp_path / "serve.log",
        "--quantization",
        "bridge_int8",
        # the LLM fixture's rule resolved the variable in this process
        env={envs.INT8_KERNEL.name: ""},
    )
    try:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused")
        for prompt, output in zip(PROMPTS[:2], expected, strict=True):
            completion = client.completions.create(
                model=str(tiny_model),
                prompt=prompt,
                max_tokens=16,
                temperature=0.0,
                extra_body={"min_tokens": 16},
            )
            assert completion.choices[0].text == output.outputs[0].text
    finally:
        assert server.stop(signal.SIGTERM) == 0
    kernel = expected_kernel()
    log = server.log()
    assert f"env.{envs.INT8_KERNEL.name}: 'auto' -> '{kernel}'" in log
    # the quantized graph compiled in one process is reused by another
    assert AOT_CACHE_HIT in log
    # vLLM's check of VLLM_* variables leaves vllm-bridge's own alone
    assert "Unknown vLLM environment variable detected: VLLM_BRIDGE" not in log
