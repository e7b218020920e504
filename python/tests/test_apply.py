"""Rope.apply on NumPy arrays and torch tensors against the float64 transcription of HF's formulas
(conftest.py), over layouts, dtypes, pairings, partial rotary, M-RoPE, positions, directions, strided
views; and the zero-copy / in-place guarantees."""
import itertools

import numpy as np
import pytest
import torch

import ropekit

from conftest import oracle_cos_sin, oracle_rotate, pair_norms

ROPES = {
    "llama3_half": lambda: ropekit.Rope.from_preset("llama-3.1-8b"),
    "yarn_interleaved_partial": lambda: ropekit.Rope(
        96, rotary_dim=64, base=1e4, pairing="interleaved",
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}),
    "longrope_long": lambda: ropekit.Rope(
        64, base=1e4, max_position_embeddings=8192, current_length=5000,
        rope_scaling={"rope_type": "longrope", "original_max_position_embeddings": 2048,
                      "short_factor": [1.0 + 0.01 * i for i in range(32)],
                      "long_factor": [1.0 + 0.5 * i for i in range(32)]}),
    "mrope_sectioned": lambda: ropekit.Rope(128, base=1e6, mrope_section=[16, 24, 24]),
    "mrope_interleaved": lambda: ropekit.Rope(128, base=5e6, mrope_section=[24, 20, 20], mrope_interleaved=True),
}

LAYOUTS = {"bshd": (2, 5), "bhsd": (2, 5), "thd": (1, 7)}  # (batch, seq)


def make(layout, batch, seq, heads, d, rng):
    if layout == "bshd":
        shape = (batch, seq, heads, d)
    elif layout == "bhsd":
        shape = (batch, heads, seq, d)
    else:
        shape = (seq, heads, d)
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def to_tokens(x, layout):
    """[..., tokens, heads, d] view for the oracle: bshd as is, bhsd transposed, thd with batch 1."""
    if layout == "bhsd":
        return x.transpose(1, 2)
    if layout == "thd":
        return x.unsqueeze(0)
    return x


def positions_for(rope, batch, seq, rng, kind):
    axes = 3 if rope.spec["mrope_section"] is not None else 1
    big = rng.integers(0, 1 << 20, size=(axes, batch, seq))
    big[..., 0] = 0
    p = big if axes == 3 else big[0]
    if kind == "int32":
        return p.astype(np.int32)
    if kind == "torch":
        return torch.from_numpy(p.astype(np.int64))
    return p.astype(np.int64)


@pytest.mark.parametrize("name,layout,direction,pos_kind",
                         list(itertools.product(ROPES, LAYOUTS, ["forward", "inverse", "backward"], ["int64", "int32", "torch"])))
def test_float32_against_hf_oracle(name, layout, direction, pos_kind):
    rope = ROPES[name]()
    rng = np.random.default_rng(hash((name, layout, direction, pos_kind)) % 2**32)
    batch, seq = LAYOUTS[layout]
    q = make(layout, batch, seq, 4, rope.head_dim, rng)
    k = make(layout, batch, seq, 2, rope.head_dim, rng)
    pos = positions_for(rope, batch, seq, rng, pos_kind)
    q0, k0 = q.clone(), k.clone()
    ret = rope.apply(q, k, pos, layout=layout, direction=direction)
    assert ret[0] is q and ret[1] is k
    pos_np = pos.numpy() if isinstance(pos, torch.Tensor) else pos
    cos, sin = oracle_cos_sin(rope, pos_np)
    m = rope.cos_sin_scale
    scale = {"forward": m, "inverse": 1 / m, "backward": m}[direction]
    for got, x in ((q, q0), (k, k0)):
        want = oracle_rotate(rope, to_tokens(x, layout), cos, sin, direction)
        err = (to_tokens(got, layout).double() - want).abs()
        bound = 3e-7 * scale * pair_norms(rope, to_tokens(x, layout)) + 1e-30
        assert (err <= bound).all(), (err / bound).max()
        # Pass-through lanes (partial rotary) are copied bit for bit.
        assert torch.equal(got[..., rope.rotary_dim:], x[..., rope.rotary_dim:])


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("framework", ["torch", "numpy"])
@pytest.mark.parametrize("name", ["llama3_half", "yarn_interleaved_partial"])
def test_16_bit_storage_is_the_float32_result_rounded_once(dtype, framework, name):
    # ropekit/call.hpp: bf16/fp16 results equal the float32 computation on the widened inputs, rounded
    # once to nearest even — checked bit for bit against torch's round-to-nearest-even conversion.
    rope = ROPES[name]()
    rng = np.random.default_rng(7)
    x32 = make("bshd", 2, 9, 3, rope.head_dim, rng) * 4
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    x16 = x32.to(tdt)
    pos = rng.integers(0, 100000, size=(2, 9))
    want = rope.apply(x16.float(), None, pos, inplace=False).to(tdt)
    if framework == "torch":
        got = rope.apply(x16.clone(), None, pos)
    else:
        bits = x16.view(torch.int16).numpy().view(np.uint16).copy() if dtype == "bf16" else x16.numpy().copy()
        out = rope.apply(bits, None, pos, dtype="bf16" if dtype == "bf16" else "")
        assert out is bits
        got = torch.from_numpy(out.view(np.int16)).view(tdt) if dtype == "bf16" else torch.from_numpy(out)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_positions_shapes_broadcast_over_the_batch():
    rope = ROPES["llama3_half"]()
    rng = np.random.default_rng(3)
    q = make("bshd", 3, 6, 2, 128, rng)
    seq_pos = np.array([5, 9, 1000, 3, 3, 77])
    full = np.broadcast_to(seq_pos, (3, 6)).copy()
    want = rope.apply(q, None, full, inplace=False)
    for given in (seq_pos, seq_pos[None], seq_pos.astype(np.int32), torch.from_numpy(seq_pos), list(seq_pos)):
        assert torch.equal(rope.apply(q, None, given, inplace=False), want)
    # None: 0 … seq−1 in every batch row.
    assert torch.equal(rope.apply(q, None, None, inplace=False),
                       rope.apply(q, None, np.arange(6), inplace=False))


def test_a_prepared_call_runs_per_step_as_apply_does():
    """Rope.prepare (C++'s prepare / RotateCall::run / set_positions): validated once, then each step's run() gives
    apply()'s bits at that step's positions; bad new positions are an error that leaves the call as it was."""
    rope = ROPES["yarn_interleaved_partial"]()
    rng = np.random.default_rng(5)
    q = make("bshd", 2, 1, 4, 96, rng).numpy()
    k = make("bshd", 2, 1, 2, 96, rng).numpy()
    step = rope.prepare(q, k, np.array([[7], [3]]), inplace=False)
    assert isinstance(step, ropekit.RotateCall)
    for pos in ([[7], [3]], [[8], [4]], [[70000], [0]]):
        pos = np.array(pos)
        step.set_positions(pos)
        got_q, got_k = step.run()
        want_q, want_k = rope.apply(q, k, pos, inplace=False)
        assert np.array_equal(got_q, want_q) and np.array_equal(got_k, want_k)
    with pytest.raises(ropekit.Error, match="positions: shape"):
        step.set_positions(np.array([1, 2, 3]))
    with pytest.raises(ropekit.Error, match="-1"):
        step.set_positions(np.array([[-1], [0]]))
    got_q, _ = step.run()  # still at the last good positions
    assert np.array_equal(got_q, rope.apply(q, k, np.array([[70000], [0]]), inplace=False)[0])
    # In place: every run rotates the caller's arrays again.
    x, y = q.copy(), q.copy()
    inplace = rope.prepare(x, None, np.array([[1], [9]]))
    for _ in range(2):
        inplace.run()
        rope.apply(y, None, np.array([[1], [9]]))
        assert np.array_equal(x, y)
    with pytest.raises(ropekit.Error, match="both None"):
        rope.prepare(None, None)


def test_in_place_rotates_the_callers_memory_without_copies():
    rope = ROPES["llama3_half"]()
    rng = np.random.default_rng(1)
    # NumPy: same object, same buffer, the caller's other views see the change.
    q = rng.standard_normal((1, 4, 8, 128)).astype(np.float32)
    alias = q.reshape(-1)
    ptr = q.__array_interface__["data"][0]
    before = q.copy()
    out = rope.apply(q, None, np.arange(4))
    assert out is q and q.__array_interface__["data"][0] == ptr
    assert not np.array_equal(alias, before.reshape(-1))
    assert np.array_equal(alias, q.reshape(-1))
    # torch: same tensor, same data_ptr, a view into a bigger buffer rotates inside the buffer.
    buf = torch.randn(1, 4, 16, 128)
    view = buf[:, :, 4:12]  # heads 4..11, strided: not contiguous
    assert not view.is_contiguous()
    ptr = view.data_ptr()
    want = rope.apply(view.contiguous(), None, torch.arange(4), inplace=False)
    untouched = torch.cat((buf[:, :, :4], buf[:, :, 12:]), 2).clone()
    res = rope.apply(view, None, torch.arange(4))
    assert res is view and view.data_ptr() == ptr
    assert torch.equal(buf[:, :, 4:12], want)
    assert torch.equal(torch.cat((buf[:, :, :4], buf[:, :, 12:]), 2), untouched)


def test_bhsd_view_of_bshd_storage_and_out_of_place():
    rope = ROPES["yarn_interleaved_partial"]()
    x = torch.randn(2, 5, 3, 96)
    as_bhsd = x.transpose(1, 2)  # strided: [b, h, s, d] over [b, s, h, d] storage
    want = rope.apply(x.clone(), None, None, layout="bshd")
    y = rope.apply(as_bhsd, None, None, layout="bhsd", inplace=False)
    assert y.data_ptr() != x.data_ptr()
    assert torch.equal(y.transpose(1, 2), want)
    rope.apply(as_bhsd, None, None, layout="bhsd")
    assert torch.equal(x, want)


def test_angles_hf_and_accurate_differ_only_by_hfs_angle_error():
    rope = ROPES["llama3_half"]()
    pos = np.array([0, 1, 4096, 100000, 1_000_000, 10_000_000])
    ca, sa = rope.cos_sin(pos)
    ch, sh = rope.cos_sin(pos, angles="hf")
    p = pos[:, None].astype(np.float64)
    w = np.concatenate([rope.inv_freq64] * 2)
    hf_angle = (p.astype(np.float32) * w.astype(np.float32)).astype(np.float64)
    bound = np.abs(p * w - hf_angle) + 2.0 ** -23
    assert (np.abs(ca - ch) <= bound).all() and (np.abs(sa - sh) <= bound).all()
    assert np.abs(ca - ch).max() > 1e-3  # at 10^7 HF's float32 angle is visibly off


def test_cos_sin_layouts_and_magnitude():
    rope = ROPES["yarn_interleaved_partial"]()
    pos = np.array([[0, 3, 70000]])
    c, s = rope.cos_sin(pos)
    ch, sh = rope.cos_sin(pos, layout="half")
    assert c.shape == (1, 3, 64) and ch.shape == (1, 3, 32) and c.dtype == np.float32
    assert np.array_equal(c[..., :32], ch) and np.array_equal(c[..., 32:], ch)
    assert c[0, 0, 0] == np.float32(rope.cos_sin_scale)  # cos 0 · m, rounded once
    oc, os_ = oracle_cos_sin(rope, pos)
    # cos rounded (6e-8·m), float32(m) (6e-8·|cos|), the product rounded (6e-8 below 2): 6e-8·(m + 2).
    assert np.abs(ch - oc.numpy()).max() <= 6e-8 * (rope.cos_sin_scale + 2)


def test_mrope_cos_sin_selects_each_pairs_stream():
    rope = ROPES["mrope_sectioned"]()
    pos = np.stack([np.arange(4), np.arange(4) * 10, np.arange(4) * 100])
    c, _ = rope.cos_sin(pos, layout="half")
    oc, _ = oracle_cos_sin(rope, pos)
    assert c.shape == (4, 64)
    assert np.abs(c - oc.numpy()).max() <= 6e-8  # magnitude 1: the correctly rounded cos


def test_scaling_variants_describe_every_variant_once():
    variants = ropekit.scaling_variants()
    names = [v["rope_type"] for v in variants]
    assert len(names) == len(set(names)) == 11
    hunyuan = next(v for v in variants if v["rope_type"] == "hunyuan_alpha")
    assert not hunyuan["config_rope_type"] and [f["key"] for f in hunyuan["fields"]] == [
        "alpha", "factor", "max_position_embeddings"]
    config = {"model_type": "hunyuan_v1_dense", "hidden_size": 512, "num_attention_heads": 4, "head_dim": 128,
              "max_position_embeddings": 32768, "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}}
    assert ropekit.Rope.from_config(config).spec["rope_scaling"] == {
        "rope_type": "hunyuan_alpha", "alpha": 1000.0, "factor": 1.0, "max_position_embeddings": 32768}
    yarn = next(v for v in variants if v["rope_type"] == "yarn")
    assert yarn["config_rope_type"] and "ramp" in yarn["formula"]
    fields = {f["key"]: f for f in yarn["fields"]}
    assert fields["factor"]["presence"] == "required"
    assert fields["beta_fast"]["presence"] == "default"
    assert fields["attention_factor"]["presence"] == "optional"
    # Spec dicts name exactly the described fields.
    spec = ropekit.Rope.from_preset("qwen2.5-7b-instruct-yarn4").spec
    assert set(spec["rope_scaling"]) == {"rope_type"} | set(fields)
