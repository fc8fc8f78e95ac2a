"""Write a model built by vllm_bridge_testmodel (Llama architecture,
bf16 safetensors, byte-level BPE tokenizer) as a bf16 or Q8_0 GGUF file for
llama.cpp, with the `gguf` package.

    python benchmarks/to_gguf.py MODEL_DIR OUT.gguf [--type q8_0]

Q8_0 (llama.cpp's int8: blocks of 32 weights with one scale) applies to
every matrix, the embedding included, as llama.cpp's own converter does.

Why not llama.cpp's convert_hf_to_gguf.py: it recognises a BPE tokenizer's
pre-tokenizer by hashing its output on a fixed text and refuses tokenizers
it does not know, such as the one model_builder trains locally. Needs only
numpy and gguf (no torch): safetensors is read directly.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np

# HF Llama tensor name (within a layer) -> GGUF name.
LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def read_safetensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (dtype, raw array): bf16 stays as its uint16 bit pattern."""
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    data = memoryview(raw)[8 + header_len :]
    numpy_types = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=numpy_types[entry["dtype"]])
        tensors[name] = (entry["dtype"], array.reshape(entry["shape"]))
    return tensors


def unpermute_rope(weight: np.ndarray, heads: int) -> np.ndarray:
    """HF stores q/k rows for rotate-half RoPE; llama.cpp's Llama expects
    the two halves of each head interleaved."""
    rows, columns = weight.shape
    return (
        weight.reshape(heads, 2, rows // heads // 2, columns)
        .swapaxes(1, 2)
        .reshape(rows, columns)
    )


def gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, index, rest = hf_name.split(".", 3)
    module, _, suffix = rest.rpartition(".")
    return f"blk.{index}.{LAYER_TENSORS[module]}.{suffix}"


def add_tokenizer(writer: gguf.GGUFWriter, model_dir: Path, config: dict) -> None:
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    special = {token["id"]: token["content"] for token in tokenizer["added_tokens"]}
    tokens = [""] * config["vocab_size"]
    for text, index in {**vocab, **{v: k for k, v in special.items()}}.items():
        tokens[index] = text
    types = [
        gguf.TokenType.CONTROL if index in special else gguf.TokenType.NORMAL
        for index in range(len(tokens))
    ]
    merges = [
        " ".join(merge) if isinstance(merge, list) else merge
        for merge in tokenizer["model"]["merges"]
    ]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # GPT-2's byte-level split, as trained
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)


def convert(model_dir: Path, out: Path, q8_0: bool = False) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    if config["model_type"] != "llama":
        sys.exit(f"{model_dir}: model_type {config['model_type']!r}, expected llama")
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(model_dir.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q8_0 if q8_0 else gguf.LlamaFileType.MOSTLY_BF16
    )
    add_tokenizer(writer, model_dir, config)
    tensors = read_safetensors(model_dir / "model.safetensors")
    for hf_name, (dtype, array) in tensors.items():
        if hf_name.endswith("q_proj.weight"):
            array = unpermute_rope(array, heads)
        elif hf_name.endswith("k_proj.weight"):
            array = unpermute_rope(array, kv_heads)
        kind = {
            "BF16": gguf.GGMLQuantizationType.BF16,
            "F16": gguf.GGMLQuantizationType.F16,
            "F32": gguf.GGMLQuantizationType.F32,
        }[dtype]
        if array.ndim == 1 and kind != gguf.GGMLQuantizationType.F32:
            # llama.cpp keeps norms in float32: bf16 bits shifted up.
            array = (array.astype(np.uint32) << 16).view(np.float32)
            kind = gguf.GGMLQuantizationType.F32
        elif array.ndim == 2 and q8_0:
            if kind == gguf.GGMLQuantizationType.BF16:
                array = (array.astype(np.uint32) << 16).view(np.float32)
            kind = gguf.GGMLQuantizationType.Q8_0
            array = gguf.quants.quantize(array.astype(np.float32), kind)
        writer.add_tensor(
            gguf_name(hf_name), np.ascontiguousarray(array), raw_dtype=kind
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--type", choices=["bf16", "q8_0"], default="bf16")
    args = parser.parse_args()
    convert(args.model_dir, args.out, q8_0=args.type == "q8_0")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
