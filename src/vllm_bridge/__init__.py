"""vllm-bridge: an out-of-tree vLLM platform plugin for the CPU.

This module holds the two entry points only; they import the rest lazily so
that processes which merely load plugins (such as ``vllm bench`` clients)
pay nothing for them.
"""

__version__ = "0.1.0"


def register() -> str | None:
    """``vllm.platform_plugins`` entry point: the platform class, or None."""
    from vllm_bridge.activation import platform_qualname

    return platform_qualname()


def register_general() -> None:
    """``vllm.general_plugins`` entry point: runs in every vLLM process."""
    from vllm_bridge.activation import on_general_plugins

    on_general_plugins()
