"""PagedKvCache from Python: sequences appended interleaved attend exactly like one KvCache each; the
sequence operations match KvCache's; the page table describes the pages; bad input is a ropekit.Error."""
import numpy as np
import pytest
import torch

import ropekit


def tokens(rng, n, heads, d, dtype="float32"):
    x = rng.standard_normal((n, heads, d)).astype(np.float32)
    return torch.from_numpy(x).to(torch.bfloat16) if dtype == "bfloat16" else x


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_sequences_attend_like_their_own_kv_cache(dtype, layout):
    rope = ropekit.Rope(64)
    rng = np.random.default_rng(1)
    lengths = [6, 19, 11]
    ks = [tokens(rng, n, 2, 64, dtype) for n in lengths]  # stored as given: bf16 tokens into a bf16 cache
    vs = [tokens(rng, n, 2, 64, dtype) for n in lengths]
    stack = torch.stack if dtype == "bfloat16" else np.stack
    cache = ropekit.PagedKvCache(rope, 32, 4, 2, 3, dtype=dtype, layout=layout)
    # Decode-style: one token of each unfinished sequence per call, positions left to the cache.
    for t in range(max(lengths)):
        seqs = [s for s in range(3) if t < lengths[s]]
        cache.append(rope, seqs, stack([ks[s][t] for s in seqs]), stack([vs[s][t] for s in seqs]))
    assert [cache.length(s) for s in range(3)] == lengths
    np.testing.assert_array_equal(cache.positions(1), np.arange(19))
    q = tokens(rng, 3, 4, 64, dtype)
    out = cache.attention(rope, q, lengths, [0, 1, 2])
    for s in range(3):
        own = ropekit.KvCache(rope, 32, 2, dtype=dtype)
        own.append(rope, ks[s], vs[s])
        want = own.attention(rope, q[s:s + 1], [lengths[s]])
        assert bool((out[s:s + 1] == want).all()), f"sequence {s}"


def test_sequence_operations_match_kv_cache():
    rope = ropekit.Rope(64)
    rng = np.random.default_rng(2)
    k, v = tokens(rng, 20, 2, 64), tokens(rng, 20, 2, 64)
    cache = ropekit.PagedKvCache(rope, 16, 4, 2, 2)
    cache.append(rope, [0] * 20, k, v)
    cache.erase(0, 3, 8)
    cache.shift(0, 8, -1, -5)
    own = ropekit.KvCache(rope, 20, 2)
    own.append(rope, k, v)
    own.erase(3, 8)
    own.shift(3, len(own), -5)
    np.testing.assert_array_equal(cache.positions(0), own.positions())
    q = tokens(rng, 1, 4, 64)
    np.testing.assert_array_equal(cache.attention(rope, q, [15], [0]), own.attention(rope, q, [15]))
    indices, indptr, last = cache.page_table([0])
    np.testing.assert_array_equal(indices, cache.pages(0))
    assert list(indptr) == [0, 4] and list(last) == [3]  # 15 entries in pages of 4
    assert cache.free_pages == 12
    cache.seq_clear(0)
    assert cache.free_pages == 16


def test_bad_input():
    rope = ropekit.Rope(64)
    cache = ropekit.PagedKvCache(rope, 2, 4, 2, 2)
    k = np.zeros((9, 2, 64), np.float32)
    with pytest.raises(ropekit.Error, match="need 3 more pages"):
        cache.append(rope, [0] * 9, k, k)
    assert cache.length(0) == 0 and cache.free_pages == 2
    with pytest.raises(ropekit.Error, match="seq_ids has 2 values"):
        cache.append(rope, [0, 1], k[:1], k[:1])
    with pytest.raises(ropekit.Error, match="sequence 5"):
        cache.append(rope, [5], k[:1], k[:1])
    with pytest.raises(ropekit.Error, match="dtype"):
        ropekit.PagedKvCache(rope, 2, 4, 2, 2, dtype="int8")
    with pytest.raises(ropekit.Error, match="layout"):
        ropekit.PagedKvCache(rope, 2, 4, 2, 2, layout="bshd")


def test_rotate_and_cache_on_numpy_arrays():
    """ropekit.rotate_and_cache with NumPy: the float16 cache holds NumPy's own rounding (round to nearest even) of
    the rotated key, at each token's slot; the key itself rotated in place; fp8 caches as uint8 bits need
    cache_dtype."""
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    rng = np.random.default_rng(3)
    key = rng.standard_normal((5, 2, 128)).astype(np.float32)
    value = rng.standard_normal((5, 2, 32)).astype(np.float32)
    positions = np.array([9, 4, 1000, 0, 77])
    slots = np.array([6, -1, 0, 3, 1], dtype=np.int64)
    key_cache = np.full((2, 4, 2, 128), 7.0, dtype=np.float16)
    value_cache = np.full((2, 4, 2, 32), 7.0, dtype=np.float16)
    want_k = rope.apply(key, None, positions[None], layout="thd", inplace=False)
    k = key.copy()
    ropekit.rotate_and_cache(rope, key_cache, value_cache, k, value, slots, positions=positions)
    np.testing.assert_array_equal(k, want_k)
    for t, slot in enumerate(slots):
        page, entry = divmod(int(slot), 4)
        if slot >= 0:
            np.testing.assert_array_equal(key_cache[page, entry], want_k[t].astype(np.float16))
            np.testing.assert_array_equal(value_cache[page, entry], value[t].astype(np.float16))
    assert (key_cache[1, 1] == 7.0).all() and (key_cache[0, 2] == 7.0).all()  # slots 5 and 2: no token
    with pytest.raises(ropekit.Error, match="cache_dtype"):
        ropekit.rotate_and_cache(rope, np.zeros((2, 4, 2, 128), np.uint8), np.zeros((2, 4, 2, 32), np.uint8), key,
                                 value, slots)
    ropekit.rotate_and_cache(rope, np.zeros((2, 4, 2, 128), np.uint8), np.zeros((2, 4, 2, 32), np.uint8), key, value,
                             slots, cache_dtype="f8e4m3", k_scale=0.05, v_scale=0.05)
    with pytest.raises(ropekit.Error, match="slot_mapping is None"):
        ropekit.rotate_and_cache(rope, key_cache, value_cache, key, value, None)
    with pytest.raises(ropekit.Error, match="C-contiguous"):
        ropekit.rotate_and_cache(rope, key_cache[:, ::2], value_cache, key, value, slots)


def test_llama_cpp_names_are_deprecated_aliases():
    """seq_rm / seq_add (llama.cpp's) warn and do exactly what erase / shift do (docs/conventions.md)."""
    rope = ropekit.Rope(64)
    rng = np.random.default_rng(3)
    k, v = tokens(rng, 12, 2, 64), tokens(rng, 12, 2, 64)
    new, old = (ropekit.PagedKvCache(rope, 8, 4, 2, 1) for _ in range(2))
    for cache in (new, old):
        cache.append(rope, [0] * 12, k, v)
    new.erase(0, 2, 4)
    new.shift(0, 4, -1, -2)
    with pytest.warns(DeprecationWarning, match="renamed erase"):
        old.seq_rm(0, 2, 4)
    with pytest.warns(DeprecationWarning, match="renamed shift"):
        old.seq_add(0, 4, -1, -2)
    np.testing.assert_array_equal(old.positions(0), new.positions(0))
    q = tokens(rng, 1, 4, 64)
    np.testing.assert_array_equal(old.attention(rope, q, [10], [0]), new.attention(rope, q, [10], [0]))
