"""The ``attention-direct`` pass (catalogue.py): vLLM's Python attention op
replaced by vllm-bridge's C++ op with the same arguments
(attention/csrc/attention_call.cpp)."""

from __future__ import annotations

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized

from vllm_bridge.attention.direct_call import OPS


def rewrite(graph: torch.fx.Graph) -> int:
    """Point every decoder attention call of ``graph`` at the C++ op; how
    many. Calls with fused output quantization keep vLLM's op, as do layer
    names that are not plain strings (VLLM_USE_LAYERNAME=1: the C++ op
    takes a str)."""
    if not hasattr(torch.ops.vllm, "unified_attention_with_output"):
        return 0  # vLLM's attention module is not loaded: no call to find
    vllm_attention = torch.ops.vllm.unified_attention_with_output.default
    count = 0
    for node in graph.nodes:
        if (
            node.op == "call_function"
            and node.target is auto_functionalized
            and node.args[0] is vllm_attention
            and isinstance(node.kwargs.get("layer_name"), str)
            and node.kwargs.get("output_scale") is None
            and node.kwargs.get("output_block_scale") is None
        ):
            # Same schema (argument names, mutated outputs in the same order):
            # the node's kwargs and its users' getitem indices stay valid. The
            # op is loaded where the pass runs (its catalogue entry requires
            # it), and looked up only for a call to replace.
            node.args = (getattr(torch.ops, OPS).attend.default, *node.args[1:])
            count += 1
    return count
