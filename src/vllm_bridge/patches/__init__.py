"""One module per patch; importing this package declares them all, in the
order they are applied within a stage."""

from vllm_bridge.patches import (
    async_llm_quiet_shutdown,
    compile_cache_load,
    config_error_exit,
    kv_cache_zero_pages,
    vllm_cpu_metadata_alias,
)

__all__ = [
    "async_llm_quiet_shutdown",
    "compile_cache_load",
    "config_error_exit",
    "kv_cache_zero_pages",
    "vllm_cpu_metadata_alias",
]
