"""Build small Llama-architecture model directories with random weights.

Tests and benchmarks need a real Hugging Face model directory, but this project
cannot reach the hub, so this module writes one from scratch:

* a byte-level BPE tokenizer trained with ``tokenizers`` on text generated in
  code (seeded English-like sentences over a built-in word list, made-up words,
  numbers and punctuation); the byte alphabet means any string tokenizes;
* a ``LlamaForCausalLM`` with seeded random weights, created in float32 on the
  CPU and then cast to the requested dtype, saved as ``model.safetensors``;
* ``config.json``, ``generation_config.json``, ``tokenizer.json``,
  ``tokenizer_config.json``, ``special_tokens_map.json`` and a Jinja chat
  template, so vLLM's ``/v1/chat/completions`` works too.

Presets (``PRESETS``):

* ``tiny``: hidden 64, 2 layers, 4 heads / 2 KV heads of size 32,
  intermediate 192, 3000-token vocabulary, about 1.5 MB in float32; for fast
  tests.
* ``0.5b``: Qwen2-0.5B-like shapes (hidden 896, 24 layers, 14 heads / 2 KV
  heads, intermediate 4864, head_dim 64, rope_theta 1e6, tied embeddings) with
  a 32000-token vocabulary (Qwen2's own is 151936); 387M parameters, about
  0.77 GB in bfloat16; for benchmarks.

The model's ``vocab_size`` always equals ``len(tokenizer)``.  The tokenizer
depends only on the preset; ``seed`` changes the weights only.  The tokenizer
adds ``<s>`` when encoding, like Llama's; the chat template writes it itself.

The weights are not the usual std-0.02 init: they are scaled for large
logit gaps and prompt-dependent greedy outputs; see ``_init_weights``.

Builds are idempotent (``vllm_bridge_build.json`` records preset, dtype, seed
and builder version) and atomic (built in a temporary sibling directory, then
renamed into place), and concurrent builders of one directory take turns.

Usage::

    python -m vllm_bridge.model_builder --preset tiny --dtype float32 --out DIR
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = [
    "BUILDER_VERSION",
    "CHAT_TEMPLATE",
    "DTYPES",
    "MARKER_FILE",
    "PRESETS",
    "Preset",
    "build_model",
    "build_tokenizer",
    "generate_corpus",
    "is_complete",
    "main",
]

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

# --------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_DETERMINERS = _words(
    "the a this that every some no one each another my your our their his her its"
)
_ADJECTIVES = _words(
    """red blue green small large old new quiet loud bright dark happy sad quick
    slow warm cold early late strong weak simple complex strange common rare
    heavy light soft hard clean dirty empty full hidden open narrow wide long
    short ancient modern gentle careful"""
)
_NOUNS = _words(
    """cat dog bird tree river mountain city house road car train ship window
    door table chair book letter story song music garden field forest island
    market street bridge tower teacher student doctor farmer writer painter
    child friend family village country world morning evening night day week
    year winter summer spring autumn rain snow wind storm light shadow stone
    water fire paper glass metal machine engine computer program system model
    data network server question answer problem idea plan reason number game
    team"""
)
_VERBS = _words(
    """saw found took made gave kept left brought built carried watched followed
    opened closed painted wrote read heard moved crossed visited reached
    remembered forgot changed started finished helped asked answered lifted
    pushed pulled turned covered"""
)
_INTRANSITIVE = _words(
    """slept waited laughed smiled arrived returned walked ran jumped listened
    rested worked danced sang stayed shouted whispered vanished appeared grew
    fell rose"""
)
_ADVERBS = _words(
    """slowly quickly quietly suddenly carefully happily softly finally again
    today yesterday always never often rarely soon later together alone almost
    nearly"""
)
_PREPOSITIONS = _words(
    "in on under over near behind beside across through into from with without "
    "after before"
)
_CONJUNCTIONS = _words("and but so because while although when until if")
_PRONOUNS = _words("I you he she we they it")
_QUESTION_WORDS = _words("who what where when why how which")
_AUXILIARIES = _words("did does will can")

# Syllable parts for made-up words; "" entries allow open syllables.
_ONSETS = (
    "",
    *_words(
        """b bl br c ch cl cr d dr f fl fr g gl gr h j k kr l m n p pl pr qu r s
        sh sk sl sm sn sp st str t th tr v w wh y z"""
    ),
)
_NUCLEI = _words("a e i o u ai ea ee oo ou ie oa y au")
_CODAS = ("", "", "", *_words("n r s t l m nd nt st ck ng rd sh th x rn lt mp"))


def _make_lexicon(rng: random.Random, size: int) -> list[str]:
    """Return ``size`` distinct pronounceable made-up words."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
            for _ in range(rng.choice((1, 2, 2, 3)))
        )
        if len(word) > 2 and word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _number(rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        return str(rng.randrange(10))
    if kind == 1:
        return str(rng.randrange(10, 1000))
    if kind == 2:
        return str(rng.randrange(1900, 2040))
    if kind == 3:
        return f"{rng.randrange(100)}.{rng.randrange(100):02d}"
    if kind == 4:
        return f"{rng.randrange(24):02d}:{rng.randrange(60):02d}"
    if kind == 5:
        return f"{rng.randrange(101)}%"
    return f"${rng.randrange(1, 10000)}"


class _SentenceMaker:
    """Random sentences from a tiny grammar over real and made-up words."""

    def __init__(self, rng: random.Random, lexicon_size: int) -> None:
        self.rng = rng
        self.lexicon = _make_lexicon(rng, lexicon_size)
        # Zipf-like weights: frequent made-up words become whole tokens while
        # rare ones stay split, much as in natural text.
        self.cum_weights: list[float] = []
        total = 0.0
        for rank in range(lexicon_size):
            total += 1.0 / (rank + 10)
            self.cum_weights.append(total)

    def made_up(self) -> str:
        return self.rng.choices(self.lexicon, cum_weights=self.cum_weights)[0]

    def noun(self) -> str:
        return self.rng.choice(_NOUNS) if self.rng.random() < 0.5 else self.made_up()

    def noun_phrase(self) -> str:
        rng = self.rng
        parts = [rng.choice(_DETERMINERS)]
        if rng.random() < 0.5:
            parts.append(rng.choice(_ADJECTIVES))
        parts.append(self.noun())
        if rng.random() < 0.15:
            parts += [rng.choice(_PREPOSITIONS), rng.choice(_DETERMINERS), self.noun()]
        return " ".join(parts)

    def subject(self) -> str:
        roll = self.rng.random()
        if roll < 0.2:
            return self.rng.choice(_PRONOUNS)
        if roll < 0.35:
            return self.made_up().capitalize()
        return self.noun_phrase()

    def clause(self) -> str:
        rng = self.rng
        parts = [self.subject()]
        if rng.random() < 0.6:
            parts += [rng.choice(_VERBS), self.noun_phrase()]
        else:
            parts.append(rng.choice(_INTRANSITIVE))
        if rng.random() < 0.4:
            parts.append(rng.choice(_ADVERBS))
        if rng.random() < 0.3:
            parts += [rng.choice(_PREPOSITIONS), self.noun_phrase()]
        if rng.random() < 0.2:
            parts += ["at", _number(rng)]
        return " ".join(parts)

    def sentence(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            question = rng.choice(_QUESTION_WORDS)
            text = f"{question} {rng.choice(_AUXILIARIES)} {self.clause()}?"
        elif roll < 0.3:
            text = f"{self.clause()}, {rng.choice(_CONJUNCTIONS)} {self.clause()}."
        elif roll < 0.37:
            quoted = _capitalize(self.clause())
            text = f'"{quoted}," {rng.choice(_PRONOUNS)} said.'
        elif roll < 0.42:
            text = f"{self.clause()} ({_number(rng)} {self.noun()}s)."
        elif roll < 0.46:
            # A little code-like text, so brackets and operators get merges.
            key, other = self.noun(), self.noun()
            values = f"[{_number(rng)}, {_number(rng)}]"
            text = f"{key}_{rng.randrange(100)} = {_number(rng)}; {other}: {values}"
        elif roll < 0.5:
            text = f"{self.clause()}!"
        else:
            text = f"{self.clause()}."
        return _capitalize(text)


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def generate_corpus(n_words: int, lexicon_size: int, seed: int = 0) -> Iterator[str]:
    """Yield deterministic English-like paragraphs, about ``n_words`` words."""
    rng = random.Random(seed)
    maker = _SentenceMaker(rng, lexicon_size)
    words = 0
    while words < n_words:
        sentences = (maker.sentence() for _ in range(rng.randrange(1, 6)))
        paragraph = " ".join(sentences)
        words += paragraph.count(" ") + 1
        yield paragraph + "\n"


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------


def build_tokenizer(preset: Preset) -> PreTrainedTokenizerFast:
    """Train the preset's byte-level BPE tokenizer and wrap it for transformers."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=preset.target_vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        # All 256 byte symbols, even those the corpus lacks: any text encodes.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = generate_corpus(preset.corpus_words, preset.lexicon_size, seed=0)
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0",
        pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
        special_tokens=[(BOS, tokenizer.token_to_id(BOS))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        add_bos_token=True,
        add_eos_token=False,
        # HF's space clean-up would make its decode differ from the plain BPE
        # round trip that vLLM's incremental detokenizer produces.
        clean_up_tokenization_spaces=False,
        model_max_length=preset.max_position_embeddings,
        chat_template=CHAT_TEMPLATE,
    )


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

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


def _make_model(
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


# --------------------------------------------------------------------------
# Build orchestration
# --------------------------------------------------------------------------


def _marker(preset: Preset, dtype: str, seed: int) -> dict[str, Any]:
    return {
        "builder_version": BUILDER_VERSION,
        "preset": preset.name,
        "dtype": dtype,
        "seed": seed,
        "preset_params": asdict(preset),
    }


def _read_marker(model_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((model_dir / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_complete(
    model_dir: str | os.PathLike[str],
    preset: str,
    dtype: str = "float32",
    seed: int = 0,
) -> bool:
    """True if ``model_dir`` holds a finished build of exactly these parameters."""
    model_dir = Path(model_dir)
    if _read_marker(model_dir) != _marker(PRESETS[preset], dtype, seed):
        return False
    return all((model_dir / name).is_file() for name in REQUIRED_FILES)


def _write_model(preset: Preset, dtype: str, seed: int, target: Path) -> None:
    import torch
    from transformers import GenerationConfig

    tokenizer = build_tokenizer(preset)
    tokenizer.save_pretrained(target)
    model = _make_model(preset, tokenizer, seed)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    model.save_pretrained(target)  # safetensors; the tied lm_head is not stored
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(target)
    special_map = target / "special_tokens_map.json"
    if not special_map.exists():
        # transformers 5 keeps these in tokenizer_config.json only; older
        # readers look for this file.
        tokens = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK}
        special_map.write_text(json.dumps({**tokens, "pad_token": PAD}, indent=2))
    # Written last: a marker means everything above is complete.
    marker = json.dumps(_marker(preset, dtype, seed), indent=2) + "\n"
    (target / MARKER_FILE).write_text(marker)


def build_model(
    preset: str,
    out_dir: str | os.PathLike[str],
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Build (or reuse) the model directory ``out_dir`` and return its path.

    Returns at once when ``out_dir`` holds a complete build with the same
    preset, dtype, seed and builder version.  Otherwise builds into a temporary
    sibling and renames it into place, replacing an older build.  Refuses to
    replace a non-empty directory that this builder did not make.  Leaves a
    lock file ``.<name>.lock`` beside ``out_dir``.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; choose from {DTYPES}")
    out = Path(out_dir).absolute()
    if is_complete(out, preset, dtype, seed):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Concurrent builders of one directory (e.g. pytest-xdist workers) take
    # turns; the second then finds the first one's build complete.
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(out, preset, dtype, seed):
            return out
        if out.exists() and any(out.iterdir()) and _read_marker(out) is None:
            raise FileExistsError(
                f"{out} is not empty and was not made by {__name__}; not replacing it"
            )
        # Leftovers of killed builds; nobody else uses them while we hold the lock.
        for stale in out.parent.glob(f".{out.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            _write_model(PRESETS[preset], dtype, seed, tmp)
            # mkdtemp's 0700 (and safetensors' 0600) would lock out other users.
            tmp.chmod(0o755)
            for path in tmp.iterdir():
                path.chmod(0o644)
            _replace_dir(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _replace_dir(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, replacing ``dst`` if it exists."""
    if not dst.exists():
        os.replace(src, dst)
        return
    # rename(2) cannot replace a non-empty directory: move the old one aside.
    old = dst.parent / f".{dst.name}.tmp-old-{os.getpid()}"
    os.replace(dst, old)
    os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build one model directory and print its path."""
    parser = argparse.ArgumentParser(
        prog="python -m vllm_bridge.model_builder",
        description="Build a small random-weight Llama model directory "
        "(no model hub needed).",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="model directory")
    args = parser.parse_args(argv)
    start = time.monotonic()
    reused = is_complete(args.out, args.preset, args.dtype, args.seed)
    path = build_model(args.preset, args.out, dtype=args.dtype, seed=args.seed)
    status = "up to date" if reused else f"built in {time.monotonic() - start:.1f}s"
    print(f"{path}: {args.preset} {args.dtype} seed {args.seed}, {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
