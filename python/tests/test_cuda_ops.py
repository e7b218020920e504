"""CUDA tensors through ropekit's operators (torch.ops.ropekit.rotate / rotate_ → ropekit::cuda::DeviceRope): the
kernel is registered for the CUDA dispatch key everywhere; its argument errors are raised before any launch (checked
here on CPU-only machines with host stand-ins, which are never read); and where a GPU is present, the CPU operator's
bits, autograd, and positions the kernel cannot rotate raised by ropekit.ops.cuda_check()."""
import pytest

torch = pytest.importorskip("torch")
ops = pytest.importorskip("ropekit.ops", reason="PyTorch >= 2.4 needed for torch.library")

import ropekit  # noqa: E402
from conftest import qk_tensors  # noqa: E402
from ropekit import _ropekit  # noqa: E402

GPU = torch.cuda.is_available() and _ropekit._cuda_built()


@pytest.fixture(scope="module")
def rope():
    return ropekit.Rope.from_preset("llama-3.1-8b")


def test_the_cuda_kernel_is_registered():
    for op in ("ropekit::rotate", "ropekit::rotate_"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"), op


@pytest.mark.skipif(torch.cuda.is_available(), reason="host stand-ins would reach a real device here")
def test_argument_errors_come_before_any_launch(rope):
    """The extension's CUDA entry with host tensors standing in for device ones: every refusal below happens on the
    host before a DeviceRope is made or a kernel launched, so the stand-ins' memory is never read."""
    h = ops.handle(rope)
    q = torch.zeros(2, 3, 4, 128)
    k = torch.zeros(2, 3, 2, 128)
    per_token = torch.zeros(2, 3, dtype=torch.int64)

    def call(positions, q=q, k=k, layout="bshd", angles="accurate"):
        _ropekit._rotate_cuda(h, q, k, None, None, positions, layout, "forward", angles, 0, 0)

    with pytest.raises(ropekit.Error, match="positions: None; for CUDA tensors"):
        call(None)
    with pytest.raises(ropekit.Error, match=r"positions: shape \(3\) broadcasts over the batch of 2"):
        call(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ropekit.Error, match="positions"):
        call(torch.zeros(2, 4, dtype=torch.int64))  # 8 positions for 6 tokens
    with pytest.raises(ropekit.Error, match="dtype torch.float64"):
        call(per_token, q=q.double())
    with pytest.raises(ropekit.Error, match="head_dim"):
        call(per_token, k=torch.zeros(2, 3, 2, 64))
    with pytest.raises(ropekit.Error, match="angles"):
        call(per_token, angles="exact")
    # Shapes that pass: the device is what is refused (no device 0 here, or no CUDA backend in this build).
    with pytest.raises(ropekit.Error, match="CUDA|device"):
        call(per_token)


class _SaysCuda(torch.Tensor):
    """A CPU tensor whose is_cuda is True: Rope.apply's hand-over of CUDA tensors to the operators' device path
    (ropekit/_cuda.py), checked where no GPU is — the operators then dispatch on the tensor's real device, the CPU."""

    @property
    def is_cuda(self):
        return True


def _positions_forms(batch, seq):
    """The positions Rope.apply reads, each with the per-token array it means: None, a list, a [seq] broadcast, a
    [1, seq] broadcast, NumPy int32, a [batch, seq] tensor."""
    import numpy as np
    full = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 30000]])
    rows = torch.arange(seq).expand(batch, seq)
    return [(None, rows), ([7, 0, 2, 9, 4], torch.tensor([7, 0, 2, 9, 4]).expand(batch, seq)),
            (torch.tensor([5, 6, 7, 8, 9]), torch.tensor([5, 6, 7, 8, 9]).expand(batch, seq)),
            (torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([5, 6, 7, 8, 9]).expand(batch, seq)),
            (np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], dtype=np.int32), torch.arange(1, 11).view(batch, seq)),
            (full, full)]


def test_rope_apply_hands_cuda_tensors_to_the_operators(rope, monkeypatch):
    import ropekit._cuda as cuda_path
    calls = []
    real = cuda_path.apply
    monkeypatch.setattr(cuda_path, "apply", lambda *a: calls.append(a) or real(*a))
    q, k = qk_tensors("bshd", torch.float32)
    for positions, per_token in _positions_forms(2, 5):
        # What the operator is given: one position per token (its CUDA kernel takes no broadcast), of any int type.
        given = cuda_path._positions(torch, positions, 2, 5, 1, torch.device("cpu"))
        assert given.shape == (2, 5) and torch.equal(given.long(), per_token)
        want_q, want_k = rope.apply(q.clone(), k.clone(), per_token.contiguous())
        got_q, got_k = rope.apply(q.clone().as_subclass(_SaysCuda), k.clone().as_subclass(_SaysCuda), positions)
        assert torch.equal(got_q.as_subclass(torch.Tensor), want_q) and torch.equal(got_k.as_subclass(torch.Tensor),
                                                                                      want_k)
    assert len(calls) == 6
    # In place: the same tensors back; out of place: new ones, the inputs unchanged; one tensor given, one returned.
    qs, ks = q.clone().as_subclass(_SaysCuda), k.clone().as_subclass(_SaysCuda)
    got = rope.apply(qs, ks, None)
    assert got[0] is qs and got[1] is ks
    assert rope.apply(qs, None, None) is qs and rope.apply(None, ks, None) is ks
    qs = q.clone().as_subclass(_SaysCuda)
    new_q = rope.apply(qs, None, None, inplace=False, direction="inverse")
    assert torch.equal(qs.as_subclass(torch.Tensor), q)
    assert torch.equal(new_q.as_subclass(torch.Tensor), rope.apply(q.clone(), None, None, direction="inverse"))
    only_k = rope.apply(None, k.clone().as_subclass(_SaysCuda), None)
    assert torch.equal(only_k.as_subclass(torch.Tensor), rope.apply(None, k.clone(), None))
    # What Rope.apply refuses on the CPU it refuses here too, naming the argument.
    qs = q.clone().as_subclass(_SaysCuda)
    with pytest.raises(ropekit.Error, match='dtype = "bf16"'):
        rope.apply(qs, dtype="bf16")
    # A table is handed over too (its device copy needs a real device: what fails here is torch's stream lookup).
    table = rope.import_cos_sin_cache(rope.export_cos_sin_cache(16))
    with pytest.raises(Exception):
        rope.apply(qs, table=table)
    assert calls[-1][9] is table
    with pytest.raises(ropekit.Error, match="q requires grad"):
        rope.apply(q.clone().requires_grad_().as_subclass(_SaysCuda))
    with pytest.raises(ropekit.Error, match='layout = "shd"'):
        rope.apply(qs, layout="shd")
    with pytest.raises(ropekit.Error, match="positions"):
        rope.apply(qs, None, [1, 2, 3])  # 3 positions for 5 tokens a row


needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA device, or ropekit built without its CUDA backend")


@needs_gpu
def test_rope_apply_with_an_imported_table_on_cuda_tensors(rope):
    """Rope.apply(..., table=) on CUDA tensors: the table's device copy, the CPU's bits — in place and out of place,
    forward and inverse, q alone."""
    table = rope.import_cos_sin_cache(torch.as_tensor(rope.export_cos_sin_cache(64)) * (1 + 2 ** -10))
    q, k = qk_tensors("bshd", torch.bfloat16)
    positions = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 63]])
    for direction in ("forward", "inverse"):
        want_q, want_k = rope.apply(q.clone(), k.clone(), positions, table=table, direction=direction)
        got = rope.apply(q.cuda(), k.cuda(), positions.cuda(), table=table, direction=direction)
        assert torch.equal(got[0].cpu(), want_q) and torch.equal(got[1].cpu(), want_k)
        new_q = rope.apply(q.cuda(), None, positions.cuda(), table=table, direction=direction, inplace=False)
        assert torch.equal(new_q.cpu(), want_q)
    ops.cuda_check()


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_apply_rotates_cuda_tensors_like_the_cpu(rope, dtype):
    q, k = qk_tensors("bshd", dtype)
    for positions, per_token in _positions_forms(2, 5):
        want_q, want_k = rope.apply(q.clone(), k.clone(), per_token.contiguous())
        qd, kd = q.cuda(), k.cuda()
        on_device = positions.cuda() if isinstance(positions, torch.Tensor) else positions
        got_q, got_k = rope.apply(qd, kd, on_device)
        assert got_q is qd and got_k is kd
        assert torch.equal(got_q.cpu(), want_q) and torch.equal(got_k.cpu(), want_k)
        new_q, new_k = rope.apply(q.cuda(), k.cuda(), on_device, inplace=False)
        assert torch.equal(new_q.cpu(), want_q) and torch.equal(new_k.cpu(), want_k)
    ops.cuda_check()


@needs_gpu
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "thd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("direction", ["forward", "inverse", "backward"])
def test_cuda_tensors_give_the_cpu_operators_bits(rope, layout, dtype, direction):
    h = ops.handle(rope)
    q, k = qk_tensors(layout, dtype)
    positions = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3] if layout == "thd" else
                             [[3, 1, 4, 1, 5], [9, 2, 6, 5, 30000]])
    for angles in ("accurate", "hf"):
        for pos in (positions, positions.to(torch.int32)):
            want_q, want_k = torch.ops.ropekit.rotate(q, k, pos, h, layout, direction, angles)
            got_q, got_k = torch.ops.ropekit.rotate(q.cuda(), k.cuda(), pos.cuda(), h, layout, direction, angles)
            assert torch.equal(got_q.cpu(), want_q) and torch.equal(got_k.cpu(), want_k)
            q2, k2 = q.cuda(), k.cuda()
            torch.ops.ropekit.rotate_(q2, k2, pos.cuda(), h, layout, direction, angles)
            assert torch.equal(q2.cpu(), want_q) and torch.equal(k2.cpu(), want_k)
    ops.cuda_check()


@needs_gpu
def test_cuda_autograd_and_strided_inputs(rope):
    h = ops.handle(rope)
    q, k = qk_tensors("bshd", torch.float32)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    qc = q.cuda().requires_grad_()
    out = torch.ops.ropekit.rotate(qc, k.cuda(), positions.cuda(), h, "bshd", "forward", "accurate")
    (out[0] * 2).sum().backward()
    qh = q.clone().requires_grad_()
    want = torch.ops.ropekit.rotate(qh, k, positions, h, "bshd", "forward", "accurate")
    (want[0] * 2).sum().backward()
    assert torch.equal(qc.grad.cpu(), qh.grad)
    # bhsd memory read as bshd (a transposed view), on the device as on the CPU.
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    want_q, = torch.ops.ropekit.rotate(qt, None, positions, h, "bshd", "forward", "accurate")
    got_q, = torch.ops.ropekit.rotate(qt.cuda(), None, positions.cuda(), h, "bshd", "forward", "accurate")
    assert torch.equal(got_q.cpu(), want_q)


@needs_gpu
def test_cuda_errors(rope):
    h = ops.handle(rope)
    q, k = qk_tensors("bshd", torch.bfloat16)
    with pytest.raises(ropekit.Error, match="positions: on cpu"):
        torch.ops.ropekit.rotate(q.cuda(), k.cuda(), torch.zeros(2, 5, dtype=torch.int64), h, "bshd", "forward",
                                 "accurate")
    with pytest.raises(ropekit.Error, match="positions: None"):
        torch.ops.ropekit.rotate(q.cuda(), k.cuda(), None, h, "bshd", "forward", "accurate")
    # Position 2^47 on token 6 (batch 1, index 1): reported by cuda_check, its rows left unwritten, the rest rotated.
    positions = torch.tensor([[0, 1, 2, 3, 4], [5, 1 << 47, 7, 8, 9]]).cuda()
    qd = q.cuda()
    torch.ops.ropekit.rotate_(qd, None, positions, h, "bshd", "forward", "accurate")
    with pytest.raises(ropekit.Error, match="token 6"):
        ops.cuda_check()
    assert torch.equal(qd[1, 1].cpu(), q[1, 1])
    ops.cuda_check()  # cleared


@needs_gpu
def test_a_captured_cuda_graph_replays_with_new_positions(rope):
    """A decode step captured in a CUDA graph, as vLLM and SGLang run decode: rotate (new tensors from the graph's
    pool) and rotate_ (in place) captured once after a warm-up on a side stream (torch's recipe; the first call makes
    the device's copy of the angles, which allocates), then replayed after new values and positions are copied into
    the captured tensors — each replay the CPU operator's bits."""
    h = ops.handle(rope)
    q = torch.zeros(8, 1, 32, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.zeros(8, 1, 8, 128, dtype=torch.bfloat16, device="cuda")
    positions = torch.zeros(8, 1, dtype=torch.int64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "accurate")
        torch.ops.ropekit.rotate_(q, k, positions, h, "bshd", "forward", "accurate")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_q, out_k = torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "accurate")
        torch.ops.ropekit.rotate_(q, k, positions, h, "bshd", "forward", "accurate")
    gen = torch.Generator().manual_seed(7)
    for step in range(3):
        q_in = torch.randn(q.shape, generator=gen).to(torch.bfloat16)
        k_in = torch.randn(k.shape, generator=gen).to(torch.bfloat16)
        pos = torch.tensor([[17 + 1000 * b + 311 * step] for b in range(8)])
        q.copy_(q_in)
        k.copy_(k_in)
        positions.copy_(pos)
        graph.replay()
        want_q, want_k = torch.ops.ropekit.rotate(q_in, k_in, pos, h, "bshd", "forward", "accurate")
        assert torch.equal(out_q.cpu(), want_q) and torch.equal(out_k.cpu(), want_k)
        assert torch.equal(q.cpu(), want_q) and torch.equal(k.cpu(), want_k)
    ops.cuda_check()


class _OnCuda0(torch.Tensor):
    """A CPU tensor that says it is on cuda:0, for the extension's CUDA entries on machines without a GPU: what they
    check on the host comes before any DeviceRope or launch, so the stand-in's memory is never read."""

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        return torch.device("cuda", 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="host stand-ins would reach a real device here")
def test_rotate_and_cache_cuda_argument_errors_come_before_any_launch(rope):
    h = ops.handle(rope)
    cuda0 = lambda t: t.as_subclass(_OnCuda0)  # noqa: E731
    tokens, heads, kv_heads, d, pages, page_size = 6, 4, 2, 128, 4, 4
    base = dict(key_cache=cuda0(torch.zeros(pages, page_size, kv_heads, d, dtype=torch.bfloat16)),
                value_cache=cuda0(torch.zeros(pages, page_size, kv_heads, d, dtype=torch.bfloat16)),
                key=cuda0(torch.zeros(tokens, kv_heads, d, dtype=torch.bfloat16)),
                value=cuda0(torch.zeros(tokens, kv_heads, d, dtype=torch.bfloat16)),
                slot_mapping=cuda0(torch.arange(tokens)), query=cuda0(torch.zeros(tokens, heads, d,
                                                                                  dtype=torch.bfloat16)),
                positions=cuda0(torch.arange(tokens)), cache_layout="nhd", k_scale=1.0, v_scale=1.0,
                angles="accurate")

    def call(**change):
        args = dict(base)
        args.update(change)
        _ropekit._rotate_and_cache_cuda(h, *args.values(), 0, 0)

    with pytest.raises(ropekit.Error, match="positions is None: with CUDA tensors give one per token"):
        call(positions=None)
    with pytest.raises(ropekit.Error, match=r"positions: shape \(2, 4\) does not fit 6 tokens"):
        call(positions=cuda0(torch.zeros(2, 4, dtype=torch.int64)))
    with pytest.raises(ropekit.Error, match="slot_mapping: not contiguous"):
        call(slot_mapping=cuda0(torch.arange(2 * tokens)[::2]))
    with pytest.raises(ropekit.Error, match="positions: dtype torch.int16"):
        call(positions=cuda0(torch.zeros(tokens, dtype=torch.int16)))
    with pytest.raises(ropekit.Error, match=r"slot_mapping: not a tensor on cuda:0"):
        call(slot_mapping=torch.arange(tokens))
    with pytest.raises(ropekit.Error, match="key: a tensor on cpu; this call's tensors are on cuda:0"):
        call(key=torch.zeros(tokens, kv_heads, d, dtype=torch.bfloat16))
    with pytest.raises(ropekit.Error, match="key_cache: a tensor on cpu; this call's tensors are on cuda:0"):
        call(key_cache=torch.zeros(pages, page_size, kv_heads, d, dtype=torch.bfloat16))
    with pytest.raises(ropekit.Error, match="value_cache: f16 of"):
        call(value_cache=cuda0(torch.zeros(pages, page_size, kv_heads, d, dtype=torch.float16)))
    with pytest.raises(ropekit.Error, match="give both"):
        call(value=None)
    with pytest.raises(ropekit.Error, match="query"):
        call(query=cuda0(torch.zeros(tokens, heads, 64, dtype=torch.bfloat16)))
    with pytest.raises(ropekit.Error, match='cache_layout = "bnhd"'):
        call(cache_layout="bnhd")
    # Everything the host can check passes: what is refused now is the device (none here, or no CUDA backend).
    with pytest.raises(ropekit.Error, match="CUDA|device"):
        call()


@needs_gpu
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("cache_layout", ["nhd", "hnd"])
def test_rotate_and_cache_on_cuda_tensors_gives_the_cpu_operators_bits(rope, cache_dtype, cache_layout):
    """torch.ops.ropekit.rotate_and_cache_ on CUDA tensors (ropekit::cuda::append) against the same operator on CPU
    tensors: queries and keys rotated in place, the paged caches, byte for byte; a padding slot (−1) left unwritten;
    vLLM's flattened query and key; int32 slots."""
    h = ops.handle(rope)
    g = torch.Generator().manual_seed(21)
    tokens, heads, kv_heads, d, pages, page_size = 7, 4, 2, 128, 5, 4
    query = torch.randn(tokens, heads * d, generator=g).to(torch.bfloat16)
    key = torch.randn(tokens, kv_heads * d, generator=g).to(torch.bfloat16)
    value = torch.randn(tokens, kv_heads, 64, generator=g).to(torch.bfloat16)
    positions = torch.tensor([5, 900, 3, 70000, 12, 12, 1])
    slots = torch.tensor([3, 17, -1, 0, 8, 19, 4], dtype=torch.int32)
    k_scale, v_scale = (0.03, 0.02) if cache_dtype == torch.float8_e4m3fn else (1.0, 1.0)
    shape = (lambda dim: (pages, page_size, kv_heads, dim)) if cache_layout == "nhd" else \
        (lambda dim: (pages, kv_heads, page_size, dim))
    key_cache = torch.randn(shape(d), generator=g).to(cache_dtype)
    value_cache = torch.randn(shape(64), generator=g).to(cache_dtype)
    on_gpu = [t.cuda() for t in (positions, query, key, value, slots, key_cache, value_cache)]
    torch.ops.ropekit.rotate_and_cache_(positions, query, key, value, slots, key_cache, value_cache, h, cache_layout,
                                        k_scale, v_scale, "accurate")
    torch.ops.ropekit.rotate_and_cache_(*on_gpu, h, cache_layout, k_scale, v_scale, "accurate")
    ops.cuda_check()
    bits = (lambda t: t.view(torch.uint8)) if cache_dtype == torch.float8_e4m3fn else (lambda t: t)
    for want, got in zip((query, key, key_cache, value_cache), (on_gpu[1], on_gpu[2], on_gpu[5], on_gpu[6])):
        assert torch.equal(bits(got.cpu()), bits(want))


@needs_gpu
def test_apply_rotary_autograd_on_cuda_tensors(rope):
    """ropekit.torch.apply_rotary (RotaryFunction: Rope.apply forward, the Backward direction for the gradients) on
    CUDA tensors, through Rope.apply's device path: outputs and gradients the CPU's bits."""
    from ropekit.torch import apply_rotary
    q, k = qk_tensors("bshd", torch.float32)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    results = []
    for device in ("cpu", "cuda"):
        qd = q.to(device).requires_grad_()
        kd = k.to(device).requires_grad_()
        out_q, out_k = apply_rotary(rope, qd, kd, positions.to(device))
        ((out_q * 3).sum() + (out_k * out_k).sum()).backward()
        results.append([t.detach().cpu() for t in (out_q, out_k, qd.grad, kd.grad)])
    for want, got in zip(*results):
        assert torch.equal(got, want)
    ops.cuda_check()


@pytest.mark.skipif(torch.cuda.is_available(), reason="host stand-ins would reach a real device here")
def test_rotate_with_cache_cuda_argument_errors_come_before_any_launch(rope):
    """The extension's CUDA entry of rotate_with_cache_ with host stand-ins: its refusals come before a device copy
    of the table is made or anything launched."""
    h = ops.handle(rope)
    table = rope.import_cos_sin_cache(rope.export_cos_sin_cache(64))
    q = torch.zeros(5, 4, 128)
    pos = torch.arange(5)

    def call(q=q, positions=pos, table=table, layout="thd"):
        _ropekit._rotate_cuda_table(h, table, q, None, positions, layout, 0, 0)

    with pytest.raises(ropekit.Error, match="positions: None; for CUDA tensors"):
        call(positions=None)
    with pytest.raises(ropekit.Error, match="head_dim"):
        call(q=torch.zeros(5, 4, 64))
    with pytest.raises(ropekit.Error, match="positions"):
        call(positions=torch.arange(4))
    other = ropekit.Rope(64, base=10000.0, pairing="half")
    with pytest.raises(ropekit.Error, match="table: 32 pairs per row; this rope has 64"):
        call(table=other.import_cos_sin_cache(other.export_cos_sin_cache(8)))
    with pytest.raises(ropekit.Error, match="CUDA|device"):
        call()


@needs_gpu
def test_rotate_with_cache_on_cuda_tensors_gives_the_cpu_operators_bits(rope):
    """vLLM's rotary_embedding call shape on CUDA tensors: the engine's cos/sin cache on the device (imported once per
    version, uploaded once), query and key flattened, against the same operator on CPU tensors bit for bit; a position
    past the cache raised by cuda_check."""
    h = ops.handle(rope)
    g = torch.Generator().manual_seed(23)
    cache = torch.as_tensor(rope.export_cos_sin_cache(4096)) * (1 + 2 ** -10)  # the engine's values, not ropekit's
    positions = torch.tensor([0, 4095, 17, 17, 300, 2])
    query = torch.randn(6, 4 * 128, generator=g).to(torch.bfloat16)
    key = torch.randn(6, 2 * 128, generator=g).to(torch.bfloat16)
    q_gpu, k_gpu = query.cuda(), key.cuda()
    torch.ops.ropekit.rotate_with_cache_(positions, query, key, cache, h, "thd")
    torch.ops.ropekit.rotate_with_cache_(positions.cuda(), q_gpu, k_gpu, cache.cuda(), h, "thd")
    ops.cuda_check()
    assert torch.equal(q_gpu.cpu(), query) and torch.equal(k_gpu.cpu(), key)
    torch.ops.ropekit.rotate_with_cache_(torch.tensor([0, 4096, 1, 2, 3, 4]).cuda(), q_gpu, k_gpu, cache.cuda(), h,
                                         "thd")
    with pytest.raises(ropekit.Error, match="token 1"):
        ops.cuda_check()


@needs_gpu
def test_cos_sin_of_cuda_positions_are_the_cpus(rope):
    h = ops.handle(rope)
    positions = torch.tensor([[0, 5, 70000], [3, 3, 1]])
    for angles in ("accurate", "hf"):
        want = torch.ops.ropekit.cos_sin(positions, h, angles)
        got = torch.ops.ropekit.cos_sin(positions.cuda(), h, angles)
        assert all(g.is_cuda and torch.equal(g.cpu(), w) for g, w in zip(got, want))
