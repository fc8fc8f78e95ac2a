"""The process's patch registry, built from the patch modules in the order
they are applied within each stage."""

from vllm_bridge.patches.platform import (
    async_llm_quiet_shutdown,
    config_error_exit,
    engine_core_exit_grace,
    engine_core_signal_wakeup,
    engine_dead_message,
    headless_leader_watch,
    ipc_socket_directory,
    isa_auto_dtype,
    isa_switch,
    ray_cpu_worker_proc,
    ray_worker_slots,
    serve_shutdown_status,
)
from vllm_bridge.patches.startup import (
    isa_switch_inductor_key,
    vllm_cpu_metadata_alias,
)
from vllm_bridge.patches.worker import (
    compile_cache_bridge_key,
    compile_cache_load,
    isa_linear_kernel,
    kv_cache_zero_pages,
    remote_reader_shutdown,
    shm_group_host_name,
)
from vllm_bridge.patching.registry import Registry

REGISTRY = Registry(
    [
        vllm_cpu_metadata_alias.PATCH,
        isa_switch_inductor_key.PATCH,
        config_error_exit.PATCH,
        ipc_socket_directory.PATCH,
        isa_switch.PATCH,
        isa_auto_dtype.PATCH,
        async_llm_quiet_shutdown.PATCH,
        engine_core_exit_grace.PATCH,
        engine_core_signal_wakeup.PATCH,
        serve_shutdown_status.PATCH,
        engine_dead_message.PATCH,
        headless_leader_watch.PATCH,
        ray_worker_slots.PATCH,
        ray_cpu_worker_proc.PATCH,
        compile_cache_load.PATCH,
        compile_cache_bridge_key.PATCH,
        kv_cache_zero_pages.PATCH,
        isa_linear_kernel.PATCH,
        shm_group_host_name.PATCH,
        remote_reader_shutdown.PATCH,
    ]
)
