#!/usr/bin/env python3
"""A llama2.c checkpoint (legacy "version 0" export: models/README.md) as a Hugging Face Llama directory.

    python scripts/llama2c_to_hf.py models/tinystories-260k.bin build/hf-260k
    AutoModelForCausalLM.from_pretrained("build/hf-260k")      # LlamaForCausalLM, float32

The one step that is not a copy: llama2.c rotates the lane pairs (2j, 2j + 1) of each head (interleaved), Hugging
Face's Llama the pairs (j, j + head_dim/2) (rotate_half). The q and k projections' output rows are permuted per head
(row 2j → j, row 2j + 1 → j + head_dim/2), which turns one rotation into the other exactly (docs/conventions.md:
InterleavedIsHalfUnderTheLanePermutation); attention scores, and so the logits, are unchanged. Everything else maps
one to one: RMSNorm eps 1e-5, SwiGLU (w1 = gate, w3 = up, w2 = down), RoPE base 10000 over head_dim, grouped-query
attention, the classifier shared with the embedding unless the header's vocab_size is negative. The legacy
freq_cis tables are skipped (HF computes RoPE). Needs torch and transformers (the Python package index).
"""
from __future__ import annotations

import argparse
import struct
from pathlib import Path

import numpy as np

HEADER = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")


class FormatError(ValueError):
    """The file is not a legacy llama2.c checkpoint of the size its header says."""


def read_llama2c(path) -> tuple[dict, dict]:
    """(header, weights): the header's seven fields (vocab_size made positive, `shared_classifier` added) and the
    float32 arrays by llama2.c's names, in its (out, in) orientation."""
    data = Path(path).read_bytes()
    if len(data) < 28:
        raise FormatError(f"{path}: {len(data)} bytes; a llama2.c header is 7 int32 (28 bytes)")
    if struct.unpack("<I", data[:4])[0] == 0x616B3432:  # "ak42", llama2.c's export.py version >= 1
        raise FormatError(f"{path}: a llama2.c version-1 export (magic ak42); this script reads the legacy version 0")
    h = dict(zip(HEADER, struct.unpack("<7i", data[:28])))
    for name in HEADER:
        if name != "vocab_size" and h[name] <= 0:
            raise FormatError(f"{path}: header {name} = {h[name]}: must be > 0")
    h["shared_classifier"] = h["vocab_size"] > 0
    h["vocab_size"] = abs(h["vocab_size"])
    dim, hidden, layers, heads, kv_heads, vocab, seq = (h[n] for n in HEADER)
    if dim % heads or heads % kv_heads or (dim // heads) % 2:
        raise FormatError(f"{path}: dim {dim}, n_heads {heads}, n_kv_heads {kv_heads}: heads must divide dim (an "
                          "even head size) and n_kv_heads divide n_heads")
    head = dim // heads
    kv_dim = kv_heads * head
    shapes = [("tok_embeddings", (vocab, dim)), ("rms_att", (layers, dim)), ("wq", (layers, dim, dim)),
              ("wk", (layers, kv_dim, dim)), ("wv", (layers, kv_dim, dim)), ("wo", (layers, dim, dim)),
              ("rms_ffn", (layers, dim)), ("w1", (layers, hidden, dim)), ("w2", (layers, dim, hidden)),
              ("w3", (layers, hidden, dim)), ("rms_final", (dim,)), ("freq_cis_real", (seq, head // 2)),
              ("freq_cis_imag", (seq, head // 2))]
    if not h["shared_classifier"]:
        shapes.append(("wcls", (vocab, dim)))
    need = sum(int(np.prod(s)) for _, s in shapes)
    floats = np.frombuffer(data, dtype="<f4", offset=28)
    if floats.size != need:
        raise FormatError(f"{path}: {floats.size} float32 weights after the header; the header's shapes need {need}")
    weights, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        weights[name] = floats[at:at + n].reshape(shape)
        at += n
    return h, weights


def half_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """w's output rows per head from interleaved pairs (2j, 2j + 1) to rotate_half pairs (j, j + head/2)."""
    out, inp = w.shape
    return w.reshape(heads, out // heads // 2, 2, inp).transpose(0, 2, 1, 3).reshape(out, inp)


def to_hf(header: dict, weights: dict):
    """(transformers.LlamaConfig, state dict of torch tensors) of the checkpoint."""
    import torch
    from transformers import LlamaConfig

    dim, heads, kv_heads = header["dim"], header["n_heads"], header["n_kv_heads"]
    config = LlamaConfig(
        vocab_size=header["vocab_size"], hidden_size=dim, intermediate_size=header["hidden_dim"],
        num_hidden_layers=header["n_layers"], num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=dim // heads, max_position_embeddings=header["seq_len"], rms_norm_eps=1e-5, rope_theta=10000.0,
        hidden_act="silu", attention_bias=False, mlp_bias=False, tie_word_embeddings=header["shared_classifier"],
        bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    t = lambda a: torch.from_numpy(np.array(a, dtype=np.float32))  # a writable copy  # noqa: E731
    sd = {"model.embed_tokens.weight": t(weights["tok_embeddings"]), "model.norm.weight": t(weights["rms_final"])}
    for i in range(header["n_layers"]):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = t(weights["rms_att"][i])
        sd[p + "self_attn.q_proj.weight"] = t(half_rows(weights["wq"][i], heads))
        sd[p + "self_attn.k_proj.weight"] = t(half_rows(weights["wk"][i], kv_heads))
        sd[p + "self_attn.v_proj.weight"] = t(weights["wv"][i])
        sd[p + "self_attn.o_proj.weight"] = t(weights["wo"][i])
        sd[p + "post_attention_layernorm.weight"] = t(weights["rms_ffn"][i])
        sd[p + "mlp.gate_proj.weight"] = t(weights["w1"][i])
        sd[p + "mlp.up_proj.weight"] = t(weights["w3"][i])
        sd[p + "mlp.down_proj.weight"] = t(weights["w2"][i])
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"] if header["shared_classifier"] else t(weights["wcls"])
    return config, sd


def convert(path, out_dir=None):
    """The checkpoint as a LlamaForCausalLM (float32, eval mode); saved to out_dir (save_pretrained) when given."""
    from transformers import LlamaForCausalLM

    config, sd = to_hf(*read_llama2c(path))
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise FormatError(f"{path}: weights missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    if out_dir is not None:
        model.save_pretrained(out_dir)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a legacy llama2.c .bin (models/tinystories-260k.bin, stories15M.bin)")
    parser.add_argument("out_dir", help="the Hugging Face directory to write (config.json, model.safetensors)")
    args = parser.parse_args()
    try:
        convert(args.checkpoint, args.out_dir)
    except (FormatError, OSError) as e:
        raise SystemExit(f"llama2c_to_hf: {e}")
    print(f"wrote {args.out_dir}")


if __name__ == "__main__":
    main()
