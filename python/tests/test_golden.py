"""Every golden file from Hugging Face transformers (tests/data/golden/hf) through the Python API."""
import numpy as np
import pytest
import torch

import ropekit
from ropekit.torch import RotaryEmbedding, apply_rotary_pos_emb

from conftest import golden, oracle_cos_sin

PLAN_FILES = ["default.json", "linear.json", "dynamic.json", "yarn.json", "longrope.json", "llama3.json",
              "proportional.json"]


def ulps(a, b):
    """float32 ulp distance, elementwise."""
    ia = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    ib = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, np.int64(-2**31) - ia, ia)
    ib = np.where(ib < 0, np.int64(-2**31) - ib, ib)
    return np.abs(ia - ib)


def rope_of(entry):
    config = dict(entry["config"], model_type=entry["model_class"])
    rope = ropekit.Rope.from_config(config)
    if entry.get("seq_len") is not None:
        return ropekit.RopeSet(rope).at(entry["seq_len"])
    return rope


@pytest.mark.parametrize("name", PLAN_FILES)
def test_plans_match_hugging_face(name):
    # The contract of make_plan (ropekit/plan.hpp): inv_freq within 2 float32 ulp of HF's, the
    # magnitude within 1e-6 relative.
    entries = golden(name)["entries"]
    assert entries
    for entry in entries:
        rope = rope_of(entry)
        expected = np.array(entry["inv_freq"], np.float64).astype(np.float32)
        assert rope.inv_freq.dtype == np.float32
        assert rope.inv_freq.shape == expected.shape, entry["id"]
        assert ulps(rope.inv_freq, expected).max() <= 2, entry["id"]
        assert rope.cos_sin_scale == pytest.approx(entry["attention_scaling"], rel=1e-6), entry["id"]


def e2e_calls():
    for entry in golden("e2e.json")["entries"]:
        for call in entry["calls"]:
            yield entry, call


def tensor(field):
    return torch.tensor(field["data"], dtype=torch.float32).reshape(field["shape"])


@pytest.mark.parametrize("entry,call", list(e2e_calls()), ids=lambda v: v["id"] if "id" in v else "")
def test_e2e_forward_calls(entry, call):
    rope = rope_of(entry)
    pos = torch.tensor(call["position_ids"])  # [1, seq]
    q, k = tensor(call["q"]), tensor(call["k"])  # [1, heads, seq, head_dim]
    hf_cos, hf_sin = tensor(call["cos"]), tensor(call["sin"])
    out = call["outputs"]["apply_rotary_pos_emb"]
    hf_q, hf_k = tensor(out["q_embed"]), tensor(out["k_embed"])
    hf_w = np.array(call["inv_freq_used"], np.float64)
    same_plan = np.array_equal(rope.inv_freq.astype(np.float64), hf_w.astype(np.float32).astype(np.float64))

    # 1. RotaryEmbedding(angles="hf") is HF's expression: its cos/sin are HF's bits wherever the plan is.
    cos, sin = RotaryEmbedding(rope, angles="hf")(q, pos)
    assert cos.shape == hf_cos.shape
    if same_plan and torch.__version__.startswith("1.13"):
        # The golden's torch (1.13, README): HF's expression gives its bits.
        assert torch.equal(cos, hf_cos) and torch.equal(sin, hf_sin), entry["id"]
        # ... and so HF's apply_rotary_pos_emb on them gives HF's q/k bit for bit.
        q2, k2 = apply_rotary_pos_emb(q, k, cos, sin)
        assert torch.equal(q2, hf_q) and torch.equal(k2, hf_k)
    elif same_plan:
        # Another torch evaluates float32 cos/sin with its own vectorised code: the same expression, so within 2
        # float32 ulp of 1 (README). Measured under torch 2.9.1: at most 5.96e-8 (one ulp below 1), 6860 of 7040
        # values bit-identical; q/k then within 4.8e-7 at |q| ≤ 3.5 (|q|·(|Δcos| + |Δsin|) + one rounding ≤ 6.6e-7).
        assert float((cos - hf_cos).abs().max()) <= 2 * 2.0 ** -23 and float((sin - hf_sin).abs().max()) <= 2 * 2.0 ** -23
        q2, k2 = apply_rotary_pos_emb(q, k, cos, sin)
        assert torch.allclose(q2, hf_q, rtol=0, atol=1e-6) and torch.allclose(k2, hf_k, rtol=0, atol=1e-6)

    # 2. Accurate cos/sin differ from HF's only by HF's float32 angle error: |Δ| ≤ m·|p·ω − fl32(p·ω_hf)|
    #    + m·2^-23 (the two float32 roundings of cos) — the exact angle error, computed in float64.
    acc_cos, acc_sin = rope.cos_sin(pos, layout="hf")
    p = pos.numpy()[0].astype(np.float64)[:, None]
    w = np.concatenate([rope.inv_freq64] * 2)
    w_hf = np.concatenate([hf_w.astype(np.float32).astype(np.float64)] * 2)
    hf_angle = (p.astype(np.float32) * w_hf.astype(np.float32)).astype(np.float64)  # HF's float32 product
    m = rope.cos_sin_scale
    bound = m * (np.abs(p * w - hf_angle) + 2.0 ** -23) + 1e-12
    assert (np.abs(acc_cos[None] - hf_cos.numpy()) <= bound).all(), entry["id"]
    assert (np.abs(acc_sin[None] - hf_sin.numpy()) <= bound).all(), entry["id"]

    # 3. The kernel (in place, bhsd, accurate) against the float64 oracle: within 3e-7·m·‖pair‖
    #    (ropekit/call.hpp) plus, against HF's own outputs, HF's angle error times ‖pair‖.
    qk = [q.clone(), k.clone()]
    rope.apply(qk[0], qk[1], pos, layout="bhsd")
    c64, s64 = oracle_cos_sin(rope, pos[0].numpy())
    from conftest import oracle_rotate, pair_norms
    for got, x in zip(qk, (q, k)):
        want = oracle_rotate(rope, x.permute(0, 2, 1, 3), c64, s64).permute(0, 2, 1, 3)
        err = (got.double() - want).abs()
        assert (err <= 3e-7 * m * pair_norms(rope, x) + 1e-30).all(), entry["id"]
