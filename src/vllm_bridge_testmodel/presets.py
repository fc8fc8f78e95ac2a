"""Model sizes, dtypes and the files a build writes."""

from __future__ import annotations

from dataclasses import dataclass

# Bump whenever the output for a given preset/dtype/seed changes, so that
# directories built by an older builder are rebuilt rather than reused.
BUILDER_VERSION = 1
MARKER_FILE = "vllm_bridge_build.json"
DTYPES = ("float32", "bfloat16")

UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = (UNK, BOS, EOS, PAD)  # ids 0..3, as in Llama

# Zephyr-style.  It writes BOS itself because chat front ends (vLLM, HF
# apply_chat_template) encode the rendered prompt without special tokens.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{{ (message['content'] or '') + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    MARKER_FILE,
)


@dataclass(frozen=True)
class Preset:
    """Architecture and tokenizer-training parameters of one model size."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    # An upper bound: the model takes whatever size BPE training reaches.
    target_vocab_size: int
    # Corpus length in words, and how many distinct made-up words it draws
    # from; the latter is what gives BPE enough distinct merges.
    corpus_words: int
    lexicon_size: int


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        hidden_size=64,
        # A multiple of 64 like real models': vLLM's CPU kernels (e.g.
        # silu_and_mul) need multiples of their vector width.
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        # Not hidden / heads = 16: vLLM's CPU attention supports head sizes
        # 32, 64, 80, ... only.
        head_dim=32,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        target_vocab_size=3000,
        corpus_words=200_000,
        lexicon_size=3000,
    ),
    "0.5b": Preset(
        name="0.5b",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        target_vocab_size=32000,
        corpus_words=1_500_000,
        lexicon_size=60_000,
    ),
}
