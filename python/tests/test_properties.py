"""Hypothesis properties of RoPE through the Python API: relative-position invariance, inverse ∘ forward
= identity, norm preservation when the magnitude is 1 — each within the bound ropekit/call.hpp states."""
import numpy as np
import torch
from hypothesis import given, settings, strategies as st

import ropekit

from conftest import pair_norms

settings.register_profile("ropekit", max_examples=60, deadline=None, derandomize=True)
settings.load_profile("ropekit")

specs = st.builds(
    lambda half_dim, extra, base, pairing, variant: (
        2 * half_dim + extra, 2 * half_dim, base, pairing, variant),
    st.integers(2, 48), st.sampled_from([0, 0, 16]), st.sampled_from([1e4, 5e5, 1e6]),
    st.sampled_from(["half", "interleaved"]), st.sampled_from(["none", "linear", "yarn", "dynamic"]))


def make_rope(spec):
    head_dim, rotary_dim, base, pairing, variant = spec
    scaling = {"none": None, "linear": {"rope_type": "linear", "factor": 4.0},
               "dynamic": {"rope_type": "dynamic", "factor": 2.0},
               "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}}[variant]
    return ropekit.Rope(head_dim, rotary_dim=rotary_dim, base=base, pairing=pairing, rope_scaling=scaling,
                        max_position_embeddings=4096)


def vectors(rope, n, seed):
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.standard_normal((1, n, 1, rope.head_dim)).astype(np.float32))


@given(specs, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1))
def test_logits_depend_only_on_the_distance(spec, m, n, shift, seed):
    # ⟨R(m)q, R(n)k⟩ = ⟨R(m+δ)q, R(n+δ)k⟩. Each rotated lane is within 3e-7·s·‖pair‖ (s = magnitude)
    # plus the float32 angle of each table value (≤ 6e-8 per cos/sin: 1.2e-7·s·‖pair‖ per lane), so
    # the dot products agree within 2·(4.2e-7·s²)·Σ‖q pair‖·‖k pair‖ (each rotation once per side).
    rope = make_rope(spec)
    x = vectors(rope, 2, seed)
    q, k = x[:, :1], x[:, 1:]
    s = rope.cos_sin_scale
    def logit(pq, pk):
        rq = rope.apply(q, None, np.array([pq]), inplace=False).double()
        rk = rope.apply(k, None, np.array([pk]), inplace=False).double()
        return float((rq * rk).sum())
    delta = shift % (2**31 - max(m, n))
    nq, nk = pair_norms(rope, q)[..., : rope.rotary_dim], pair_norms(rope, k)[..., : rope.rotary_dim]
    cross = float((nq * nk).sum()) + float((q[..., rope.rotary_dim:].double() * k[..., rope.rotary_dim:].double()).abs().sum())
    bound = 4 * 4.2e-7 * s * s * cross + 1e-12
    assert abs(logit(m, n) - logit(m + delta, n + delta)) <= bound


@given(specs, st.integers(0, 2**40), st.integers(0, 2**32 - 1), st.sampled_from(["numpy", "torch"]))
def test_inverse_undoes_forward(spec, p, seed, framework):
    # Inverse(Forward(x)) = x within 2·3e-7·‖pair‖ (each direction within 3e-7 of exact, magnitudes m and 1/m).
    rope = make_rope(spec)
    x = vectors(rope, 3, seed)
    x = x.numpy() if framework == "numpy" else x
    y = rope.apply(x, None, np.array([p, p + 1, p // 2]), inplace=False)
    rope.apply(y, None, np.array([p, p + 1, p // 2]), direction="inverse")
    xt = torch.as_tensor(x)
    err = (torch.as_tensor(y).double() - xt.double()).abs()
    assert (err <= 6e-7 * pair_norms(rope, xt) + 1e-30).all()


@given(specs, st.integers(0, 2**46), st.integers(0, 2**32 - 1))
def test_rotation_preserves_pair_norms_when_the_magnitude_is_one(spec, p, seed):
    rope = make_rope(spec)
    x = vectors(rope, 1, seed)
    y = rope.apply(x, None, np.array([p]), inplace=False)
    rd = rope.rotary_dim
    before, after = pair_norms(rope, x)[..., :rd], pair_norms(rope, y)[..., :rd]
    assert torch.equal(y[..., rd:], x[..., rd:])  # pass-through lanes: copied, not scaled
    s = rope.cos_sin_scale
    # |‖R x‖ − s‖x‖| ≤ the lane error 3e-7·s·‖pair‖ (times √2 over the two lanes of a pair).
    assert ((after - s * before).abs() <= 4.3e-7 * s * before + 1e-30).all()
