#!/usr/bin/env python3
"""Golden inverse frequencies of Hugging Face's HunYuan rotary (tests/data/golden/hunyuan_alpha.json).

Not run by the tests: scripts/golden_mrope.sh runs it in its pinned environment (transformers 5.15.0,
torch 2.9.1). HunYuanDenseV1RotaryEmbedding is instantiated unmodified from a config with HunYuan-A13B's
rope_scaling (type dynamic, alpha 1000, factor 1) and called as the model calls it: inv_freq at
initialisation, after a forward whose largest position id passes max_position_embeddings (its
dynamic_rope_update grows the plan), and after a shorter forward (it resets).
"""
import argparse
import json

import torch
import transformers
from transformers.models.hunyuan_v1_dense.configuration_hunyuan_v1_dense import HunYuanDenseV1Config
from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import HunYuanDenseV1RotaryEmbedding


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    entries = []
    for head_dim, max_pos, alpha, grow_to in ((128, 32768, 1000.0, 40000), (64, 4096, 50.0, 9000)):
        scaling = {"type": "dynamic", "alpha": alpha, "factor": 1.0, "beta_fast": 32, "beta_slow": 1,
                   "mscale": 1.0, "mscale_all_dim": 1.0}
        config = HunYuanDenseV1Config(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                                      max_position_embeddings=max_pos, rope_theta=10000.0, rope_scaling=scaling)
        rotary = HunYuanDenseV1RotaryEmbedding(config)
        x = torch.zeros(1, dtype=torch.float32)
        stages = [("init", None, rotary.inv_freq.tolist())]
        rotary(x, torch.tensor([[0, grow_to - 1]]))
        stages.append(("grown", grow_to, rotary.inv_freq.tolist()))
        rotary(x, torch.tensor([[0, 99]]))
        stages.append(("reset", 100, rotary.inv_freq.tolist()))
        entries.append({"config": {"model_type": "hunyuan_v1_dense", "hidden_size": head_dim * 4,
                                   "num_attention_heads": 4, "head_dim": head_dim,
                                   "max_position_embeddings": max_pos, "rope_theta": 10000.0,
                                   "rope_scaling": scaling},
                        "stages": [{"stage": s, "seq_len": n, "inv_freq": f} for s, n, f in stages]})
    with open(args.out, "w") as f:
        json.dump({"provenance": {"transformers": transformers.__version__, "torch": torch.__version__,
                                  "module": "HunYuanDenseV1RotaryEmbedding, unmodified"},
                   "entries": entries}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
