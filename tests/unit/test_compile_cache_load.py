"""The compile-cache-load patch changes torch only while vLLM loads a
compiled model (the engine test in tests/engine/test_llm_int8.py shows the
load succeeding in a real second engine)."""

from __future__ import annotations

import pytest
from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable

from vllm_bridge.patches.worker.compile_cache_load import load_inductor_artifacts


def test_finalize_loading_exists_only_during_the_load():
    seen = []

    def load(model: object, path: str) -> str:
        # What vLLM's loader calls on the deserialised artifact.
        BundledAOTAutogradSerializableCallable.finalize_loading(object(), None)
        seen.append((model, path))
        return "loaded"

    assert not hasattr(BundledAOTAutogradSerializableCallable, "finalize_loading")
    assert load_inductor_artifacts(load)("model", "/cache/model") == "loaded"
    assert seen == [("model", "/cache/model")]
    assert not hasattr(BundledAOTAutogradSerializableCallable, "finalize_loading")


def test_torch_is_restored_when_the_load_fails():
    def load(model: object, path: str) -> None:
        raise EOFError("corrupt cache file")

    with pytest.raises(EOFError):
        load_inductor_artifacts(load)("model", "/cache/model")
    assert not hasattr(BundledAOTAutogradSerializableCallable, "finalize_loading")
