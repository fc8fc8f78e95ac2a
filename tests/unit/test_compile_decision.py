"""Every combination of the compile decision's inputs, checked against a
table of expected outcomes (first matching row wins; every row must match
some combination)."""

from __future__ import annotations

import itertools

import pytest
from vllm.config import CompilationMode, CUDAGraphMode

from vllm_bridge.config.compile_decision import CompileInputs, decide
from vllm_bridge.errors import BridgeConfigError

ANY = object()
NONE, STOCK, ONCE, VLLM = (
    CompilationMode.NONE,
    CompilationMode.STOCK_TORCH_COMPILE,
    CompilationMode.DYNAMO_TRACE_ONCE,
    CompilationMode.VLLM_COMPILE,
)

# (request, mode, enforce_eager, has_lora) -> expected mode, or the error's
# text. Encoder-decoder models and the CUDA-graph mode change only the
# reason, checked separately below.
TABLE: list[tuple[object, object, object, object, object]] = [
    ("compiled", ANY, True, ANY, "conflicts with --enforce-eager"),
    ("compiled", ANY, False, True, "conflicts with LoRA"),
    ("compiled", NONE, False, False, "conflicts with -cc.mode=NONE"),
    ("eager", ANY, ANY, ANY, NONE),
    ("auto", NONE, ANY, ANY, NONE),
    ("auto", ANY, ANY, True, NONE),
    (ANY, VLLM, ANY, ANY, ONCE),
    (ANY, ONCE, ANY, ANY, ONCE),
    (ANY, STOCK, ANY, ANY, STOCK),
]

COMBINATIONS = list(
    itertools.product(
        ("auto", "eager", "compiled"),
        list(CompilationMode),
        (False, True),
        (False, True),
        (False, True),
        (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL),
    )
)


def _matches(pattern: tuple[object, ...], values: tuple[object, ...]) -> bool:
    return all(p is ANY or p == v for p, v in zip(pattern, values, strict=True))


def _expected(request, mode, enforce_eager, has_lora) -> tuple[int, object]:
    for index, (*pattern, outcome) in enumerate(TABLE):
        if _matches(tuple(pattern), (request, mode, enforce_eager, has_lora)):
            return index, outcome
    raise AssertionError(f"no table row for {request, mode, enforce_eager, has_lora}")


def test_every_table_row_is_reached():
    reached = {_expected(*combination[:4])[0] for combination in COMBINATIONS}
    assert reached == set(range(len(TABLE)))


@pytest.mark.parametrize(
    ("request_", "mode", "enforce_eager", "has_lora", "encoder_decoder", "graphs"),
    COMBINATIONS,
)
def test_decision(request_, mode, enforce_eager, has_lora, encoder_decoder, graphs):
    inputs = CompileInputs(
        mode=mode,
        cudagraph_mode=graphs,
        enforce_eager=enforce_eager,
        has_lora=has_lora,
        is_encoder_decoder=encoder_decoder,
        request=request_,
    )
    _, outcome = _expected(request_, mode, enforce_eager, has_lora)
    if isinstance(outcome, str):
        with pytest.raises(BridgeConfigError, match=outcome) as error:
            decide(inputs)
        assert "compile_mode='compiled'" in str(error.value)
        return
    decision = decide(inputs)
    assert decision.mode == outcome
    assert decision.cudagraph_mode == CUDAGraphMode.NONE
    assert ("no CUDA graphs" in decision.reason) == (graphs != CUDAGraphMode.NONE)
    compiled = decision.mode != NONE
    assert ("the encoder runs eagerly" in decision.reason) == (
        compiled and encoder_decoder
    )
