"""Teacher-forced agreement between two runs of a model: sequences of the
preset's own corpus, the next-token choice of each run at every position,
and how often the runs agree. The presets have random weights, so
agreement (and KL divergence), not perplexity, is what can be measured."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_bridge_testmodel.corpus import generate_corpus
from vllm_bridge_testmodel.directory import read_preset

if TYPE_CHECKING:
    import torch

CORPUS_SEED = 7  # not the tokenizer's training text (seed 0)


def corpus_sequences(
    model_dir: Path, count: int = 16, length: int = 128
) -> list[list[int]]:
    """``count`` token sequences of ``length`` from fresh corpus text."""
    from transformers import AutoTokenizer

    preset = read_preset(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    words = count * length * 2
    text = "".join(generate_corpus(words, preset.lexicon_size, seed=CORPUS_SEED))
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if len(ids) < count * length:
        raise ValueError(f"corpus too short: {len(ids)} tokens")
    return [ids[i * length : (i + 1) * length] for i in range(count)]


def hf_logits(
    model_dir: Path, sequences: list[list[int]], dtype: torch.dtype
) -> torch.Tensor:
    """Hugging Face transformers' next-token logits (float32), [seqs, len, vocab]."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    with torch.no_grad():
        return model(torch.tensor(sequences)).logits.float()


def vllm_top1(llm: Any, sequences: list[list[int]]) -> list[list[int]]:
    """The engine's most likely next token after each prefix (positions
    0 .. len-2), read from its prompt logprobs."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=1, temperature=0.0)
    outputs = llm.generate(
        [{"prompt_token_ids": seq} for seq in sequences], params, use_tqdm=False
    )
    top1 = []
    for output in outputs:
        # prompt_logprobs[i] is the distribution of token i given tokens < i
        positions = output.prompt_logprobs[1:]
        top1.append(
            [next(t for t, lp in pos.items() if lp.rank == 1) for pos in positions]
        )
    return top1


def agreement(top1_a: list[list[int]], top1_b: list[list[int]]) -> float:
    pairs = [
        (a, b)
        for seq_a, seq_b in zip(top1_a, top1_b, strict=True)
        for a, b in zip(seq_a, seq_b, strict=True)
    ]
    return sum(a == b for a, b in pairs) / len(pairs)


def logits_top1(logits: torch.Tensor) -> list[list[int]]:
    """Top-1 after each prefix, positions 0 .. len-2 (as ``vllm_top1``)."""
    return logits[:, :-1].argmax(-1).tolist()


def mean_kl(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean KL(reference || other) of the next-token distributions."""
    log_p = reference.log_softmax(-1)
    log_q = other.log_softmax(-1)
    return float((log_p.exp() * (log_p - log_q)).sum(-1).mean())
