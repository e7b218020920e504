#!/usr/bin/env python3
"""Golden text M-RoPE of the GLM-4V family (tests/data/mrope/glm_text_rotary.json).

Not run by the tests: scripts/golden_mrope.sh runs it in its pinned environment (transformers 5.15.0,
torch 2.9.1). For GLM-4V / GLM-4.1V (glm4v), GLM-OCR (glm_ocr) and GLM-4.5V (glm4v_moe), and Qwen3-VL for
contrast, it builds the text config with the real models' RoPE settings (partial rotary, mrope_section), runs the
family's unmodified rotary module on three distinct position streams and its own apply_rotary_pos_emb on a random
q, and records the config, the streams, and q before and after. GLM-4V and GLM-OCR pair lanes GPT-J style
(rotate_half_llm on repeat_interleave'd cos/sin); GLM-4.5V pairs them NeoX style.
"""
import argparse
import json

import numpy
import torch
import transformers
from transformers.models.glm4v import configuration_glm4v, modeling_glm4v
from transformers.models.glm4v_moe import configuration_glm4v_moe, modeling_glm4v_moe
from transformers.models.glm_ocr import configuration_glm_ocr, modeling_glm_ocr
from transformers.models.qwen3_vl import configuration_qwen3_vl, modeling_qwen3_vl


def floats(t):
    return [float(str(numpy.float32(x))) for x in t.detach().reshape(-1).tolist()]


def case(model_type, config_cls, rotary_cls, apply_fn, text_config):
    config = config_cls(**text_config)
    rotary = rotary_cls(config)
    seq, heads, head_dim = 7, 2, text_config["head_dim"]
    torch.manual_seed(3)
    t = torch.tensor([0, 1, 2, 2, 2, 2, 5])
    h = torch.tensor([0, 1, 2, 2, 3, 3, 5])
    w = torch.tensor([0, 1, 2, 3, 2, 3, 5])
    position_ids = torch.stack([t, h, w])[:, None, :]  # [3, batch = 1, seq]
    q = torch.randn(1, heads, seq, head_dim)
    cos, sin = rotary(q, position_ids)
    q_embed, _ = apply_fn(q, q.clone(), cos, sin)
    return {"model_type": model_type, "config": {"model_type": model_type, "text_config": text_config},
            "positions": [t.tolist(), h.tolist(), w.tolist()], "heads": heads,
            "q": floats(q[0].transpose(0, 1)), "q_embed": floats(q_embed[0].transpose(0, 1))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    common = {"hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 128,
              "max_position_embeddings": 65536}
    glm_rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                "mrope_section": [8, 12, 12]}
    cases = [
        case("glm4v", configuration_glm4v.Glm4vTextConfig, modeling_glm4v.Glm4vTextRotaryEmbedding,
             modeling_glm4v.apply_rotary_pos_emb, dict(common, rope_parameters=glm_rope)),
        case("glm_ocr", configuration_glm_ocr.GlmOcrTextConfig, modeling_glm_ocr.GlmOcrTextRotaryEmbedding,
             modeling_glm_ocr.apply_rotary_pos_emb, dict(common, rope_parameters=glm_rope)),
        case("glm4v_moe", configuration_glm4v_moe.Glm4vMoeTextConfig, modeling_glm4v_moe.Glm4vMoeTextRotaryEmbedding,
             modeling_glm4v_moe.apply_rotary_pos_emb, dict(common, rope_parameters=glm_rope)),
        case("qwen3_vl", configuration_qwen3_vl.Qwen3VLTextConfig, modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding,
             modeling_qwen3_vl.apply_rotary_pos_emb,
             dict(common, rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                                           "mrope_interleaved": True})),
    ]
    with open(args.out, "w") as f:
        json.dump({"provenance": {"transformers": transformers.__version__, "torch": torch.__version__,
                                  "script": "scripts/golden_glm_mrope.py"}, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
