"""The linear layers of ``--quantization bridge_int8`` (config:
quantization/int8_online.py): each layer's weight quantized to int8 as soon as
it has loaded, run by the int8 GEMM kernel_table.py chose.

The layers load onto vLLM's online-quantization path (weights on the meta
device, materialised and quantized as each layer completes), so the
full-precision model never sits in memory whole.
"""

from __future__ import annotations

import torch
from vllm import _custom_ops as ops
from vllm.model_executor.layers.quantization.online.fp8 import OnlineLinearBase
from vllm.model_executor.utils import replace_parameter

from vllm_bridge.ops import linear
from vllm_bridge.quantization.kernel_table import Int8Kernel, layer_int8_kernel

INT8_MAX = 127
# oneDNN keeps compiled primitives per input shape; vLLM's own int8 layers
# use the same cache size.
ONEDNN_PRIMITIVE_CACHE = 32

layers_by_kernel: dict[str, int] = {}
"""How many layers this process put on each int8 kernel (worker report)."""


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [N, K] as int8 [N, K] and float32 scales [N, 1] with
    ``weight ~= int8 * scale``: each row's largest magnitude maps to 127."""
    as_float = weight.float()
    amax = as_float.abs().amax(dim=1, keepdim=True)
    # An all-zero row keeps scale 1 instead of dividing by zero.
    scale = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    quantized = torch.round(as_float / scale).clamp_(-INT8_MAX, INT8_MAX)
    return quantized.to(torch.int8), scale


class Int8Gemm:
    """One int8 weight matrix, prepared for one kernel, and its product with
    bf16/fp16/fp32 activations (quantized per token on the way in)."""

    def __init__(
        self,
        weight: torch.Tensor,
        kernel: Int8Kernel,
        out_dtype: torch.dtype,
        bias: torch.Tensor | None = None,
    ) -> None:
        qweight, scale = quantize_per_channel(weight)
        self.n, self.k = qweight.shape
        self.kernel = layer_int8_kernel(kernel, self.n, self.k)
        # oneDNN keeps reading the scales from the tensor it was given.
        self.scale = scale.view(-1).contiguous()
        self.packed: torch.Tensor | None = None
        self.handler: ops.CPUDNNLGEMMHandler | None = None
        # The AMX kernel takes a float32 bias: converted once, not per call.
        self.bias_fp32: torch.Tensor | None = None
        if self.kernel == "amx":
            self.packed = torch.ops._C.convert_weight_packed(qweight)
            if bias is not None:
                self.bias_fp32 = bias.detach().float()
        elif self.kernel == "bridge":
            self.packed = qweight.contiguous()
        else:
            self.handler = ops.create_onednn_scaled_mm(
                qweight.t(),
                self.scale,
                out_dtype,
                True,  # dynamic (per-token) activation scales
                False,  # symmetric activations: no zero point
                ONEDNN_PRIMITIVE_CACHE,
            )

    @property
    def nbytes(self) -> int:
        """Bytes of the int8 weight and its scales (oneDNN holds its packed
        copy outside any tensor: counted as n x k)."""
        packed = self.packed.nbytes if self.packed is not None else self.n * self.k
        return packed + self.scale.nbytes

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.kernel == "bridge":
            return linear.int8_linear(x, self.packed, self.scale, bias)
        if self.kernel == "amx":
            return torch.ops._C.int8_scaled_mm_with_quant(
                x,
                self.packed,
                self.scale,
                None if bias is None else self.bias_fp32,
                x.dtype,
                True,  # the weight is in the VNNI layout convert_weight_packed made
            )
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        quantized, scales, _ = ops.onednn_scaled_int8_quant(rows, None, None, True)
        out = torch.empty((rows.shape[0], self.n), dtype=x.dtype)
        ops.onednn_scaled_mm(self.handler, quantized, out, scales, None, None, bias)
        return out.reshape(*shape[:-1], self.n)


class BridgeInt8LinearMethod(OnlineLinearBase):
    def __init__(self, kernel: Int8Kernel) -> None:
        super().__init__()
        self.kernel = kernel

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        if getattr(layer, "_already_called_process_weights_after_loading", False):
            return
        weight = self.get_weight_for_quantization(layer)
        layer.int8_gemm = Int8Gemm(
            weight.detach(), self.kernel, self.out_dtype, getattr(layer, "bias", None)
        )
        replace_parameter(layer, "weight", torch.empty(0, dtype=torch.int8))
        del weight
        kernel = layer.int8_gemm.kernel
        layers_by_kernel[kernel] = layers_by_kernel.get(kernel, 0) + 1
        self.release_requantization_source_weights(layer)
        layer._already_called_process_weights_after_loading = True

    def apply(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return layer.int8_gemm(x, bias)


def int8_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every int8 weight of ``model`` (with their scales)."""
    return sum(
        module.int8_gemm.nbytes
        for module in model.modules()
        if isinstance(getattr(module, "int8_gemm", None), Int8Gemm)
    )
