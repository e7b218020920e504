"""Shared helpers for the Python tests: the repository's data, and the double-precision oracle — a
pure-PyTorch transcription of Hugging Face's rotary code (rotate_half / apply_rotary_pos_emb, and the
interleaved GPT-J/GLM form), in float64 with exact angles."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(os.environ.get("ROPEKIT_REPO_DIR", Path(__file__).resolve().parents[2]))
GOLDEN = REPO / "tests" / "data" / "golden" / "hf"
CONFIGS = REPO / "tests" / "data" / "configs"


def golden(name):
    return json.loads((GOLDEN / name).read_text())


def rotate_half(x):
    """HF: modeling_llama.rotate_half."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """HF GPT-J / GLM: the interleaved pairs (2j, 2j+1) → (−x_{2j+1}, x_{2j})."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def oracle_cos_sin(rope, positions):
    """cos/sin per pair in float64 from the exact angle p·ω (ω = ropekit's float32 inv_freq, widened;
    p·ω is exact in float64 for p < 2^29), times the magnitude; M-RoPE picks each pair's stream."""
    pos = np.asarray(positions, dtype=np.int64)
    w = rope.inv_freq64
    spec = rope.spec
    if spec["mrope_section"] is None:
        ang = pos[..., None].astype(np.float64) * w
    else:
        axis = pair_axes(spec)
        ang = np.stack([pos[axis[j]].astype(np.float64) * w[j] for j in range(len(w))], axis=-1)
    m = rope.cos_sin_scale
    return torch.from_numpy(np.cos(ang) * m), torch.from_numpy(np.sin(ang) * m)


def pair_axes(spec):
    """The M-RoPE stream of each pair (ropekit/spec.hpp: sectioned or Qwen3-VL interleaved)."""
    s = spec["mrope_section"]
    n = spec["rotary_dim"] // 2
    if not spec["mrope_interleaved"]:
        return np.repeat(np.arange(3), s)[:n]
    axis = np.zeros(n, dtype=np.int64)
    for j in range(n):
        if j % 3 == 1 and j < 3 * s[1]:
            axis[j] = 1
        elif j % 3 == 2 and j < 3 * s[2]:
            axis[j] = 2
    return axis


def oracle_rotate(rope, x, cos, sin, direction="forward"):
    """x [..., tokens, heads, head_dim] as float64, cos/sin [..., tokens, pairs]: HF's expression in float64.
    inverse = rotation by −θ with 1/m (cos, sin given with m); backward = rotation by −θ with m."""
    x = x.to(torch.float64)
    rd = rope.rotary_dim
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)  # broadcast over heads
    if direction == "inverse":
        m2 = rope.cos_sin_scale ** 2
        c, s = c / m2, -s / m2
    elif direction == "backward":
        s = -s
    rot, rest = x[..., :rd], x[..., rd:]
    if rope.pairing == "half":
        cc, ss = torch.cat((c, c), -1), torch.cat((s, s), -1)
        out = rot * cc + rotate_half(rot) * ss
    else:
        cc, ss = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
        out = rot * cc + rotate_every_two(rot) * ss
    return torch.cat((out, rest), -1)


def pair_norms(rope, x):
    """‖pair‖ for every lane (the norm of the pair it belongs to; |x| for pass-through lanes)."""
    x = x.to(torch.float64)
    rd = rope.rotary_dim
    rot, rest = x[..., :rd], x[..., rd:]
    if rope.pairing == "half":
        a, b = rot[..., : rd // 2], rot[..., rd // 2:]
        n = torch.sqrt(a * a + b * b)
        n = torch.cat((n, n), -1)
    else:
        a, b = rot[..., ::2], rot[..., 1::2]
        n = torch.sqrt(a * a + b * b).repeat_interleave(2, -1)
    return torch.cat((n, rest.abs()), -1)


@pytest.fixture(scope="session")
def repo():
    return REPO


def qk_tensors(layout, dtype, seed=0, batch=2, seq=5, hq=4, hk=2, d=128):
    """Random q and k of `dtype` in `layout` ("bshd", "bhsd", "thd"), seeded: the operator tests' inputs."""
    g = torch.Generator().manual_seed(seed)
    shape = {"bshd": lambda h: (batch, seq, h, d), "bhsd": lambda h: (batch, h, seq, d),
             "thd": lambda h: (batch * seq, h, d)}[layout]
    return (torch.randn(shape(hq), generator=g).to(dtype), torch.randn(shape(hk), generator=g).to(dtype))
