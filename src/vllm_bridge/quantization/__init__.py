"""Quantization methods vllm-bridge adds to vLLM's ``--quantization``."""

from __future__ import annotations

import argparse


def register() -> None:
    """Add vllm-bridge's methods to vLLM's registry (every process: the API
    server validates the name, the workers build the layers). Idempotent."""
    from vllm.model_executor.layers.quantization import (
        QUANTIZATION_METHODS,
        register_quantization_config,
    )

    from vllm_bridge.quantization.int8_online import METHOD_NAME, BridgeInt8Config

    if METHOD_NAME not in QUANTIZATION_METHODS:
        register_quantization_config(METHOD_NAME)(BridgeInt8Config)


HELP_ADDITION = (
    " vllm-bridge adds: bridge_int8 (int8 weights quantized while the "
    "checkpoint loads, int8 GEMM per token; any bf16/fp16/fp32 checkpoint; "
    "docs/quantization.md)."
)


def describe_in_parser(parser: argparse.ArgumentParser) -> None:
    """Name vllm-bridge's methods in ``--quantization``'s help (vLLM's
    argument takes any string, so it lists no choices)."""
    for action in parser._actions:
        if "--quantization" in action.option_strings:
            if action.help and HELP_ADDITION not in action.help:
                text, default, tail = action.help.partition(" (default:")
                action.help = text.rstrip() + HELP_ADDITION + default + tail
            return
