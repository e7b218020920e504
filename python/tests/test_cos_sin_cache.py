"""Engines' cos/sin caches from Python: ropekit's export in vLLM's layout within its stated bound of the
exact angles (float64 NumPy here), and the checker locating where a float32-angle cache, made the way
vLLM makes it, drifts past a tolerance."""
import numpy as np
import pytest
import torch

import ropekit


def exact(rope, n):
    """m·cos / m·sin of p·inv_freq in float64: [n, rotary_dim], cos half then sin half."""
    angles = np.arange(n, dtype=np.float64)[:, None] * rope.inv_freq64[None, :]
    m = rope.cos_sin_scale
    return np.concatenate([m * np.cos(angles), m * np.sin(angles)], axis=1)


def vllm_cache(rope, n):
    """As vLLM's _compute_cos_sin_cache: float32 positions × float32 inv_freq, cos/sin in float32."""
    t = torch.arange(n, dtype=torch.float32)
    freqs = torch.einsum("i,j->ij", t, torch.from_numpy(rope.inv_freq))
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).numpy()


def test_export_is_within_its_bound_and_matches_cos_sin():
    rope = ropekit.Rope.from_preset("qwen2.5-7b-instruct-yarn4")  # YaRN: the magnitude is in the cache
    assert rope.cos_sin_scale != 1.0
    n = 3000
    cache = rope.export_cos_sin_cache(n)
    assert cache.shape == (n, 2 * len(rope.inv_freq64)) and cache.dtype == np.float32
    report = rope.check_cos_sin_cache(cache)
    err = np.abs(cache.astype(np.float64) - exact(rope, n))
    assert err.max() <= report["accurate_bound"]
    assert abs(report["max_error"] - err.max()) <= 1e-12
    assert report["first_position_over"] == -1
    # The same coefficients every call rotates with (Rope.cos_sin, half layout).
    c, s = rope.cos_sin(np.arange(n), layout="half")
    pairs = cache.shape[1] // 2
    np.testing.assert_array_equal(c, cache[:, :pairs])
    np.testing.assert_array_equal(s, cache[:, pairs:])


def test_checker_locates_the_drift_of_a_float32_angle_cache():
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    n = 40000
    cache = vllm_cache(rope, n)
    report = rope.check_cos_sin_cache(cache, tolerance=1e-5)
    err = np.abs(cache.astype(np.float64) - exact(rope, n)).max(axis=1)
    first = report["first_position_over"]
    assert 0 < first < n
    assert err[first] > 1e-5 and (err[:first] <= 1e-5).all()
    assert abs(report["max_error"] - err.max()) <= 1e-12
    assert report["max_error"] > 100 * report["accurate_bound"]


def test_bad_cache_is_an_error():
    rope = ropekit.Rope(64)
    with pytest.raises(ropekit.Error, match="rotary_dim = 64"):
        rope.check_cos_sin_cache(np.zeros((10, 63), np.float32))
    with pytest.raises(ropekit.Error, match="num_positions = -1"):
        rope.export_cos_sin_cache(-1)
    with pytest.raises(ropekit.Error, match="tolerance = 0"):
        rope.check_cos_sin_cache(np.zeros((10, 64), np.float32), tolerance=0.0)


def test_apply_with_an_imported_cache_uses_exactly_its_values():
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    n = 70000
    # vLLM's float32-angle cache, imported: rotating with it is rotating with its values — the float64
    # rotation of q by them, rounded once — not with ropekit's accurate angles.
    cache = vllm_cache(rope, n)
    table = rope.import_cos_sin_cache(cache)
    assert table.num_positions == n
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 2, 128)).astype(np.float32)
    pos = np.array([[3, 65000, 69999, 40000]])
    got = rope.apply(q, positions=pos, inplace=False, table=table)
    own = rope.apply(q, positions=pos, inplace=False)
    assert not np.array_equal(got, own)
    c = cache[pos[0]][:, None, :64].astype(np.float64)
    s = cache[pos[0]][:, None, 64:].astype(np.float64)
    a, b = q[0, :, :, :64].astype(np.float64), q[0, :, :, 64:].astype(np.float64)
    want = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
    np.testing.assert_allclose(got[0], want, rtol=0, atol=4e-7 * np.abs(q).max())
    with pytest.raises(ropekit.Error, match="position 70000 is outside the table"):
        rope.apply(q, positions=np.array([[0, 1, 2, n]]), table=table)
    with pytest.raises(ropekit.Error, match="other frequencies"):
        ropekit.Rope(128).apply(q, positions=pos, table=table)
    with pytest.raises(ropekit.Error, match="position 3 pair 5: cos = nan"):
        bad = cache[:10].copy()
        bad[3, 5] = np.nan
        rope.import_cos_sin_cache(bad)


def test_attention_and_caches_with_an_imported_cache():
    # vLLM's float32-angle cache drives the keys the caches store and the queries attention rotates: a
    # KvCache and a PagedKvCache (two sequences, pages interleaved) appended with it attend exactly as
    # ropekit.attention over the raw keys with it, and otherwise than with ropekit's own angles.
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    n, first = 40, 30000
    table = rope.import_cos_sin_cache(vllm_cache(rope, first + n))
    rng = np.random.default_rng(7)
    k = rng.standard_normal((n, 2, 128)).astype(np.float32)
    v = rng.standard_normal((n, 2, 128)).astype(np.float32)
    q = rng.standard_normal((1, 8, 128)).astype(np.float32)
    kpos = np.arange(first, first + n)
    qpos = np.array([first + n - 1])
    fused = ropekit.attention(q[None], k[None], v[None], rope, qpos[None], kpos[None], table=table)[0]
    own = ropekit.attention(q[None], k[None], v[None], rope, qpos[None], kpos[None])[0]
    assert not np.array_equal(fused, own)

    cache = ropekit.KvCache(rope, 64, 2)
    cache.append(rope, k, v, kpos, table=table)
    np.testing.assert_array_equal(cache.attention(rope, q, qpos, table=table), fused)

    paged = ropekit.PagedKvCache(rope, 24, 4, 2, 2)
    for t in range(0, n, 4):
        for s in (0, 1):
            paged.append(rope, [s] * 4, k[t:t + 4], v[t:t + 4], kpos[t:t + 4], table=table)
    np.testing.assert_array_equal(paged.attention(rope, q, qpos, [1], table=table), fused)
    with pytest.raises(ropekit.Error, match="outside the table"):
        paged.attention(rope, q, np.array([first + n]), [1], table=table)


def test_cos_sin_cache_is_a_deprecated_alias_of_export():
    rope = ropekit.Rope(64)
    with pytest.warns(DeprecationWarning, match="renamed export_cos_sin_cache"):
        old = rope.cos_sin_cache(8)
    np.testing.assert_array_equal(old, rope.export_cos_sin_cache(8))
