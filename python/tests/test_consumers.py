"""The KV cache, attention, linear attention, the per-layer plan, analysis, the model runner and the lab,
from Python, against NumPy oracles or the C++ contracts they state."""
import numpy as np
import pytest
import torch

import ropekit

from conftest import CONFIGS, REPO


def softmax_attention_oracle(q, k, v, scale, causal=True, q_pos=None, k_pos=None):
    """float64 softmax attention, [s, h, d] inputs (already rotated), GQA by repeat."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, 1), np.repeat(v, rep, 1)
    logits = np.einsum("shd,thd->hst", q, k) * scale
    if causal:
        qp = np.arange(q.shape[0]) if q_pos is None else np.asarray(q_pos)
        kp = np.arange(k.shape[0]) if k_pos is None else np.asarray(k_pos)
        logits = np.where(kp[None, None, :] <= qp[None, :, None], logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("hst,thd->shd", w, v)


def test_attention_with_fused_rope_equals_apply_then_oracle():
    rope = ropekit.Rope.from_preset("qwen2.5-7b-instruct-yarn4")
    rng = np.random.default_rng(0)
    s, d = 40, rope.head_dim
    q = rng.standard_normal((1, s, 4, d)).astype(np.float32)
    k = rng.standard_normal((1, s, 2, d)).astype(np.float32)
    v = rng.standard_normal((1, s, 2, 32)).astype(np.float32)
    out = ropekit.attention(q, k, v, rope)
    assert out.shape == (1, s, 4, 32) and out.dtype == np.float32
    qr, kr = rope.apply(q, k, inplace=False)
    scale = rope.softmax_scale_mult / np.sqrt(d)
    want = softmax_attention_oracle(qr[0], kr[0], v[0], scale)
    logits = np.einsum("shd,thd->hst", qr[0].astype(np.float64), np.repeat(kr[0], 2, 1).astype(np.float64)) * scale
    bound = 1e-6 * (1 + np.ptp(logits)) * np.abs(v).max()  # attention.hpp's contract (R ≤ the full range)
    assert np.abs(out[0] - want).max() <= bound
    # Without a rope: the same attention on the rotated inputs, bit for bit (attention.hpp).
    assert np.array_equal(ropekit.attention(qr, kr, v, softmax_scale=1 / np.sqrt(d) * rope.softmax_scale_mult), out)


def test_kv_cache_append_shift_and_rerotate():
    rope = ropekit.Rope(64, base=1e4, max_position_embeddings=256, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    rng = np.random.default_rng(1)
    k = rng.standard_normal((10, 2, 64)).astype(np.float32)
    v = rng.standard_normal((10, 2, 64)).astype(np.float32)
    cache = ropekit.KvCache(rope, 64, 2)
    cache.append(rope, k, v)  # positions 0..9 (after the cached ones)
    assert cache.size == 10 and list(cache.positions()) == list(range(10))
    want = rope.apply(k[None], None, np.arange(10), inplace=False)[0]
    assert np.array_equal(cache.keys(), want)  # stored rotated: exactly what apply writes
    assert np.array_equal(cache.values(), v)
    # K-shift by δ = rotating at p + δ, within kv_cache.hpp's (5 + 2.5)·ε·m·‖pair‖ for one shift.
    cache.shift(2, 10, 100)
    moved = rope.apply(k[None], None, np.r_[0, 1, np.arange(102, 110)], inplace=False)[0]
    norms = np.linalg.norm(np.stack([k[..., :32], k[..., 32:]]), axis=0)
    norms = np.concatenate([norms, norms], -1)
    assert (np.abs(cache.keys() - moved) <= 7.5 * 2**-24 * norms + 1e-30).all()
    # A plan change (dynamic NTK past its length) needs re-rotation; the cache says so and does it.
    grown = ropekit.Rope(64, base=1e4, max_position_embeddings=256, current_length=1000,
                         rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ropekit.Error):
        cache.append(grown, k[:1], v[:1])
    assert cache.rerotate(grown) is True
    assert cache.rerotate(grown) is False
    again = grown.apply(k[None], None, np.r_[0, 1, np.arange(102, 110)], inplace=False)[0]
    assert (np.abs(cache.keys() - again) <= 15 * 2**-24 * norms + 1e-30).all()
    # Attention of new queries against the cache = attention with the keys as cached.
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    out = cache.attention(grown, q, np.array([200]))
    qr = grown.apply(q[None], None, np.array([200]), inplace=False)[0]
    want = softmax_attention_oracle(qr, cache.keys(), cache.values(), 1 / 8.0, True, [200], cache.positions())
    assert np.abs(out - want).max() <= 1e-5
    cache.erase(0, 5)
    assert cache.size == 5
    cache.clear()
    assert len(cache) == 0


def test_linear_attention_forms_agree():
    rope = ropekit.Rope(32)
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 24, 2, 32)).astype(np.float32) for _ in range(3))
    a = ropekit.linear_attention(rope, q, k, v)
    b = ropekit.linear_attention(rope, q, k, v, form="parallel")
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_model_positions_and_analysis():
    plan = ropekit.model_positions(str(CONFIGS / "exaone-4.0-32b.json"))
    assert plan["num_layers"] == 64 and len(plan["groups"]) == 2
    nope = [g for g in plan["groups"] if g["encoding"] == "none"][0]
    assert nope["layers"][:3] == [3, 7, 11] and nope["spec"] is None
    rope = ropekit.Rope.from_config(str(CONFIGS / "exaone-4.0-32b.json"))
    assert rope.layer["sliding_window"] == 4096
    bands = ropekit.Rope.from_preset("llama-3.1-8b").bands()
    assert set(bands["band"]) == {"extrapolated", "blended", "interpolated"}
    assert bands["wavelength"][0] == pytest.approx(2 * np.pi)
    decay = ropekit.Rope(128).decay_bound(64)
    # r = 0: every partial sum S_j = j, so (1/64)·Σ_{j=1..64} j = 32.5; the bound then decays.
    assert decay.shape == (65,) and decay[0] == pytest.approx(32.5) and decay[-1] < decay[0]
    checks = ropekit.Rope.from_preset("llama-3.1-8b").verify()
    assert checks and all(c["passed"] or c["skipped"] for c in checks)


def test_a_gguf_model_read_into_memory_equals_the_mapped_one():
    path = str(REPO / "tests" / "data" / "hf_models" / "llama_f32.gguf")
    tokens = [1, 5, 9, 33, 7]
    mapped, copied = ropekit.Model(path), ropekit.Model(path, mmap=False)
    assert np.array_equal(mapped.logits(tokens), copied.logits(tokens))


def test_model_runner_and_lab():
    model = ropekit.Model(str(REPO / "models" / "tinystories-260k.bin"))
    tok = ropekit.Tokenizer(str(REPO / "models" / "tok512.bin"))
    assert model.config["vocab_size"] == tok.vocab_size == 512
    prompt = tok.encode("Once upon a time")
    # Greedy generation = the argmax of the logits of the whole sequence, token by token.
    out = model.generate(prompt, 24)
    seq = prompt + out
    logits = model.logits(seq[:-1])
    assert logits.shape == (len(seq) - 1, 512)
    assert list(np.argmax(logits[len(prompt) - 1:], -1)) == out[: len(seq) - len(prompt)]
    assert tok.decode(out).strip()
    text = (REPO / "data" / "tinystories-valid-excerpt.txt").read_text()[:20000]
    tokens = tok.encode(text)
    table = ropekit.eval(model, tokens, methods="orig,pi", lengths=[256, 512], window_size=512, windows=1,
                         buckets=[0, 256, 512])
    assert set(table["method"]) == {"orig", "pi"}
    assert (table["ppl"] > 1).all() and np.allclose(table["ppl"], np.exp(table["mean_nll"]))
    probe = ropekit.eval(model, tokens, methods="orig,swa", lengths=[512], window_size=512, windows=1,
                         buckets=[0, 256, 512], attention_stats=True)["attention"]
    # Rows per method: all layers (-1) then each of the 5, for the two target buckets; mass sums to 1.
    assert list(probe["distance_edges"]) == [0, 1, 16, 256]
    assert probe["mass"].shape == (2 * 6 * 2, 4)
    assert np.allclose(probe["mass"].sum(axis=1), 1.0)
    # At N = L0 the sliding window (L0 keys) hides nothing: the same distributions as orig.
    assert np.allclose(probe["mass"][probe["method"] == "swa"], probe["mass"][probe["method"] == "orig"])
    assert (probe["earlier_stories"] >= 0).all() and (probe["entropy_ratio"] <= 1 + 1e-9).all()


def test_example_script_plots_the_bands(tmp_path):
    import subprocess
    import sys
    pytest.importorskip("matplotlib")  # Debian's python3-matplotlib; not in the PyTorch 2 environment
    out = tmp_path / "bands.png"
    subprocess.run([sys.executable, str(REPO / "examples" / "python" / "compare_methods.py"),
                    str(CONFIGS / "smollm3-3b.json"), "--out", str(out)], check=True, capture_output=True)
    assert out.stat().st_size > 10000
