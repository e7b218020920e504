#!/usr/bin/env python3
"""Tiny random-weight Hugging Face checkpoints and transformers' own logits for them (tests/data/hf_models/).

Not run by the tests: scripts/golden_hf_models.sh makes the virtual environment (pinned transformers and torch from
the Python package index) and runs this file. Each model is built from its config with random weights (seeded),
saved with save_pretrained as safetensors, loaded back from that directory in float32, and run on a fixed token
sequence; its logits (float32, [tokens, vocab], little endian) go beside it as logits.f32 with meta.json (the
tokens, the shape, the versions). No transformers source is copied.

Models (small widths, the real RoPE settings, long enough to pass what each switches on):
  llama_f32      Llama, float32 weights, sharded (model-0000k-of-0000n.safetensors + index) — the sharded path;
                 and llama_f32.gguf: the same weights as llama.cpp's converter writes them (q/k rows permuted for
                 interleaved pairs), through the gguf package
  llama_bf16     the same architecture in bfloat16 weights, one file; its logits are HF's float32 forward of the
                 bf16 weights widened (exact), so the reader's widening is checked at the float32 bound
  llama3_tied    Llama 3 rope scaling (factor 8, original context 16), tied embeddings, float16 weights
  mistral_window Mistral with a sliding window of 16 keys (48 tokens pass it), θ = 1e6, float32
  qwen2_yarn_bias  Qwen2 (q/k/v biases), YaRN (factor 4, original context 16), tied embeddings, bfloat16
  qwen2_layer_windows  Qwen2 with use_sliding_window: layer 0 full attention, layer 1 a sliding window of 16 keys
                 (max_window_layers 1; 48 tokens pass it), float32
  qwen3_qknorm   Qwen3: q/k RMSNorm per head, head_dim 32 (4 heads × 32 ≠ hidden 64), float32
  smollm3_nope   SmolLM3: layer 1 without positional encoding (no_rope_layers [1, 0]), θ = 2e6, tied, float32
  gemma2_softcap Gemma 2: layer 0 sliding (16 keys), layer 1 full, θ = 1e4; attention logits soft-capped at 2 and the
                 output at 5 (small caps, so that the caps bend most logits); (1 + w) norms, four per layer;
                 embeddings × √hidden; GeGLU; query_pre_attn_scalar 24; tied; float32
  gemma3_local_global  Gemma 3 text: layer 0 local (a window of 16 keys, θ = 1e4), layer 1 global (θ = 1e6, linear
                 scaling factor 2); (1 + w) RMSNorms, four per layer and q/k per head; embeddings × √hidden; GeGLU
                 (tanh); query_pre_attn_scalar 24 (≠ head_dim 32); tied embeddings; float32
  phi3_longrope  Phi-3: fused qkv and gate/up projections, LongRoPE (original context 16 of 64: the 48 tokens take the
                 long factors), float32
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Phi3Config, Phi3ForCausalLM, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, SmolLM3Config,
                          SmolLM3ForCausalLM)

TOKENS = 48


ONLY = None  # --only NAME: build that model alone (the others' files stay as they are)


def build(name, config, dtype, shard, out, cls=LlamaForCausalLM):
    if ONLY is not None and name != ONLY:
        return
    torch.manual_seed(sum(map(ord, name)))  # a seed per model, stable across runs
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # weights large enough that the logits spread over the vocabulary
            p.normal_(0.0, 0.15)
        for layer in model.model.layers:  # norms near 1, as trained models have them
            layer.input_layernorm.weight.uniform_(0.8, 1.2)
            layer.post_attention_layernorm.weight.uniform_(0.8, 1.2)
        model.model.norm.weight.uniform_(0.8, 1.2)
    path = os.path.join(out, name)
    os.makedirs(path, exist_ok=True)
    model.to(dtype).save_pretrained(path, safe_serialization=True, max_shard_size=shard)
    # transformers' own reading of the files, widened to float32 (exact for bf16/fp16 weights)
    # eager attention, the models' reference path: transformers' default for loading (sdpa) drops Gemma 2's attention
    # soft-capping (its logits then differ from eager's by up to 7.9 here)
    loaded = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, config.vocab_size, TOKENS).tolist()
    with torch.no_grad():
        logits = loaded(torch.tensor([tokens])).logits[0].float().numpy()
    logits.astype("<f4").tofile(os.path.join(path, "logits.f32"))
    meta = {
        "tokens": tokens,
        "shape": list(logits.shape),
        "weights": str(dtype).split(".")[1],
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "made_by": "scripts/golden_hf_models.py",
    }
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    sizes = sum(os.path.getsize(os.path.join(path, x)) for x in os.listdir(path))
    print(f"{name}: {len(os.listdir(path))} files, {sizes} bytes, logits {logits.shape}")


def permute(w, heads):
    """llama.cpp's convert_hf_to_gguf.py permutation of q/k rows: HF's rotate_half layout to interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(name, out):
    """The float32 Llama of `name` as llama.cpp's converter writes it (q/k rows permuted for its NORMAL rope mode),
    through the gguf package's writer: NAME.gguf beside the model's folder."""
    import gguf
    from safetensors.numpy import load_file

    path = os.path.join(out, name)
    config = json.load(open(os.path.join(path, "config.json")))
    index = json.load(open(os.path.join(path, "model.safetensors.index.json")))
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(load_file(os.path.join(path, shard)))
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(os.path.join(out, name + ".gguf"), "llama")
    # The vocabulary's size as llama.cpp's converter writes it: a reader without the file's tokenizer (transformers)
    # takes the model's vocabulary from it.
    w.add_vocab_size(config["vocab_size"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(config["hidden_size"] // heads)
    w.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_tensor("token_embd.weight", tensors["model.embed_tokens.weight"])
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", tensors[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(tensors[p + "self_attn.q_proj.weight"], heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(tensors[p + "self_attn.k_proj.weight"], kv))
        w.add_tensor(f"blk.{i}.attn_v.weight", tensors[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", tensors[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", tensors[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", tensors[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", tensors[p + "mlp.down_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", tensors[p + "mlp.up_proj.weight"])
    w.add_tensor("output_norm.weight", tensors["model.norm.weight"])
    w.add_tensor("output.weight", tensors["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{name}.gguf: {os.path.getsize(os.path.join(out, name + '.gguf'))} bytes")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="tests/data/hf_models")
    parser.add_argument("--only", default=None, help="build this model alone")
    a = parser.parse_args()
    global ONLY
    ONLY = a.only
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, attn_implementation="eager")
    llama = LlamaConfig(**common, tie_word_embeddings=False)
    build("llama_f32", llama, torch.float32, "60KB", a.out)
    if ONLY is None or ONLY == "llama_f32":
        write_gguf("llama_f32", a.out)
    build("llama_bf16", llama, torch.bfloat16, "10GB", a.out)
    llama3 = LlamaConfig(**common, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 16})
    build("llama3_tied", llama3, torch.float16, "10GB", a.out)
    mistral = MistralConfig(**common, tie_word_embeddings=False, sliding_window=16, rope_theta=1000000.0)
    build("mistral_window", mistral, torch.float32, "10GB", a.out, MistralForCausalLM)
    qwen2 = Qwen2Config(**common, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                         "original_max_position_embeddings": 16})
    build("qwen2_yarn_bias", qwen2, torch.bfloat16, "10GB", a.out, Qwen2ForCausalLM)
    qwen2_windows = Qwen2Config(**common, tie_word_embeddings=False, rope_theta=1000000.0, use_sliding_window=True,
                                sliding_window=16, max_window_layers=1)
    build("qwen2_layer_windows", qwen2_windows, torch.float32, "10GB", a.out, Qwen2ForCausalLM)
    qwen3 = Qwen3Config(**{**common, "head_dim": 32}, tie_word_embeddings=False, rope_theta=1000000.0)
    build("qwen3_qknorm", qwen3, torch.float32, "10GB", a.out, Qwen3ForCausalLM)
    smol = SmolLM3Config(**common, no_rope_layers=[1, 0], rope_theta=2000000.0, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    build("smollm3_nope", smol, torch.float32, "10GB", a.out, SmolLM3ForCausalLM)
    short = [round(1.0 + 0.05 * i, 2) for i in range(8)]
    long = [round(2.0 + 0.25 * i, 2) for i in range(8)]
    phi3 = Phi3Config(**{**common, "max_position_embeddings": 64}, original_max_position_embeddings=16,
                      tie_word_embeddings=False, sliding_window=None, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long})
    build("phi3_longrope", phi3, torch.float32, "10GB", a.out, Phi3ForCausalLM)
    gemma3 = Gemma3TextConfig(**{**common, "rms_norm_eps": 1e-6, "head_dim": 32}, sliding_window=16,
                              layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=24,
                              rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                  "rope_theta": 1000000.0},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                              bos_token_id=1, eos_token_id=2, pad_token_id=0)
    build("gemma3_local_global", gemma3, torch.float32, "10GB", a.out, Gemma3ForCausalLM)
    gemma2 = Gemma2Config(**{**common, "rms_norm_eps": 1e-6, "head_dim": 32}, sliding_window=16,
                          query_pre_attn_scalar=24, attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
    build("gemma2_softcap", gemma2, torch.float32, "10GB", a.out, Gemma2ForCausalLM)


if __name__ == "__main__":
    main()
