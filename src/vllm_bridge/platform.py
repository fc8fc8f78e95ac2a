"""BridgePlatform: vLLM's CPU platform, selected out of tree, with the CPU
defaults and patches of vllm-bridge.

Why a ``CpuPlatform`` subclass that keeps ``PlatformEnum.CPU``: vLLM 0.32
branches on ``current_platform.is_cpu()`` and on ``PlatformEnum.CPU`` in
about a hundred places (oneDNN GEMMs, C++ custom ops, the sampler, OpenMP
thread binding, kernel tables). A prototype with ``PlatformEnum.OOT`` missed
them all and ran at 0.37x the built-in platform; see docs/design.md.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from vllm.platforms.cpu import CpuPlatform

from vllm_bridge.activation import apply_platform_stage
from vllm_bridge.attention import selection
from vllm_bridge.config.reconcile import reconcile
from vllm_bridge.config.schema import use_strict_additional_config
from vllm_bridge.config.vllm_environ import validate_vllm_environ
from vllm_bridge.distributed.ray_cluster import WORKER_RESOURCE
from vllm_bridge.quantization import describe_in_parser

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.config.kernel import IrOpPriorityConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig


class BridgePlatform(CpuPlatform):
    # The Ray resource each worker's placement-group bundle asks for; vLLM's
    # CPU platform names none, so its Ray executor refuses to start.
    ray_device_key = WORKER_RESOURCE

    @classmethod
    def pre_register_and_update(cls, parser: object | None = None) -> None:
        apply_platform_stage()
        if isinstance(parser, argparse.ArgumentParser):
            use_strict_additional_config(parser)
            describe_in_parser(parser)

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        reconcile(vllm_config, builtin=super().check_and_update_config)

    @classmethod
    def validate_environ(cls, hard_fail: bool) -> None:
        # vLLM's own check calls every VLLM_BRIDGE_* variable unknown (a
        # warning per variable at each start, an error under
        # --fail-on-environ-validation); vllm-bridge checks those itself.
        validate_vllm_environ(os.environ, hard_fail)

    @classmethod
    def import_kernels(cls) -> None:
        # vLLM picks the kernel library from torch.cpu's ISA queries, which
        # the isa-switch patch caps: the platform stage must be in place.
        apply_platform_stage()
        super().import_kernels()

    @classmethod
    def import_ir_kernels(cls) -> None:
        super().import_ir_kernels()
        import vllm_bridge.ops.ir_kernels  # noqa: F401  (registers providers)

    @classmethod
    def get_default_ir_op_priority(cls, vllm_config: VllmConfig) -> IrOpPriorityConfig:
        from vllm_bridge.ops.ir_kernels import default_priority

        return default_priority(vllm_config)

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum,
        attn_selector_config: AttentionSelectorConfig,
        num_heads: int | None = None,
    ) -> str:
        vllm_choice = super().get_attn_backend_cls(
            selected_backend, attn_selector_config, num_heads
        )
        return selection.choose_backend(
            vllm_choice, attn_selector_config.attn_type, selection.requested()
        )
