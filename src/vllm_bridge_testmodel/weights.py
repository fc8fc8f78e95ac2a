"""The LlamaForCausalLM with seeded random weights."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from vllm_bridge_testmodel.presets import Preset

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

# Init scales, chosen by measuring greedy decoding of the tiny preset (see
# _init_weights).  Changing any of them requires bumping BUILDER_VERSION.
_EMBED_STD = 0.02
_QUIET_EMBED_SCALE = 0.1
_QK_GAIN = 2.0
_LOGIT_STD = 64.0


def _init_weights(
    model: LlamaForCausalLM, preset: Preset, seed: int, quiet_ids: list[int]
) -> None:
    """Fill every parameter from ``seed``.

    Whether HF and vLLM agree on a greedy token depends on the top-1 gap
    relative to rounding noise, and both scale with the logits, so no init
    makes near-ties impossible; what this init does:

    * projections use std 1/sqrt(fan_in), so each block writes O(1) into the
      residual stream;
    * the (tied) embeddings stay small next to that: large ones let the input
      token dominate the final state, and greedy decoding then repeats it;
    * q/k get a gain of 2: sharper attention makes outputs depend more on the
      prompt, so greedy runs rarely fall into loops;
    * the final norm weight scales the logits to std ``_LOGIT_STD`` (the
      std-0.02 init gives 0.16 for tiny), so absolute top-1 gaps are large too;
    * ``quiet_ids`` (special tokens, lone control and non-ASCII bytes) get
      short embeddings, so greedy decoding does not emit them: outputs run to
      max_tokens and decode to clean text, not to partial UTF-8 sequences
      that incremental detokenizers may render differently.

    A log-normal spread of embedding norms and other q/k gains were tried and
    gave no larger gap-to-noise margins, only less varied outputs.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    d = preset.hidden_size
    attn_width = preset.num_attention_heads * preset.head_dim
    params = dict(model.named_parameters())  # the tied lm_head is not listed

    def normal(name: str, fan_in: int, gain: float = 1.0) -> None:
        std = gain / math.sqrt(fan_in)
        params.pop(name).normal_(0.0, std, generator=generator)

    with torch.no_grad():
        embed = params.pop("model.embed_tokens.weight")
        embed.normal_(0.0, _EMBED_STD, generator=generator)
        embed[quiet_ids] *= _QUIET_EMBED_SCALE
        for layer in range(preset.num_hidden_layers):
            prefix = f"model.layers.{layer}."
            normal(prefix + "self_attn.q_proj.weight", d, _QK_GAIN)
            normal(prefix + "self_attn.k_proj.weight", d, _QK_GAIN)
            normal(prefix + "self_attn.v_proj.weight", d)
            normal(prefix + "self_attn.o_proj.weight", attn_width)
            normal(prefix + "mlp.gate_proj.weight", d)
            normal(prefix + "mlp.up_proj.weight", d)
            normal(prefix + "mlp.down_proj.weight", preset.intermediate_size)
            params.pop(prefix + "input_layernorm.weight").fill_(1.0)
            params.pop(prefix + "post_attention_layernorm.weight").fill_(1.0)
        # The final norm's output has unit RMS, so logit std ~ w * rms(E) * sqrt(d).
        embed_rms = embed.pow(2).mean().sqrt().item()
        final_weight = _LOGIT_STD / (embed_rms * math.sqrt(d))
        params.pop("model.norm.weight").fill_(final_weight)
    if params:
        raise RuntimeError(f"no init rule for parameters {sorted(params)}")


def _quiet_token_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """Ids of special tokens and of tokens that do not decode to plain text."""
    ids = list(range(len(tokenizer)))
    texts = tokenizer.backend_tokenizer.decode_batch(
        [[i] for i in ids], skip_special_tokens=False
    )
    special = set(tokenizer.all_special_ids)
    return [
        i
        for i, text in zip(ids, texts, strict=True)
        if i in special
        or "\ufffd" in text
        or any(not ch.isprintable() and ch not in "\n\t" for ch in text)
    ]


def make_model(
    preset: Preset, tokenizer: PreTrainedTokenizerFast, seed: int
) -> LlamaForCausalLM:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        # len(): ids past the tokenizer's would break detokenization.
        vocab_size=len(tokenizer),
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads,
        head_dim=preset.head_dim,
        max_position_embeddings=preset.max_position_embeddings,
        rms_norm_eps=preset.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": preset.rope_theta},
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(seed)  # HF's own init, overwritten below, is seeded too
    model = LlamaForCausalLM(config)
    model.float()  # in case the caller changed torch's default dtype
    _init_weights(model, preset, seed, _quiet_token_ids(tokenizer))
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("lm_head is not tied to embed_tokens")
    return model.eval()
