#!/usr/bin/env python3
"""Golden M-RoPE position ids from Hugging Face transformers' own get_rope_index (tests/data/mrope/).

Not run by the tests: scripts/golden_mrope.sh makes the virtual environment (pinned transformers 5.15.0 and
torch; transformers 4.57.1 beside it for the older token-scanning rule) and runs this file twice:

    python golden_mrope.py --rule token_types --out tests/data/mrope/token_types.json   # transformers 5.15.0
    python golden_mrope.py --rule token_scan --out tests/data/mrope/token_scan.json     # transformers 4.57.1

get_rope_index is called unmodified, as an unbound method on a stand-in `self` that carries only the config
values it reads (spatial_merge_size, tokens_per_second, the vision token ids), so no weights are loaded. The
files hold its outputs for a grid of inputs (text only, one image, two images, image + video with fractional
timing, left padding, a batch of three) per family; no transformers source is copied.
"""
import argparse
import json
import types

import torch
import transformers

IMAGE, VIDEO, START, END = 151655, 151656, 151652, 151653
MERGE = 2


def text(n, base=100):
    return [base + i for i in range(n)]


def image_tokens(grid):
    t, h, w = grid
    return [START] + [IMAGE] * (t * (h // MERGE) * (w // MERGE)) + [END]


def video_tokens(grid, per_frame):
    t, h, w = grid
    frame = (h // MERGE) * (w // MERGE)
    if per_frame:  # Qwen3-VL / GLM-4V: a timestamp (two text tokens here) before each frame
        out = []
        for f in range(t):
            out += text(2, 500 + 10 * f) + [START] + [VIDEO] * frame + [END]
        return out
    return [START] + [VIDEO] * (t * frame) + [END]


def cases(family):
    per_frame = family in ("qwen3_vl", "glm4v")
    g1, g2, gv = (1, 4, 6), (1, 8, 4), (3, 4, 4)
    seqs = {
        "text_only": [[text(10)]],
        "one_image": [[text(3) + image_tokens(g1) + text(4)]],
        "two_images": [[text(2) + image_tokens(g1) + text(3) + image_tokens(g2) + text(2)]],
        "image_and_video": [[text(2) + image_tokens(g1) + text(1) + video_tokens(gv, per_frame) + text(3)]],
        "left_padding": [[text(3) + image_tokens(g1) + text(2)], [text(7)]],
        "batch_of_three": [[text(1) + image_tokens(g2) + text(5)], [text(4) + image_tokens(g1) + text(1)],
                           [text(2) + video_tokens(gv, per_frame) + text(2)]],
    }
    grids = {
        "text_only": ([], []),
        "one_image": ([g1], []),
        "two_images": ([g1, g2], []),
        "image_and_video": ([g1], [gv]),
        "left_padding": ([g1], []),
        "batch_of_three": ([g2, g1], [gv]),
    }
    seconds = {"image_and_video": [0.5], "batch_of_three": [2.0]}
    for name, rows in seqs.items():
        rows = [r[0] for r in rows]
        length = max(len(r) for r in rows)
        ids = [[0] * (length - len(r)) + r for r in rows]  # left padding with id 0
        mask = [[0] * (length - len(r)) + [1] * len(r) for r in rows]
        images, videos = grids[name]
        yield name, ids, mask, images, videos, seconds.get(name, [1.0] * len(videos)) if videos else []


def stand_in(model_class):
    vision = types.SimpleNamespace(spatial_merge_size=MERGE, tokens_per_second=2)
    config = types.SimpleNamespace(vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO,
                                   vision_start_token_id=START, vision_end_token_id=END)
    self = types.SimpleNamespace(config=config)
    if hasattr(model_class, "get_vision_position_ids"):
        self.get_vision_position_ids = types.MethodType(model_class.get_vision_position_ids, self)
    return self


FAMILIES = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLModel"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLModel"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLModel"),
    "glm4v": ("glm4v", "Glm4vModel"),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rule", choices=["token_types", "token_scan"], required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = {"provenance": {"transformers": transformers.__version__, "torch": torch.__version__,
                          "function": "<Family>Model.get_rope_index, unmodified, on a stand-in self",
                          "rule": args.rule, "spatial_merge_size": MERGE, "tokens_per_second": 2},
           "cases": []}
    families = FAMILIES if args.rule == "token_types" else {k: v for k, v in FAMILIES.items() if k != "glm4v"}
    for family, (module_name, class_name) in families.items():
        module = __import__(f"transformers.models.{module_name}.modeling_{module_name}", fromlist=[class_name])
        model_class = getattr(module, class_name)
        self = stand_in(model_class)
        for name, ids, mask, images, videos, seconds in cases(family):
            input_ids = torch.tensor(ids)
            attention_mask = torch.tensor(mask)
            types_ = [[1 if t == IMAGE else 2 if t == VIDEO else 0 for t in row] for row in ids]
            kwargs = {"image_grid_thw": torch.tensor(images) if images else None,
                      "video_grid_thw": torch.tensor(videos) if videos else None,
                      "attention_mask": attention_mask}
            if family == "qwen2_5_vl":
                kwargs["second_per_grid_ts"] = torch.tensor(seconds) if videos else None
            if args.rule == "token_types":
                kwargs["mm_token_type_ids"] = torch.tensor(types_)
            positions, deltas = model_class.get_rope_index(self, input_ids, **kwargs)
            out["cases"].append({"family": family, "name": name, "input_ids": ids, "token_types": types_,
                                 "attention_mask": mask, "image_grid_thw": images, "video_grid_thw": videos,
                                 "second_per_grid_ts": seconds if family == "qwen2_5_vl" else [],
                                 "positions": positions.tolist(), "deltas": deltas.reshape(-1).tolist()})
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
