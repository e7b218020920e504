"""ropekit's torch.library operators (ropekit.ops): the kernel's bits through torch.ops, opcheck, autograd as the
transpose rotation, torch.compile(fullgraph=True) with the same bits as eager, and ropekit.Error from the fake
implementation inside a compiled graph. Skipped where PyTorch has no torch.library.custom_op (Debian's 1.13)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ops = pytest.importorskip("ropekit.ops", reason="PyTorch >= 2.4 needed for torch.library.custom_op")

import ropekit  # noqa: E402
from conftest import qk_tensors  # noqa: E402


@pytest.fixture(scope="module")
def rope():
    return ropekit.Rope.from_preset("llama-3.1-8b")


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "thd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("direction", ["forward", "inverse", "backward"])
def test_ops_give_the_kernels_bits(rope, layout, dtype, direction):
    h = ops.handle(rope)
    q, k = qk_tensors(layout, dtype)
    positions = torch.tensor([3, 1, 4, 1, 5] * 2 if layout == "thd" else [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
    for angles in ("accurate", "hf"):
        want_q, want_k = rope.apply(q, k, positions, layout=layout, inplace=False, direction=direction, angles=angles)
        got_q, got_k = torch.ops.ropekit.rotate(q, k, positions, h, layout, direction, angles)
        assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
        q2, k2 = q.clone(), k.clone()
        torch.ops.ropekit.rotate_(q2, k2, positions, h, layout, direction, angles)
        assert torch.equal(q2, want_q) and torch.equal(k2, want_k)
    (only_q,) = torch.ops.ropekit.rotate(q, None, None, h, layout, direction, "accurate")
    assert torch.equal(only_q, rope.apply(q, None, None, layout=layout, inplace=False, direction=direction))


def test_the_expected_operator_backend_is_loaded():
    """The test command builds the C++ operator library and says so (ROPEKIT_EXPECT_OPS=c++): a library that failed to
    build or load must fail here, not fall back to the Python registration unnoticed."""
    expect = os.environ.get("ROPEKIT_EXPECT_OPS")
    if not expect:
        pytest.skip("ROPEKIT_EXPECT_OPS not set")
    assert ops.BACKEND.startswith(expect), ops.BACKEND


def test_empty_and_strided_tensors(rope):
    h = ops.handle(rope)
    q, k = qk_tensors("bshd", torch.float32, seq=0)
    got_q, got_k = torch.ops.ropekit.rotate(q, k, torch.zeros((2, 0), dtype=torch.int64), h, "bshd", "forward",
                                            "accurate")
    assert got_q.shape == q.shape and got_k.shape == k.shape
    # A transposed view in (bhsd memory read as bshd) and a non-contiguous positions tensor.
    q, k = qk_tensors("bhsd", torch.bfloat16, seed=7)
    positions = torch.tensor([[3, 9], [1, 2], [4, 6], [1, 5], [5, 3]]).t()
    qv, kv = q.transpose(1, 2), k.transpose(1, 2)
    want = rope.apply(qv, kv, positions.contiguous(), layout="bshd", inplace=False)
    got = torch.ops.ropekit.rotate(qv, kv, positions, h, "bshd", "forward", "accurate")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[0].is_contiguous()


def test_opcheck(rope):
    h = ops.handle(rope)
    q, k = qk_tensors("bshd", torch.float32)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    torch.library.opcheck(torch.ops.ropekit.rotate.default, (q, k, positions, h, "bshd", "forward", "accurate"))
    torch.library.opcheck(torch.ops.ropekit.rotate.default, (q, None, None, h, "bhsd", "backward", "hf"))
    torch.library.opcheck(torch.ops.ropekit.rotate_.default, (q.clone(), k.clone(), positions, h, "bshd", "forward",
                                                              "accurate"))


def test_backward_is_the_transpose_rotation(rope):
    """<R q, g> = <q, Rᵀ g> for the forward rotation (magnitude included); autograd's gradient is Rᵀ g."""
    h = ops.handle(rope)
    q, k = qk_tensors("bshd", torch.float32, seed=3)
    positions = torch.tensor([[0, 100, 2000, 30000, 7], [1, 1, 1, 1, 1]])
    q.requires_grad_(True)
    k.requires_grad_(True)
    gq, gk = qk_tensors("bshd", torch.float32, seed=4)
    out_q, out_k = torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "accurate")
    ((out_q * gq).sum() + (out_k * gk).sum()).backward()
    want_q, want_k = rope.apply(gq, gk, positions, layout="bshd", inplace=False, direction="backward")
    assert torch.equal(q.grad, want_q) and torch.equal(k.grad, want_k)
    lhs = float((out_q.detach().double() * gq.double()).sum())
    rhs = float((q.detach().double() * q.grad.double()).sum())
    assert abs(lhs - rhs) <= 1e-5 * max(1.0, abs(lhs))


def test_compiled_graph_keeps_the_ops_and_the_bits(rope):
    h = ops.handle(rope)

    def attention_scores(q, k, positions):
        q, k = torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "accurate")
        return torch.einsum("bshd,bthd->bhst", q, k.repeat_interleave(2, dim=2))

    q, k = qk_tensors("bshd", torch.float32, seed=5)
    positions = torch.arange(5).expand(2, 5)
    eager = attention_scores(q, k, positions)
    explanation = torch._dynamo.explain(attention_scores)(q, k, positions)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(attention_scores, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, positions), eager)

    # Inductor (the default backend, C++ codegen on the CPU) around the op: the op's outputs bit for bit, and the
    # in-place op inside a compiled graph.
    def rotate_then_scale(q, k, positions):
        q2, k2 = torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "hf")
        torch.ops.ropekit.rotate_(q2, k2, positions, h, "bshd", "inverse", "hf")
        return q2 * 2, k2 + 1

    want = rotate_then_scale(q, k, positions)
    got = torch.compile(rotate_then_scale, fullgraph=True)(q, k, positions)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_bad_input_raises_from_the_fake_inside_a_compiled_graph(rope):
    h = ops.handle(rope)

    def f(q, k):
        return torch.ops.ropekit.rotate(q, k, None, h, "bshd", "forward", "accurate")

    q, k = qk_tensors("bshd", torch.float32, d=64)
    with pytest.raises(ropekit.Error, match="has head_dim 64"):
        f(q, k)
    with pytest.raises(Exception, match="has head_dim 64"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, k)
    with pytest.raises(ropekit.Error, match='layout = "nhd"'):
        torch.ops.ropekit.rotate(q, k, None, h, "nhd", "forward", "accurate")
    with pytest.raises(ropekit.Error, match="rope = 12345"):
        torch.ops.ropekit.rotate(q, k, None, 12345, "bshd", "forward", "accurate")


def bad_rotations(rope, q, k):
    h = ops.handle(rope)
    return [
        ((q.double(), k, None, h, "bshd", "forward", "accurate"), "q: dtype"),
        ((q, k.half(), None, h, "bshd", "forward", "accurate"), "k: dtype"),
        ((q, k, torch.zeros(2, 5), h, "bshd", "forward", "accurate"), "positions: dtype"),
        ((q, k, torch.zeros(2, 4, dtype=torch.int64), h, "bshd", "forward", "accurate"), "positions: shape"),
        ((q, k[:, :4], None, h, "bshd", "forward", "accurate"), "different tokens"),
        ((q, k, None, h, "bshd", "sideways", "accurate"), 'direction = "sideways"'),
        ((q, k, None, h, "bshd", "forward", "exact"), 'angles = "exact"'),
        ((q[..., :64], k, None, h, "bshd", "forward", "accurate"), "has head_dim 64"),
        ((q[0], k[0], None, h, "bshd", "forward", "accurate"), "dimensions"),
        ((q, k, None, -3, "bshd", "forward", "accurate"), "rope = -3"),
        ((q, k, None, h, "nhd", "forward", "accurate"), 'layout = "nhd"'),
    ]


def test_the_fakes_refuse_what_the_kernels_refuse_in_the_same_words(rope):
    """The operators' fakes run the real call's checks on shapes alone (python/src/torch_abi.cpp: check_rotation):
    on FakeTensors every class of bad input raises ropekit.Error with the message the eager call raises, and good
    input passes with the outputs' shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    q, k = qk_tensors("bshd", torch.float32)
    for args, match in bad_rotations(rope, q, k):
        for op in (torch.ops.ropekit.rotate, torch.ops.ropekit.rotate_):
            with pytest.raises(ropekit.Error) as eager:
                op(*args)
            with FakeTensorMode(allow_non_fake_inputs=False) as mode:
                fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
                with pytest.raises(ropekit.Error, match=match) as faked:
                    op(*fake)
            assert str(faked.value) == str(eager.value), (match, op)
    with FakeTensorMode() as mode:
        out = torch.ops.ropekit.rotate(mode.from_tensor(q), mode.from_tensor(k), None, ops.handle(rope), "bshd",
                                       "forward", "accurate")
        assert [o.shape for o in out] == [q.shape, k.shape]


def test_each_class_of_bad_input_is_a_ropekit_error_eagerly(rope):
    h = ops.handle(rope)
    q, k = qk_tensors("bshd", torch.float32)
    for args, match in bad_rotations(rope, q, k):
        for op in (torch.ops.ropekit.rotate, torch.ops.ropekit.rotate_):
            with pytest.raises(ropekit.Error, match=match):
                op(*args)
    # The inverse rotation has no transpose to differentiate through.
    q.requires_grad_(True)
    (out,) = torch.ops.ropekit.rotate(q, None, None, h, "bshd", "inverse", "accurate")
    with pytest.raises(ropekit.Error, match='direction = "inverse"'):
        out.sum().backward()


def test_rotate_with_an_engines_cache_is_vllms_rotary_embedding(rope):
    """vLLM's call shape: positions [tokens], query/key [tokens, heads · head_dim], cos_sin_cache float32
    [max_position, rotary_dim]. The cache's own coefficients are used (a perturbed cache gives other bits), the
    import is reused while the tensor is unchanged and redone after an in-place write."""
    h = ops.handle(rope)
    cache = torch.from_numpy(rope.export_cos_sin_cache(64))
    positions = torch.tensor([5, 0, 63, 7])
    g = torch.Generator().manual_seed(9)
    query, key = torch.randn(4, 32 * 128, generator=g), torch.randn(4, 8 * 128, generator=g)
    want_q, want_k = rope.apply(query.view(4, 32, 128), key.view(4, 8, 128), positions, layout="thd", inplace=False)
    q, k = query.clone(), key.clone()
    torch.ops.ropekit.rotate_with_cache_(positions, q, k, cache, h, "thd")
    assert torch.equal(q.view(4, 32, 128), want_q) and torch.equal(k.view(4, 8, 128), want_k)
    cache[7, 0] += 0.5  # an in-place write: the next call imports the changed cache
    q2 = query.clone()
    torch.ops.ropekit.rotate_with_cache_(positions, q2, None, cache, h, "thd")
    assert not torch.equal(q2, q) and torch.equal(q2[:3], q[:3])
    torch.library.opcheck(torch.ops.ropekit.rotate_with_cache_.default,
                          (positions, query.clone(), key.clone(), cache, h, "thd"))
    compiled = torch.compile(lambda p, a, b, c: torch.ops.ropekit.rotate_with_cache_(p, a, b, c, h, "thd"),
                             fullgraph=True, backend="aot_eager")
    q3, k3 = query.clone(), key.clone()
    compiled(positions, q3, k3, cache)
    q4, k4 = query.clone(), key.clone()
    torch.ops.ropekit.rotate_with_cache_(positions, q4, k4, cache, h, "thd")
    assert torch.equal(q3, q2) and torch.equal(q3, q4) and torch.equal(k3, k4)
    with pytest.raises(ropekit.Error, match="cos_sin_cache"):
        torch.ops.ropekit.rotate_with_cache_(positions, query.clone(), None, cache.double(), h, "thd")
    with pytest.raises(ropekit.Error, match="not a multiple of head_dim"):
        torch.ops.ropekit.rotate_with_cache_(positions, torch.randn(4, 100), None, cache, h, "thd")


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize("cache_layout", ["nhd", "hnd"])
def test_rotate_and_cache_is_rotate_then_convert_then_store(rope, cache_dtype, cache_layout):
    """The fused append against its definition: rotate (the operator's own bits), convert each stored element to the
    cache type (fp8: e4m3(x / scale), torch's round-to-nearest-even conversion), copy to the token's slot; every
    other cache entry untouched."""
    h = ops.handle(rope)
    g = torch.Generator().manual_seed(11)
    tokens, heads, kv_heads, d, pages, page_size = 7, 4, 2, 128, 5, 4
    query = torch.randn(tokens, heads, d, generator=g).to(torch.bfloat16)
    key = torch.randn(tokens, kv_heads, d, generator=g).to(torch.bfloat16)
    value = torch.randn(tokens, kv_heads, 64, generator=g).to(torch.bfloat16)
    positions = torch.tensor([5, 900, 3, 70000, 12, 12, 1])
    slots = torch.tensor([3, 17, -1, 0, 8, 19, 4], dtype=torch.int32)  # −1: padding, not cached
    k_scale, v_scale = (0.03, 0.02) if cache_dtype == torch.float8_e4m3fn else (1.0, 1.0)
    shape = (lambda dim: (pages, page_size, kv_heads, dim)) if cache_layout == "nhd" else \
        (lambda dim: (pages, kv_heads, page_size, dim))
    key_cache = torch.randn(shape(d), generator=g).to(cache_dtype)
    value_cache = torch.randn(shape(64), generator=g).to(cache_dtype)
    want_q, want_k = rope.apply(query, key, positions, layout="thd", inplace=False)
    want_kc, want_vc = key_cache.clone(), value_cache.clone()
    for t, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        page, entry = divmod(slot, page_size)
        kk = (want_k[t].float() / k_scale).to(cache_dtype)
        vv = (value[t].float() / v_scale).to(cache_dtype)
        if cache_layout == "nhd":
            want_kc[page, entry], want_vc[page, entry] = kk, vv
        else:
            want_kc[page, :, entry], want_vc[page, :, entry] = kk, vv
    q2, k2 = query.clone(), key.clone()
    torch.ops.ropekit.rotate_and_cache_(positions, q2, k2, value, slots, key_cache, value_cache, h, cache_layout,
                                        k_scale, v_scale, "accurate")
    assert torch.equal(q2, want_q) and torch.equal(k2, want_k)
    bits = (lambda t: t.view(torch.uint8)) if cache_dtype == torch.float8_e4m3fn else (lambda t: t)
    assert torch.equal(bits(key_cache), bits(want_kc)) and torch.equal(bits(value_cache), bits(want_vc))


def test_rotate_and_cache_flattened_compiled_and_bad_input(rope):
    h = ops.handle(rope)
    g = torch.Generator().manual_seed(12)
    query = torch.randn(3, 4 * 128, generator=g)  # vLLM's flattened [tokens, heads · head_dim]
    key = torch.randn(3, 2 * 128, generator=g)
    value = torch.randn(3, 2 * 128, generator=g)
    positions = torch.tensor([0, 1, 2])
    slots = torch.tensor([2, 0, 1])

    def step(query, key, value, key_cache, value_cache):
        torch.ops.ropekit.rotate_and_cache_(positions, query, key, value, slots, key_cache, value_cache, h, "nhd",
                                            1.0, 1.0, "hf")
        return query * 1, key_cache + 0

    caches = [torch.zeros(1, 4, 2, 128) for _ in range(2)]
    torch.library.opcheck(torch.ops.ropekit.rotate_and_cache_.default,
                          (positions, query.clone(), key.clone(), value, slots, caches[0].clone(), caches[1].clone(), h,
                           "nhd", 1.0, 1.0, "accurate"))
    eager = step(query.clone(), key.clone(), value, *[c.clone() for c in caches])
    compiled = torch.compile(step, fullgraph=True)(query.clone(), key.clone(), value, *[c.clone() for c in caches])
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])
    want_q, want_k = rope.apply(query.view(3, 4, 128), key.view(3, 2, 128), positions, layout="thd", inplace=False,
                                angles="hf")
    assert torch.equal(eager[0].view(3, 4, 128), want_q) and torch.equal(eager[1][0, 2], want_k[0])

    def call(**change):
        args = dict(positions=positions, query=query.clone(), key=key.clone(), value=value, slot_mapping=slots,
                    key_cache=caches[0].clone(), value_cache=caches[1].clone(), rope=h, cache_layout="nhd",
                    k_scale=1.0, v_scale=1.0, angles="accurate")
        args.update(change)
        torch.ops.ropekit.rotate_and_cache_(*args.values())

    with pytest.raises(ropekit.Error, match='cache_layout = "bnhd"'):
        call(cache_layout="bnhd")
    with pytest.raises(ropekit.Error, match="key_cache: dtype torch.float64"):
        call(key_cache=caches[0].double())
    with pytest.raises(ropekit.Error, match="slot"):
        call(slot_mapping=torch.tensor([2, 0, 4]))  # slot 4 of a 4-slot cache
    with pytest.raises(ropekit.Error, match="give both"):
        call(value=None)
    with pytest.raises(ropekit.Error, match="k_scale"):
        call(k_scale=0.5)  # a float32 cache stores values as they are: scale 1
    with pytest.raises(ropekit.Error, match="not a multiple of head_dim"):
        call(key=torch.randn(3, 200))


def test_attention_operator(rope):
    """torch.ops.ropekit.attention = ropekit.attention (the same call), GQA, with and without RoPE; opcheck; inside
    torch.compile(fullgraph) with the eager bits; bad shapes raise ropekit.Error from the fake too."""
    h = ops.handle(rope)
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 6, hh, 128, generator=g) for hh in (4, 2, 2))
    pos = torch.arange(6)[None]
    want = ropekit.attention(q, k, v, rope, pos, pos, layout="bshd", causal=True)
    got = torch.ops.ropekit.attention(q, k, v, pos, pos, h, "bshd", True, 0, None, "accurate")
    assert torch.equal(got, want) and got.dtype == torch.float32
    plain = torch.ops.ropekit.attention(q, k, v, None, None, 0, "bshd", True, 0, None, "accurate")
    assert torch.equal(plain, ropekit.attention(q, k, v, None, layout="bshd", causal=True))
    torch.library.opcheck(torch.ops.ropekit.attention.default, (q, k, v, pos, pos, h, "bshd", True, 3, 0.1, "hf"))
    f = torch.compile(lambda a, b, c: torch.ops.ropekit.attention(a, b, c, pos, pos, h, "bshd", True, 0, None,
                                                                  "accurate"), fullgraph=True)
    assert torch.equal(f(q, k, v), want)
    with pytest.raises(ropekit.Error, match="multiple of k's 4"):
        torch.ops.ropekit.attention(k, q, q, pos, pos, h, "bshd", True, 0, None, "accurate")
    with pytest.raises(Exception, match="multiple of k's 4"):
        torch.compile(lambda a, b: torch.ops.ropekit.attention(a, b, b, pos, pos, h, "bshd", True, 0, None,
                                                               "accurate"), fullgraph=True)(k, q)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_dropped_ropes_leave_the_handle_registry():
    """Issue 62: the registry held every Rope that ever got a handle, so a process making and dropping Ropes (a server
    loading models, a sweep over scalings) grew without bound. It holds them weakly now: 10^5 Ropes made, given a
    handle and dropped leave the registry and the process's memory flat; a freed Rope's handle is refused by name,
    never given to another Rope; a live Rope keeps its handle."""
    kept = ropekit.Rope.from_preset("llama-3.1-8b")
    h_kept = ops.handle(kept)

    def churn(n):
        for i in range(n):
            ops.handle(ropekit.Rope(head_dim=64, base=10000.0 + i))

    churn(10_000)  # warm: allocator pools, the registry's first sweeps
    rss = _rss_bytes()
    churn(100_000)
    grown = _rss_bytes() - rss
    # Held, 10^5 Ropes (plan, pair map, angle tables: kilobytes each) would take hundreds of MiB.
    assert grown < 16 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over 10^5 dropped Ropes"
    assert ropekit._ropekit._torch_registered() < 1000
    assert len(ops._ROPES) < 1000
    assert ops.handle(kept) == h_kept and ops.rope_of(h_kept) is kept

    dropped = ropekit.Rope(head_dim=32)
    h = ops.handle(dropped)
    del dropped
    with pytest.raises(ropekit.Error, match=f"rope = {h}: .*freed"):
        ops.rope_of(h)
    with pytest.raises(ropekit.Error, match=f"rope = {h}: .*freed"):
        torch.ops.ropekit.rotate(torch.zeros(1, 2, 1, 32), None, torch.zeros(1, 2, dtype=torch.int64), h, "bshd",
                                 "forward", "accurate")
    assert ops.handle(ropekit.Rope(head_dim=32)) > h  # a new Rope, a new handle
