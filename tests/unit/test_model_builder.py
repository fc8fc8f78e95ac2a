"""The repo's own test model: what the tests and benchmarks stand on."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

from vllm_bridge_testmodel import MARKER_FILE, PRESETS, build_model


def test_vocab_matches_the_tokenizer(tiny_model: Path):
    config = AutoConfig.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert config.vocab_size == len(tokenizer)
    assert config.architectures == ["LlamaForCausalLM"]


def test_any_text_round_trips_through_the_tokenizer(tiny_model: Path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    text = "Grüße, 東京! 42 + x_1 = ?"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text


def test_second_build_reuses_the_model(tiny_model: Path):
    marker = tiny_model / MARKER_FILE
    before = marker.stat().st_mtime_ns
    assert build_model("tiny", tiny_model, dtype="float32") == tiny_model
    assert marker.stat().st_mtime_ns == before
    assert json.loads(marker.read_text())["preset"] == "tiny"


def test_presets_fit_vllms_cpu_attention():
    supported = CPUAttentionBackend.get_supported_head_sizes()
    for preset in PRESETS.values():
        assert preset.head_dim in supported, preset.name
