"""Loggers for vllm-bridge.

They live under vLLM's ``vllm`` logger so that they share its handlers,
format (process prefixes such as ``(EngineCore pid=…)``) and
``VLLM_LOGGING_LEVEL``; a logger outside that tree would print nothing below
WARNING.
"""

import logging


def get_logger(component: str) -> logging.Logger:
    return logging.getLogger(f"vllm.bridge.{component}")
