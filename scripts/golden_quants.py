#!/usr/bin/env python3
"""Golden dequantization of ggml's quantized blocks from llama.cpp's own gguf package (tests/data/quants/).

Not run by the tests: scripts/golden_hf_models.sh installs the pinned gguf package and runs this file. For each of
Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1: random block bytes (seeded), every f16 scale field replaced by a random finite
value (the other bytes — quants, packed scales, high bits — left random), then gguf.quants.dequantize. Writes
NAME.blocks (the raw blocks) and NAME.f32 (float32 little endian, the dequantized values).
"""
import argparse
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# (type, blocks, byte offsets of its f16 fields)
TYPES = {"Q8_0": (T.Q8_0, 64, [0]), "Q4_0": (T.Q4_0, 64, [0]), "Q4_1": (T.Q4_1, 64, [0, 2]),
         "Q4_K": (T.Q4_K, 16, [0, 2]), "Q5_K": (T.Q5_K, 16, [0, 2]), "Q6_K": (T.Q6_K, 16, [208]),
         # appended later (the draws above are unchanged): the legacy 5-bit types llama-quantize falls back to for rows
         # that are not whole K-blocks (Q4_K_M of a 576-wide model is mostly Q5_0)
         "Q5_0": (T.Q5_0, 64, [0]), "Q5_1": (T.Q5_1, 64, [0, 2])}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="tests/data/quants")
    a = parser.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(43)
    for name, (qtype, blocks, f16_fields) in TYPES.items():
        values, size = quants.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (blocks, size), dtype=np.uint8)
        for off in f16_fields:
            raw[:, off:off + 2] = rng.uniform(-2.0, 2.0, blocks).astype(np.float16).view(np.uint8).reshape(blocks, 2)
        out = quants.dequantize(raw.reshape(-1), qtype).astype("<f4")
        assert out.size == blocks * values and np.isfinite(out).all()
        raw.tofile(os.path.join(a.out, name + ".blocks"))
        out.tofile(os.path.join(a.out, name + ".f32"))
        print(f"{name}: {blocks} blocks of {values} values, {size} bytes each")


if __name__ == "__main__":
    main()
