"""The byte-level BPE tokenizer, trained on the generated corpus."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_bridge_testmodel.corpus import generate_corpus
from vllm_bridge_testmodel.presets import (
    BOS,
    CHAT_TEMPLATE,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    UNK,
    Preset,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast


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
