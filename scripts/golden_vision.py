#!/usr/bin/env python3
"""Golden outputs of Hugging Face's vision rotary (tests/data/vision/vision_rope.json).

Not run by the tests: scripts/golden_mrope.sh runs it in its pinned environment (transformers 5.15.0,
torch 2.9.1). For each vision encoder family it instantiates the modeling file's own, unmodified pieces on
small grids — the position function (transformers.vision_utils.get_vision_position_ids and
get_vision_window_index for the Qwen-VL / GLM-4V family, position_ids_in_meshgrid for Pixtral, the fixed
grid of Llama4VisionRotaryEmbedding), the rotary module, and the family's apply function on a random q —
and records the patch coordinates, the per-pair inverse frequencies, cos/sin per token and pair, and the
rotated q. The tests read only the JSON.
"""
import argparse
import json

import numpy
import torch
import transformers
from transformers import vision_utils
from transformers.models.glm4v import modeling_glm4v
from transformers.models.llama4 import modeling_llama4
from transformers.models.llama4.configuration_llama4 import Llama4VisionConfig
from transformers.models.pixtral import modeling_pixtral
from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen3_vl import modeling_qwen3_vl


def floats(t):
    """float32 values by their shortest decimal (read back as double then rounded to float32: the same bits)."""
    if t.dtype.is_floating_point:
        return [float(str(numpy.float32(x))) for x in t.detach().reshape(-1).tolist()]
    return [int(x) for x in t.detach().reshape(-1).tolist()]


def qwen_case(name, rotary_cls, apply_fn, vision_config, head_dim, grids, merge, window=None):
    grid_thw = torch.tensor(grids)
    pos = vision_utils.get_vision_position_ids(grid_thw, merge)  # (n, 2): h, w
    rotary = rotary_cls(head_dim // 2)
    freqs = rotary(pos)  # (n, head_dim / 2): [h·f, w·f]
    entry = {"name": name, "config": {"model_type": name, "vision_config": vision_config}, "grids": grids,
             "positions": [floats(pos[:, 0]), floats(pos[:, 1])]}
    if window is not None:
        index, cu = vision_utils.get_vision_window_index(grid_thw, merge, window["window_size"],
                                                         window["patch_size"])
        unit = merge * merge
        n = freqs.shape[0]
        freqs = freqs.reshape(n // unit, unit, -1)[index].reshape(n, -1)  # as Qwen2_5_VisionTransformer.forward
        entry["window_index"] = floats(index)
        entry["cu_window_seqlens"] = floats(cu)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    torch.manual_seed(len(name))
    q = torch.randn(freqs.shape[0], 1, head_dim)
    q_embed, _ = apply_fn(q, q.clone(), cos, sin)
    entry.update({"inv_freq": floats(torch.cat((rotary.inv_freq, rotary.inv_freq))),
                  "cos": floats(cos[:, : head_dim // 2]), "sin": floats(sin[:, : head_dim // 2]),
                  "q": floats(q), "q_embed": floats(q_embed), "heads": 1})
    return entry


def pixtral_case():
    config = PixtralVisionConfig(hidden_size=128, num_attention_heads=4, image_size=64, patch_size=8,
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    head_dim = 32
    images = [(1, 5, 3), (1, 2, 8), (1, 8, 8)]
    patches = [torch.zeros(3, h, w) for _, h, w in images]
    ids = modeling_pixtral.position_ids_in_meshgrid(patches, max_width=64 // 8)
    rotary = modeling_pixtral.PixtralRotaryEmbedding(config)
    torch.manual_seed(7)
    n = ids.shape[0]
    q = torch.randn(1, 1, n, head_dim)
    cos, sin = rotary(q, ids)
    q_embed, _ = modeling_pixtral.apply_rotary_pos_emb(q, q.clone(), cos, sin, unsqueeze_dim=0)
    base = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    return {"name": "pixtral",
            "config": {"model_type": "mistral3", "vision_config": {"model_type": "pixtral", "hidden_size": 128,
                                                                   "num_attention_heads": 4, "image_size": 64,
                                                                   "patch_size": 8, "rope_theta": 10000.0}},
            "grids": [list(g) for g in images], "flat_ids": floats(ids),
            "positions": [floats(ids // 8), floats(ids % 8)],
            "inv_freq": floats(torch.cat((base[::2], base[1::2]))),
            "cos": floats(cos[:, : head_dim // 2]), "sin": floats(sin[:, : head_dim // 2]),
            "q": floats(q[0].transpose(0, 1)), "q_embed": floats(q_embed[0].transpose(0, 1)), "heads": 1}


def llama4_case():
    config = Llama4VisionConfig(hidden_size=128, num_attention_heads=4, image_size=56, patch_size=14,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    head_dim = 32
    freqs_ci = modeling_llama4.Llama4VisionRotaryEmbedding(config).freqs_ci  # (side² + 1, 1, head_dim / 2)
    side = 56 // 14
    img = torch.arange(side * side + 1)
    x = torch.where(img < side * side, img % side + 1, 0)
    y = torch.where(img < side * side, img // side + 1, 0)
    torch.manual_seed(11)
    n = freqs_ci.shape[0]
    q = torch.randn(1, n, 1, head_dim)
    q_embed, _ = modeling_llama4.vision_apply_rotary_emb(q, q.clone(), freqs_ci)
    freq_dim = head_dim // 2
    rope_freq = 1.0 / (10000.0 ** (torch.arange(0, freq_dim, 2)[: (freq_dim // 2)].float() / freq_dim))
    return {"name": "llama4",
            "config": {"model_type": "llama4", "vision_config": {"model_type": "llama4_vision_model",
                                                                 "hidden_size": 128, "num_attention_heads": 4,
                                                                 "image_size": 56, "patch_size": 14,
                                                                 "rope_theta": 10000.0}},
            "positions": [floats(x), floats(y)],
            "inv_freq": floats(torch.cat((rope_freq, rope_freq))),
            "cos": floats(freqs_ci.real[:, 0]), "sin": floats(freqs_ci.imag[:, 0]),
            "q": floats(q[0]), "q_embed": floats(q_embed[0]), "heads": 1}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cases = [
        qwen_case("qwen2_vl", modeling_qwen2_vl.VisionRotaryEmbedding,
                  modeling_qwen2_vl.apply_rotary_pos_emb_vision,
                  {"embed_dim": 64, "num_heads": 4, "spatial_merge_size": 2}, 16, [[1, 4, 6], [2, 2, 4]], 2),
        qwen_case("qwen2_5_vl", modeling_qwen2_5_vl.Qwen2_5_VisionRotaryEmbedding,
                  modeling_qwen2_5_vl.apply_rotary_pos_emb_vision,
                  {"hidden_size": 128, "num_heads": 4, "spatial_merge_size": 2, "window_size": 112,
                   "patch_size": 14},
                  32, [[1, 12, 10], [2, 4, 4], [1, 2, 2]], 2, window={"window_size": 112, "patch_size": 14}),
        qwen_case("qwen3_vl", modeling_qwen3_vl.Qwen3VLVisionRotaryEmbedding,
                  modeling_qwen3_vl.apply_rotary_pos_emb_vision,
                  {"hidden_size": 96, "num_heads": 4, "spatial_merge_size": 2}, 24, [[1, 4, 4], [3, 2, 6]], 2),
        qwen_case("glm4v", modeling_glm4v.Glm4vVisionRotaryEmbedding, modeling_glm4v.apply_rotary_pos_emb_vision,
                  {"hidden_size": 64, "num_heads": 2, "spatial_merge_size": 2}, 32, [[1, 6, 4]], 2),
        pixtral_case(),
        llama4_case(),
    ]
    with open(args.out, "w") as f:
        json.dump({"provenance": {"transformers": transformers.__version__, "torch": torch.__version__,
                                  "script": "scripts/golden_vision.py"},
                   "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
