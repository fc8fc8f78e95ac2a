"""The pass manager: runs the enabled fusion passes on each graph Inductor
compiles in a worker, and records what they rewrote.

vLLM's platform hook for custom passes (``Platform.get_pass_manager_cls``)
is read only by its piecewise backend (CompilationMode.VLLM_COMPILE), which
vLLM's CPU platform always turns into DYNAMO_TRACE_ONCE: a plain
``torch.compile`` with ``compilation_config.inductor_compile_config`` as
Inductor's options. The manager therefore goes in as Inductor's
``post_grad_custom_post_pass`` option, where Inductor calls it after its own
post-grad passes and keys its graph cache on :meth:`uuid`.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from vllm_bridge import envs
from vllm_bridge.fusion.catalogue import FusionPass, enabled
from vllm_bridge.log import get_logger

logger = get_logger("fusion")

INDUCTOR_OPTION = "post_grad_custom_post_pass"

rewrites: dict[str, int] = {}
"""Places each pass rewrote in this process, over every compiled graph."""
installed: tuple[str, ...] = ()
"""The passes this process gave Inductor."""


def _function(path: str) -> Any:
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def _rewrite_function(fusion_pass: FusionPass) -> Any:
    return _function(fusion_pass.rewrite)


def _can_run(fusion_pass: FusionPass) -> bool:
    return fusion_pass.requires is None or bool(_function(fusion_pass.requires)())


class BridgePassManager(CustomGraphPass):
    def __init__(self, passes: tuple[FusionPass, ...]) -> None:
        self.passes = passes

    def __call__(self, graph: torch.fx.Graph) -> None:
        for fusion_pass in self.passes:
            count = _rewrite_function(fusion_pass)(graph)
            rewrites[fusion_pass.name] = rewrites.get(fusion_pass.name, 0) + count
            logger.debug("fusion pass %s rewrote %d place(s)", fusion_pass.name, count)
        # A rewritten op leaves the buffers it wrote into without users.
        graph.eliminate_dead_code()

    def uuid(self) -> str:
        """Inductor's cache key for the passes: their names and the source
        of the modules that rewrite."""
        digest = hashlib.sha256()
        for fusion_pass in self.passes:
            digest.update(fusion_pass.name.encode())
            module = inspect.getmodule(_rewrite_function(fusion_pass))
            digest.update(inspect.getsource(module).encode())
        return digest.hexdigest()


def enabled_passes() -> tuple[FusionPass, ...]:
    return enabled(envs.ENABLE_PASSES.get(), envs.DISABLE_PASSES.get())


def runnable_passes() -> tuple[FusionPass, ...]:
    """The enabled passes that can run in this process."""
    return tuple(p for p in enabled_passes() if _can_run(p))


def install(compilation_config: Any) -> tuple[str, ...]:
    """Give Inductor the pass manager where this worker compiles with it;
    the names of the passes it got (those enabled that can run here)."""
    from vllm.config.compilation import CompilationMode

    global installed
    compiles_with_inductor = (
        compilation_config.mode == CompilationMode.DYNAMO_TRACE_ONCE
        and compilation_config.backend == "inductor"
    )
    if not compiles_with_inductor:
        return ()
    passes = runnable_passes()
    if not passes:
        return ()
    compilation_config.inductor_compile_config[INDUCTOR_OPTION] = BridgePassManager(
        passes
    )
    installed = tuple(fusion_pass.name for fusion_pass in passes)
    return installed


def report() -> dict[str, Any]:
    """For the worker report: the passes enabled, those Inductor got, and
    what each rewrote."""
    return {
        "enabled": [fusion_pass.name for fusion_pass in enabled_passes()],
        "installed": list(installed),
        "rewrites": dict(rewrites),
    }
