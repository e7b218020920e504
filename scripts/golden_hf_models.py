#!/usr/bin/env python3
"""Tiny random-weight Hugging Face checkpoints and transformers' own logits for them (tests/data/hf_models/).

Not run by the tests: scripts/golden_hf_models.sh makes the virtual environment (pinned transformers and torch from
the Python package index) and runs this file. Each model is built from its config with random weights (seeded),
saved with save_pretrained as safetensors, loaded back from that directory in float32, and run on a fixed token
sequence; its logits (float32, [tokens, vocab], little endian) go beside it as logits.f32 with meta.json (the
tokens, the shape, the versions). No transformers source is copied.

Models (small widths, the real RoPE settings, long enough to pass what each switches on):
  llama_f32      Llama, float32 weights, sharded (model-0000k-of-0000n.safetensors + index) — the sharded path
  llama_bf16     the same architecture in bfloat16 weights, one file; its logits are HF's float32 forward of the
                 bf16 weights widened (exact), so the reader's widening is checked at the float32 bound
  llama3_tied    Llama 3 rope scaling (factor 8, original context 16), tied embeddings, float16 weights
  mistral_window Mistral with a sliding window of 16 keys (48 tokens pass it), θ = 1e6, float32
  qwen2_yarn_bias  Qwen2 (q/k/v biases), YaRN (factor 4, original context 16), tied embeddings, bfloat16
  qwen3_qknorm   Qwen3: q/k RMSNorm per head, head_dim 32 (4 heads × 32 ≠ hidden 64), float32
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

TOKENS = 48


def build(name, config, dtype, shard, out, cls=LlamaForCausalLM):
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
    loaded = cls.from_pretrained(path, dtype=torch.float32).eval()
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="tests/data/hf_models")
    a = parser.parse_args()
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, attn_implementation="eager")
    llama = LlamaConfig(**common, tie_word_embeddings=False)
    build("llama_f32", llama, torch.float32, "60KB", a.out)
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
    qwen3 = Qwen3Config(**{**common, "head_dim": 32}, tie_word_embeddings=False, rope_theta=1000000.0)
    build("qwen3_qknorm", qwen3, torch.float32, "10GB", a.out, Qwen3ForCausalLM)


if __name__ == "__main__":
    main()
