"""ropekit.torch: gradients through the kernel against autograd through the float64 oracle; the
nn.Module and HF-signature helpers against HF's expressions."""
import numpy as np
import pytest
import torch

import ropekit
from ropekit.torch import (RotaryEmbedding, apply_multimodal_rotary_pos_emb, apply_rotary,
                           apply_rotary_pos_emb)

from conftest import CONFIGS, oracle_cos_sin, oracle_rotate


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "thd"])
@pytest.mark.parametrize("rope_args", [
    dict(head_dim=128, base=5e5, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    dict(head_dim=80, rotary_dim=48, pairing="interleaved",
         rope_scaling={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}),
])
def test_gradients_equal_the_oracles(layout, rope_args):
    # Loss L = Σ w_q·q' + Σ w_k·k' (+ a square, so the gradient depends on q' itself). Tolerance: the
    # float32 kernel vs the float64 oracle — each gradient lane is one Backward rotation of float32
    # values (3e-7·m·‖pair‖ of the incoming gradient, ropekit/call.hpp) plus the float32 forward error
    # entering through the square term: 1e-5 relative to the gradient's scale is a ~30× margin.
    rope = ropekit.Rope(**rope_args)
    g = torch.Generator().manual_seed(0)
    shape_q = {"bshd": (2, 6, 4, rope.head_dim), "bhsd": (2, 4, 6, rope.head_dim), "thd": (6, 4, rope.head_dim)}[layout]
    shape_k = list(shape_q)
    shape_k[2 if layout == "bshd" else 1] = 2
    q64 = torch.randn(shape_q, generator=g, dtype=torch.float64)
    k64 = torch.randn(shape_k, generator=g, dtype=torch.float64)
    wq, wk = torch.randn(shape_q, generator=g, dtype=torch.float64), torch.randn(shape_k, generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 5, 17, 4096, 70000, 1 << 20])

    def loss(qr, kr):
        return (wq * qr).sum() + (wk * kr).sum() + 0.5 * (qr * qr).sum()

    q = q64.float().requires_grad_()
    k = k64.float().requires_grad_()
    qo, ko = apply_rotary(rope, q, k, pos, layout=layout)
    assert qo.grad_fn is not None
    loss(qo.double(), ko.double()).backward()

    cos, sin = oracle_cos_sin(rope, pos.numpy())
    def tokens(x):
        return x.transpose(1, 2) if layout == "bhsd" else (x.unsqueeze(0) if layout == "thd" else x)
    qx = q.detach().double().requires_grad_()
    kx = k.detach().double().requires_grad_()
    qr = oracle_rotate(rope, tokens(qx), cos, sin)
    kr = oracle_rotate(rope, tokens(kx), cos, sin)
    back = (lambda t: t.transpose(1, 2)) if layout == "bhsd" else ((lambda t: t[0]) if layout == "thd" else (lambda t: t))
    loss(back(qr), back(kr)).backward()
    for got, want in ((q.grad, qx.grad), (k.grad, kx.grad)):
        scale = want.abs().max()
        assert (got.double() - want).abs().max() <= 1e-5 * scale


def test_gradient_of_k_alone_and_q_alone():
    rope = ropekit.Rope(64)
    q = torch.randn(1, 3, 2, 64, requires_grad=True)
    out = apply_rotary(rope, q, None, torch.tensor([1, 2, 3]))
    out.sum().backward()
    # d/dq Σ R q = Rᵀ 1: the Backward rotation of ones.
    want = rope.apply(torch.ones(1, 3, 2, 64), None, torch.tensor([1, 2, 3]), direction="backward")
    assert torch.equal(q.grad, want)


def test_apply_rotary_differentiates_through_the_operator():
    """With torch.library (PyTorch >= 2.4) apply_rotary is ropekit::rotate, whose backward is the operator's own (the
    transpose rotation), not RotaryFunction's (PyTorch < 2.4 only); the gradients are the Backward rotation."""
    pytest.importorskip("ropekit.ops", reason="PyTorch >= 2.4 needed for torch.library")
    rope = ropekit.Rope(64)
    pos = torch.tensor([[4, 5, 6]])
    q = torch.randn(1, 3, 2, 64, requires_grad=True)
    k = torch.randn(1, 3, 2, 64, requires_grad=True)
    qo, ko = apply_rotary(rope, q, k, pos)
    assert "RotaryFunction" not in type(qo.grad_fn).__name__
    (qo.sum() + 2 * ko.sum()).backward()
    want = rope.apply(torch.ones(1, 3, 2, 64), None, pos, direction="backward")
    assert torch.equal(q.grad, want) and torch.equal(k.grad, 2 * want)


def test_rotary_function_has_the_operators_backward():
    """RotaryFunction (PyTorch < 2.4's path) and ropekit::rotate's registration share one backward rule
    (ropekit/_autograd.py): called directly here, its gradients equal the operator path's bit for bit, an unused
    output's gradient included (zero)."""
    from ropekit.torch import RotaryFunction
    rope = ropekit.Rope(64, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 4096})  # magnitude ≠ 1
    pos = torch.tensor([[4, 5, 6]])
    q0, k0 = torch.randn(1, 3, 2, 64), torch.randn(1, 3, 2, 64)
    grads = {}
    for name in ("function", "operator"):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        if name == "function":
            qo, ko = RotaryFunction.apply(rope, pos, "bshd", "accurate", q, k)
        else:
            qo, ko = apply_rotary(rope, q, k, pos)
        (qo * torch.arange(64.0)).sum().backward()  # k's output unused: its gradient is zero
        grads[name] = (q.grad, k.grad)
    want = rope.apply(torch.arange(64.0).expand(1, 3, 2, 64).contiguous(), None, pos, direction="backward")
    assert torch.equal(grads["function"][0], want)
    assert torch.equal(grads["function"][0], grads["operator"][0])
    assert torch.equal(grads["function"][1], torch.zeros_like(k0))
    assert torch.equal(grads["operator"][1], torch.zeros_like(k0))


def test_apply_refuses_tensors_that_require_grad():
    rope = ropekit.Rope(64)
    q = torch.randn(1, 2, 1, 64, requires_grad=True)
    with pytest.raises(ropekit.Error, match="requires grad"):
        rope.apply(q)
    with torch.no_grad():
        rope.apply(q)  # fine without grad mode


def test_rotary_embedding_like_hf():
    config = "qwen2.5-7b-instruct-yarn4"  # a preset: YaRN, magnitude ≠ 1
    emb = RotaryEmbedding(config)
    assert emb.rope.cos_sin_scale > 1
    hf = RotaryEmbedding(config, angles="hf")
    x = torch.zeros(1, dtype=torch.bfloat16)
    pos = torch.arange(0, 40000, 997)[None]
    cos, sin = emb(x, pos)
    assert cos.dtype == torch.bfloat16 and cos.shape == (1, pos.shape[1], emb.rope.rotary_dim)
    c32, _ = emb(torch.zeros(1), pos)
    ch, _ = hf(torch.zeros(1), pos)
    oc, _ = oracle_cos_sin(emb.rope, pos[0].numpy())
    ref = torch.cat((oc, oc), -1)
    # Accurate: cos correctly rounded (≤ 6e-8·m), float32(m) (≤ 6e-8·|cos|) and the product rounded
    # once (≤ 6e-8 below 2): ≤ 6e-8·(m + 2) from the float64 m·cos. HF's float32 angle is further off.
    m = emb.rope.cos_sin_scale
    assert (c32[0].double() - ref).abs().max() <= 6e-8 * (m + 2)
    assert (ch[0].double() - ref).abs().max() > (c32[0].double() - ref).abs().max()
    # apply_rotary_pos_emb with the module's cos/sin = ropekit's kernel, to HF's expression's rounding.
    q = torch.randn(1, 4, pos.shape[1], emb.rope.head_dim)
    k = torch.randn(1, 2, pos.shape[1], emb.rope.head_dim)
    q2, k2 = apply_rotary_pos_emb(q, k, c32, emb(torch.zeros(1), pos)[1])
    qk, kk = emb.rope.apply(q, k, pos, layout="bhsd", inplace=False)
    assert (q2 - qk).abs().max() <= 1e-6 * q.abs().max() and (k2 - kk).abs().max() <= 1e-6 * k.abs().max()


def test_multimodal_helper_matches_the_mrope_kernel():
    rope = ropekit.Rope(128, base=1e6, mrope_section=[16, 24, 24])
    emb = RotaryEmbedding(rope)
    pos = torch.stack([torch.arange(6), torch.arange(6) // 2, torch.arange(6) % 3])[:, None, :]  # [3, 1, 6]
    cos, sin = emb(torch.zeros(1), pos)
    assert cos.shape == (3, 1, 6, 128)
    q = torch.randn(1, 2, 6, 128)
    k = torch.randn(1, 2, 6, 128)
    q2, k2 = apply_multimodal_rotary_pos_emb(q, k, cos, sin, [16, 24, 24])
    qk, kk = rope.apply(q, k, pos, layout="bhsd", inplace=False)
    assert (q2 - qk).abs().max() <= 1e-6 * q.abs().max() and (k2 - kk).abs().max() <= 1e-6 * k.abs().max()


def test_per_layer_config_needs_a_layer_type():
    path = CONFIGS / "gemma-4-text-defaults.json"  # sliding: default θ 1e4; full: proportional θ 1e6
    with pytest.raises(ropekit.Error, match="layer_type"):
        RotaryEmbedding(str(path))
    local = RotaryEmbedding(str(path), layer_type="sliding_attention")
    glob = RotaryEmbedding(str(path), layer_type="full_attention")
    assert local.rope.spec["base"] != glob.rope.spec["base"]


def test_rotary_embedding_follows_hf_length_rules():
    """LongRoPE and dynamic NTK decide their plan from max(position_ids) + 1, as HF's dynamic_rope_update."""
    emb = RotaryEmbedding("phi-3-mini-128k-instruct", angles="hf")
    x = torch.zeros(1, dtype=torch.float32)
    short = ropekit.Rope.from_preset("phi-3-mini-128k-instruct")
    long = ropekit.RopeSet(short).at(131072)
    assert not np.array_equal(short.inv_freq, long.inv_freq)
    emb(x, torch.tensor([[0, 131071]]))
    assert np.array_equal(emb.inv_freq.numpy(), long.inv_freq)  # long factors, as HF at 131072 tokens
    emb(x, torch.tensor([[0, 4095]]))
    assert np.array_equal(emb.inv_freq.numpy(), short.inv_freq)  # back to the short ones
    fixed = RotaryEmbedding("phi-3-mini-128k-instruct", angles="hf", follow_length=False)
    fixed(x, torch.tensor([[0, 131071]]))
    assert np.array_equal(fixed.inv_freq.numpy(), short.inv_freq)

    config = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 2048,
              "rope_scaling": {"rope_type": "dynamic", "factor": 4}}
    dyn = RotaryEmbedding(config, angles="hf")
    at = {}
    for length in (2048, 4096, 8192):
        at[length] = ropekit.RopeSet(ropekit.Rope.from_config(config)).at(length).inv_freq
    dyn(x, torch.arange(4096)[None])
    assert np.array_equal(dyn.inv_freq.numpy(), at[4096])  # grown
    dyn(x, torch.arange(3000)[None])
    assert np.array_equal(dyn.inv_freq.numpy(), at[4096])  # shorter, still past 2048: kept (HF caches)
    dyn(x, torch.arange(100)[None])
    assert np.array_equal(dyn.inv_freq.numpy(), at[2048])  # below the trained length: reset
