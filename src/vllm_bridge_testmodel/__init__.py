"""vllm-bridge's test models: small Llama-architecture model directories
with random weights, for the tests and benchmarks (a development package:
not part of the vllm-bridge wheel, which every vLLM process imports).

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
logit gaps and prompt-dependent greedy outputs; see ``weights.py``.

Modules: ``presets`` (sizes and file names), ``corpus`` (the generated
training text), ``tokenizer``, ``weights``, ``directory`` (idempotent,
atomic builds) and ``__main__`` (the command line).

Builds are idempotent (``vllm_bridge_build.json`` records preset, dtype, seed
and builder version) and atomic (built in a temporary sibling directory, then
renamed into place), and concurrent builders of one directory take turns.

Usage::

    python -m vllm_bridge_testmodel --preset tiny --dtype float32 --out DIR
"""

from vllm_bridge_testmodel.directory import build_model, is_complete
from vllm_bridge_testmodel.presets import DTYPES, MARKER_FILE, PRESETS, Preset

__all__ = ["DTYPES", "MARKER_FILE", "PRESETS", "Preset", "build_model", "is_complete"]
