"""Let vLLM load the CPU's compiled model from its compile cache instead of
recompiling it at every start."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch


def _already_loaded(self: Any, vllm_config: Any) -> None:
    """Inductor's deserialised graph needs no second loading step."""


@contextlib.contextmanager
def _inductor_artifacts_finalize_as_no_op() -> Iterator[None]:
    # Only for the duration of the load, so that torch is left unchanged
    # everywhere else.
    from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable

    if hasattr(BundledAOTAutogradSerializableCallable, "finalize_loading"):
        yield  # a torch that has the method needs nothing from us
        return
    BundledAOTAutogradSerializableCallable.finalize_loading = _already_loaded  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del BundledAOTAutogradSerializableCallable.finalize_loading  # type: ignore[attr-defined]


def load_inductor_artifacts(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def try_load(model: Any, aot_compilation_path: str) -> Any | None:
        with _inductor_artifacts_finalize_as_no_op():
            return original(model, aot_compilation_path)

    return try_load


PATCH = Patch(
    name="compile-cache-load",
    target="vllm.compilation.decorators:_try_load_aot_compiled_fn",
    stage="worker",
    kind="wrap",
    new=load_inductor_artifacts,
    why=(
        "On the CPU vLLM compiles with DYNAMO_TRACE_ONCE and the plain "
        "inductor backend, so its AOT compile cache holds torch's "
        "BundledAOTAutogradSerializableCallable, not vLLM's own "
        "VllmSerializableFunction. Loading it calls finalize_loading(), "
        "which only vLLM's type has: every start after the first logs "
        "\"'function' object has no attribute 'finalize_loading'\" and "
        "compiles the model again."
    ),
    how=(
        "While _try_load_aot_compiled_fn runs, torch's bundled callable "
        "has a finalize_loading that does nothing (its graph is complete "
        "once deserialised); the load then succeeds and vLLM uses the "
        "cached graph. Outside that call torch is unchanged."
    ),
    upstream=(
        "none yet: to be reported to vLLM (_try_load_aot_compiled_fn "
        "should call finalize_loading only on VllmSerializableFunction)"
    ),
    remove_when=(
        "vLLM loads AOT artifacts of non-VLLM_COMPILE modes without "
        "calling finalize_loading on them"
    ),
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="4a1e7c173e266c07",
)
