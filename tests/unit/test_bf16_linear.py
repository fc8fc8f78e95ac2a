"""vllm-bridge's AVX2 kernel for bf16 weights against float32 arithmetic in
PyTorch on the same (bf16-rounded) values: the independent reference."""

from __future__ import annotations

import pytest
import torch

from vllm_bridge.device.isa import detect
from vllm_bridge.ops import linear

pytestmark = pytest.mark.skipif(
    not {"avx2", "fma"} <= detect().flags,
    reason="the kernel is AVX2/FMA code: needs an x86-64 CPU with AVX2 and FMA",
)


@pytest.fixture(scope="module", autouse=True)
def kernel_loaded():
    assert linear.available(), "the kernel did not build or load (see the log)"


def reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None):
    y = x.float() @ w.float().T
    return y if bias is None else y + bias.float()


# M: 1-12 take the direct path (4 accumulators per row up to 3 rows, 2 up to
# 6, 1 beyond), 13+ the blocked one, 65+ more than one pass of 64 rows (with
# more than one K block: 70 x 2100);
# K: whole vectors, a tail, more than one 1024-wide block (one value past a
# block: its tail padded); N: odd tails.
SHAPES = [
    (1, 37, 19),
    (2, 9, 40),
    (3, 100, 896),
    (4, 33, 513),
    (6, 70, 101),
    (7, 5, 1030),
    (12, 130, 896),
    (13, 33, 513),
    (32, 1152, 896),
    (33, 96, 4864),
    (20, 11, 1025),
    (70, 9, 2100),
    (130, 19, 72),
]


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_float32_activations_match_float32_arithmetic(m: int, n: int, k: int):
    torch.manual_seed(m * n + k)
    x = torch.randn(m, k)
    w = torch.randn(n, k).bfloat16()
    bias = torch.randn(n)
    got = linear.bf16_linear(x, w, bias)
    assert got.dtype == torch.float32 and got.shape == (m, n)
    torch.testing.assert_close(got, reference(x, w, bias), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_bf16_activations_round_the_float32_result(m: int, n: int, k: int):
    torch.manual_seed(m + n * k)
    x = torch.randn(m, k).bfloat16()
    w = torch.randn(n, k).bfloat16()
    got = linear.bf16_linear(x, w, None)
    assert got.dtype == torch.bfloat16
    # one bf16 rounding of a float32 sum (summation order differs)
    torch.testing.assert_close(
        got.float(), reference(x, w, None).bfloat16().float(), rtol=8e-3, atol=1e-3
    )


def test_leading_dimensions_are_kept():
    x = torch.randn(2, 3, 64).bfloat16()
    w = torch.randn(16, 64).bfloat16()
    got = linear.bf16_linear(x, w)
    assert got.shape == (2, 3, 16)
    torch.testing.assert_close(
        got.float(),
        reference(x.reshape(6, 64), w, None).reshape(2, 3, 16),
        rtol=8e-3,
        atol=1e-2,
    )


def test_non_finite_values_propagate():
    x = torch.ones(4, 16)
    w = torch.ones(3, 16).bfloat16()
    x[1, 0] = float("nan")
    x[2, 0] = float("inf")
    got = linear.bf16_linear(x.bfloat16(), w)
    assert torch.isnan(got[1]).all()
    assert torch.isinf(got[2]).all()
    assert (got[0] == 16).all() and (got[3] == 16).all()


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        # bf16 steps by 2^-7 above 1: a float32 sum halfway between two steps
        # rounds to the even one, anything above halfway rounds up.
        ([1, 2**-8], 1.0),
        ([1, 2**-8, 2**-9], 1 + 2**-7),
        ([1, 2**-7, 2**-8], 1 + 2**-6),
        ([-1, -(2**-8)], -1.0),
    ],
)
def test_output_rounds_to_nearest_even(terms: list[float], expected: float):
    x = torch.tensor([terms]).bfloat16()  # every term is exact in bf16
    w = torch.ones(1, len(terms)).bfloat16()
    assert linear.bf16_linear(x, w).item() == expected


def test_zero_rows():
    got = linear.bf16_linear(torch.empty(0, 8).bfloat16(), torch.ones(4, 8).bfloat16())
    assert got.shape == (0, 4)


@pytest.mark.parametrize(
    ("x", "w", "message"),
    [
        (torch.ones(2, 8), torch.ones(4, 8, dtype=torch.float16), "2-D bfloat16"),
        (torch.ones(2, 8), torch.ones(4, 9).bfloat16(), "x has 8 features, weight 9"),
        (torch.ones(2, 8).half(), torch.ones(4, 8).bfloat16(), "bfloat16 or float32"),
    ],
)
def test_bad_operands_are_refused_with_the_reason(x, w, message):
    with pytest.raises(RuntimeError, match=message):
        linear.bf16_linear(x, w)


def test_compiles_with_torch_compile():
    w = torch.randn(24, 32).bfloat16()

    def layer(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(linear.bf16_linear(x, w))

    x = torch.randn(5, 32).bfloat16()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled(x), layer(x))
