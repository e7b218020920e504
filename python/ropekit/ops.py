"""ropekit's kernels as PyTorch 2 custom operators (torch.library, namespace ``ropekit``).

    import ropekit, ropekit.ops
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    h = ropekit.ops.handle(rope)                                  # an int the ops take (a compile-time constant)
    q2, k2 = torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "accurate")
    torch.ops.ropekit.rotate_(q, k, positions, h, "bshd", "forward", "accurate")   # in place

Operators (CPU tensors, and CUDA tensors for rotate / rotate_ where ropekit was built with its CUDA backend — see
"CUDA tensors" below; float32 / bfloat16 / float16 storage, float32 arithmetic, one rounding — the C++ contract):

    ropekit::rotate(Tensor q, Tensor? k, Tensor? positions, int rope, str layout, str direction, str angles)
        -> Tensor[]                       out of place: [q'] or [q', k']; differentiable (the backward is the
                                          transpose rotation, direction "backward", exact to the same contract)
    ropekit::rotate_(Tensor(a!) q, Tensor(b!)? k, ...) -> ()     in place
    ropekit::rotate_with_cache_(Tensor positions, Tensor(a!) query, Tensor(b!)? key, Tensor cos_sin_cache, int rope,
        str layout) -> ()                 vLLM's rotary_embedding call shape: an engine's own float32 cos/sin cache
    ropekit::rotate_and_cache_(Tensor positions, Tensor(a!)? query, Tensor(b!) key, Tensor? value, Tensor slot_mapping,
        Tensor(c!) key_cache, Tensor(d!)? value_cache, int rope, str cache_layout, float k_scale, float v_scale,
        str angles) -> ()                the fused rotate-and-append into a paged KV cache (vLLM's rotary_embedding
                                          + reshape_and_cache; fp8 e4m3 caches with a scale)
    ropekit::attention(Tensor q, Tensor k, Tensor v, Tensor? q_positions, Tensor? k_positions, int rope, str layout,
        bool causal, int window, float? softmax_scale, str angles) -> Tensor     attention with RoPE fused (forward)

Each has a fake (meta) implementation that checks what the real one checks and raises ropekit.Error with the same
field and value, so shapes flow through torch.compile without running the kernel and bad input fails inside a
compiled graph as it does eagerly. The rotations' fakes (rotate, rotate_, and the rotation inside the others) run the
real call's checks by the same C++ functions on the shapes alone (python/src/torch_abi.cpp: check_rotation, up to a
prepared call that never runs); the position values, unknown there, are the real call's to check. ``torch.compile(fullgraph=True)`` keeps them as single nodes (no graph break).

Debian's PyTorch 1.13 has no torch.library.custom_op: importing this module there raises ImportError saying so,
and ropekit.torch keeps working without the operators.
"""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import List, Optional

import torch

from . import _ropekit
from ._autograd import dense_grads, transposed
from ._ropekit import Error, Rope

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError(f"ropekit.ops needs PyTorch >= 2.4 (torch.library.custom_op); this is torch {torch.__version__}: "
                      "ropekit.torch.apply_rotary works without the operators")

__all__ = ["handle", "rope_of", "rotate", "rotate_", "cuda_check", "rotate_with_cache_", "rotate_and_cache_", "cos_sin", "attention", "LAYOUTS", "DIRECTIONS",
           "ANGLES", "BACKEND"]

LAYOUTS = ("bshd", "bhsd", "thd")
DIRECTIONS = ("forward", "inverse", "backward")
ANGLES = ("accurate", "hf")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _load_cpp_operators():
    """rotate and rotate_ registered in C++ (python/torch_ops/ops.cpp): (True, why) when the library is here, was
    built against this very PyTorch and binds to this extension; else (False, why) and the Python registration below
    gives the same operators (the same bits, slower per call). ROPEKIT_TORCH_OPS=python forces the latter."""
    if os.environ.get("ROPEKIT_TORCH_OPS", "") == "python":
        return False, "python (ROPEKIT_TORCH_OPS=python)"
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "_torch_ops.txt")) as f:
            built_for = f.read().strip()
    except OSError:
        return False, ("python (this ropekit was built without PyTorch; pip install --no-build-isolation in this "
                       "environment builds the C++ operators)")
    if built_for != torch.__version__:
        return False, f"python (the C++ operators were built for torch {built_for}; this is torch {torch.__version__})"
    path = os.path.join(here, "_torch_ops.so")
    torch.ops.load_library(path)
    rc = ctypes.CDLL(path).ropekit_torch_bind(ctypes.c_void_p(_ropekit._torch_abi()))
    if rc != 0:  # the library registered its operators already: they cannot be defined again from Python
        raise ImportError(f"{path}: built for the extension ABI {rc}, this extension has "
                          f"{_ropekit._TORCH_ABI_VERSION}: rebuild ropekit")
    return True, f"c++ ({os.path.basename(path)}, torch {built_for})"


_CPP, BACKEND = _load_cpp_operators()

# Ropes by handle (python/src/torch_abi.cpp keeps the registry the C++ operators read). Both hold the Rope weakly:
# whoever took the handle keeps the Rope (ropekit.torch's modules hold theirs), and a dropped Rope's entries go with
# it, so a process making and dropping Ropes stays flat. A handle is never reused for another Rope.
_ROPES: dict = {}   # handle → (weak reference to the Rope, head_dim)
_SHAPES: dict = {}  # handle → (rotary_dim, position streams)


def _forget(key: int) -> None:
    _ROPES.pop(key, None)
    _SHAPES.pop(key, None)


def handle(rope: Rope) -> int:
    """The int the operators take for `rope` (the same Rope gives the same handle while it lives; keep the Rope
    while its handle is used: a handle of a freed Rope raises ropekit.Error)."""
    if not isinstance(rope, Rope):
        raise Error(f"rope: expected a ropekit.Rope, got {type(rope).__name__}")
    key = _ropekit._torch_handle(rope)
    if key not in _ROPES:
        spec = rope.spec  # Rope.spec builds a dict: read once, not per call
        _ROPES[key] = (weakref.ref(rope), spec["head_dim"])
        streams = 3 if spec["mrope_section"] is not None else len(spec["axial_sections"] or [None])
        _SHAPES[key] = (spec["rotary_dim"], streams)
        weakref.finalize(rope, _forget, key)
    return key


def _entry(h: int):
    try:
        ref, head_dim = _ROPES[h]
    except KeyError:
        raise Error(f"rope = {h}: not a handle from ropekit.ops.handle, or its Rope was freed") from None
    r = ref()
    if r is None:
        raise Error(f"rope = {h}: its Rope was freed (keep the Rope while its handle is used)")
    return r, head_dim


def rope_of(h: int) -> Rope:
    return _entry(h)[0]


def _check(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor], rope: int, layout: str,
           direction: str, angles: str, inplace: bool = False) -> Rope:
    """What the kernel's call checks before it touches memory, by the same C++ functions (python/src/torch_abi.cpp:
    check_rotation) on the tensors' shapes alone: the fakes' checks, and the Python registration's before it runs."""
    r, _ = _entry(rope)
    for name, t in (("q", q), ("k", k), ("positions", positions)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise Error(f"{name}: a {type(t).__name__}; the operators take tensors")
    _ropekit._torch_check_rotation(q, k, positions, rope, layout, direction, angles, inplace)
    return r


def _outputs(q: torch.Tensor, k: Optional[torch.Tensor]) -> List[torch.Tensor]:
    # Contiguous, as the real implementation allocates them.
    out = [torch.empty(q.shape, dtype=q.dtype, device=q.device)]
    if k is not None:
        out.append(torch.empty(k.shape, dtype=k.dtype, device=k.device))
    return out


# Defined with torch.library.Library, not torch.library.custom_op: the same schema, fake and autograd registrations,
# but the call goes straight to the CPU kernel below — custom_op's Python wrapper cost about 17 µs per call here
# (docs/performance.md), more than the decode step's rotation itself.
_lib = torch.library.Library("ropekit", "FRAGMENT")
if not _CPP:
    _lib.define("rotate(Tensor q, Tensor? k, Tensor? positions, int rope, str layout, str direction, str angles) "
                "-> Tensor[]")
    _lib.define("rotate_(Tensor(a!) q, Tensor(b!)? k, Tensor? positions, int rope, str layout, str direction, "
                "str angles) -> ()")


# The CPU kernels through the extension's ABI path (python/src/torch_abi.cpp: rotate_with), the one the C++ operator
# library calls: the same checks, words and bits as that registration, in one call from here.
def _rotate_cpu(q, k, positions, rope, layout, direction, angles):
    out = _outputs(q, k)
    pos = positions.detach().contiguous() if positions is not None else None
    _ropekit._rotate_torch(rope, q.detach(), k.detach() if k is not None else None, out[0],
                           out[1] if k is not None else None, pos, layout, direction, angles)
    return out


def _rotate_inplace_cpu(q, k, positions, rope, layout, direction, angles):
    pos = positions.contiguous() if positions is not None else None
    _ropekit._rotate_torch(rope, q, k, None, None, pos, layout, direction, angles)


if not _CPP:
    _lib.impl("rotate", _rotate_cpu, "CPU")
    _lib.impl("rotate_", _rotate_inplace_cpu, "CPU")


def _rotate_fake(q, k, positions, rope, layout, direction, angles):
    _check(q, k, positions, rope, layout, direction, angles)
    return _outputs(q, k)


def _rotate_inplace_fake(q, k, positions, rope, layout, direction, angles):
    _check(q, k, positions, rope, layout, direction, angles, inplace=True)


torch.library.register_fake("ropekit::rotate", _rotate_fake, lib=_lib)
torch.library.register_fake("ropekit::rotate_", _rotate_inplace_fake, lib=_lib)


# ---- CUDA tensors: ropekit::cuda::DeviceRope on torch's current stream -------------------------------------------
#
# Registered here for both the C++ and the Python operators (the C++ library links no CUDA part of PyTorch). Every
# tensor of a call is on one CUDA device; positions are required, one per token ([batch, seq], or [seq] for one
# sequence; M-RoPE's streams first) — a broadcast or None would be a device copy the caller makes. The rotation is
# launched asynchronously on torch.cuda.current_stream(); its bits are the CPU's (ropekit/cuda.hpp). A position the
# kernel cannot rotate (outside [0, 2^47), or past the device table of "hf" angles: 32768 positions) leaves its
# token's rows unwritten and is raised by the next ropekit.ops.cuda_check().
def _cuda_place(q, k, positions):
    for name, t in (("k", k), ("positions", positions)):
        if t is not None and t.device != q.device:
            raise Error(f"{name}: on {t.device}; q is on {q.device}: every tensor of a call is on one device")
    return q.device.index, torch.cuda.current_stream(q.device).cuda_stream


def _rotate_cuda(q, k, positions, rope, layout, direction, angles):
    _check(q, k, positions, rope, layout, direction, angles)
    device, stream = _cuda_place(q, k, positions)
    out = _outputs(q, k)
    pos = positions.detach().contiguous() if positions is not None else None
    _ropekit._rotate_cuda(rope, q.detach(), k.detach() if k is not None else None, out[0],
                          out[1] if k is not None else None, pos, layout, direction, angles, device, stream)
    return out


def _rotate_inplace_cuda(q, k, positions, rope, layout, direction, angles):
    _check(q, k, positions, rope, layout, direction, angles, inplace=True)
    device, stream = _cuda_place(q, k, positions)
    pos = positions.contiguous() if positions is not None else None
    _ropekit._rotate_cuda(rope, q, k, None, None, pos, layout, direction, angles, device, stream)


_lib.impl("rotate", _rotate_cuda, "CUDA")
_lib.impl("rotate_", _rotate_inplace_cuda, "CUDA")


def cuda_check(device=None) -> None:
    """Waits for the current stream of `device` (default: the current CUDA device) and raises ropekit.Error naming
    the first token whose position a CUDA rotation there could not rotate since the last check."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    _ropekit._cuda_check(index, torch.cuda.current_stream(index).cuda_stream)

rotate = torch.ops.ropekit.rotate
rotate_ = torch.ops.ropekit.rotate_


def _rotate_setup(ctx, inputs, output):
    q, k, positions, rope, layout, direction, angles = inputs
    ctx.save_for_backward(positions)
    ctx.like = ((q.shape, q.dtype, q.device), (k.shape, k.dtype, k.device) if k is not None else None)
    ctx.args = (rope, layout, direction, angles)


def _rotate_backward(ctx, grads):
    (positions,) = ctx.saved_tensors
    rope, layout, direction, angles = ctx.args
    gq, gk = dense_grads(torch, grads, *ctx.like)
    out = rotate(gq, gk, positions, rope, layout, transposed(direction), angles)
    return out[0], (out[1] if gk is not None else None), None, None, None, None, None


if not _CPP:  # the C++ library registers its own autograd kernel (the same transpose rotation)
    torch.library.register_autograd("ropekit::rotate", _rotate_backward, setup_context=_rotate_setup, lib=_lib)


# ---- An engine's cos/sin cache: vLLM's rotary_embedding, as an operator ---------------------------------------------
#
#   torch.ops.ropekit.rotate_with_cache_(positions, query, key, cos_sin_cache, rope, layout)
#
# Rotates query and key in place with the coefficients of `cos_sin_cache` (vLLM's / FlashInfer's float32
# [max_position, rotary_dim] layout: the cos half then the sin half of each row), value for value — what
# Rope.import_cos_sin_cache + Rope.apply(..., table=) do, the cache imported once per (storage, shape, version) and
# reused while the tensor is unchanged (its in-place version counter moves on any write). query and key may be
# [tokens, heads, head_dim] ("thd"), vLLM's flattened [tokens, heads · head_dim], or any layout Rope.apply takes.
_lib.define("rotate_with_cache_(Tensor positions, Tensor(a!) query, Tensor(b!)? key, Tensor cos_sin_cache, "
            "int rope, str layout) -> ()")
_TABLES: dict = {}
_MAX_TABLES = 8


def _table(r: Rope, rope: int, cache: torch.Tensor):
    key = (rope, cache.data_ptr(), tuple(cache.shape), cache._version)
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) >= _MAX_TABLES:
            _TABLES.pop(next(iter(_TABLES)))
        # A CUDA cache is read once per version through the host (a copy that waits for the device): the table is
        # checked there (every value finite) and uploaded to the device once, as the CPU imports it once.
        table = r.import_cos_sin_cache(cache.detach().cpu() if cache.is_cuda else cache.detach())
        _TABLES[key] = table
    return table


def _check_cache(positions, query, key, cache, rope, layout):
    r, head_dim = _entry(rope)
    if cache.dtype != torch.float32 or cache.dim() != 2:
        raise Error(f"cos_sin_cache: {cache.dim()} dimensions of {cache.dtype}: must be float32 "
                    "[max_position, rotary_dim]")
    if positions.dtype not in (torch.int32, torch.int64):
        raise Error(f"positions: dtype {positions.dtype}: must be int32 or int64")
    views = []
    for name, t in (("query", query), ("key", key)):
        if t is not None and layout == "thd" and t.dim() == 2:
            if t.shape[-1] % head_dim != 0:
                raise Error(f"{name}: {t.shape[-1]} lanes per token: not a multiple of head_dim = {head_dim}")
            t = t.view(t.shape[0], -1, head_dim)  # vLLM's flattened heads
        views.append(t)
    _check(views[0], views[1], positions, rope, layout, "forward", "accurate")
    return r, views


def _rotate_with_cache_cpu(positions, query, key, cache, rope, layout):
    r, (q, k) = _check_cache(positions, query, key, cache, rope, layout)
    r.apply(q, k, positions, layout=layout, inplace=True, table=_table(r, rope, cache))


def _rotate_with_cache_fake(positions, query, key, cache, rope, layout):
    _check_cache(positions, query, key, cache, rope, layout)


_lib.impl("rotate_with_cache_", _rotate_with_cache_cpu, "CPU")


def _rotate_with_cache_cuda(positions, query, key, cache, rope, layout):
    """CUDA tensors: DeviceRope::rotate with the angles of exactly the cache (ropekit::cuda::DeviceRope(rope, device,
    table)) on torch's current stream; positions one per token on the device, every one inside the cache (a position
    past it is raised by cuda_check)."""
    r, (q, k) = _check_cache(positions, query, key, cache, rope, layout)
    device, stream = _cuda_place(q, k, positions)
    if cache.device != q.device:
        raise Error(f"cos_sin_cache: on {cache.device}; query is on {q.device}: every tensor of a call is on one "
                    "device")
    _ropekit._rotate_cuda_table(rope, _table(r, rope, cache), q, k, positions.contiguous(), layout, device, stream)


_lib.impl("rotate_with_cache_", _rotate_with_cache_cuda, "CUDA")
torch.library.register_fake("ropekit::rotate_with_cache_", _rotate_with_cache_fake, lib=_lib)
rotate_with_cache_ = torch.ops.ropekit.rotate_with_cache_


# ---- The fused rotate-and-append into a paged KV cache, as an operator ------------------------------------------------
#
#   torch.ops.ropekit.rotate_and_cache_(positions, query, key, value, slot_mapping, key_cache, value_cache, rope,
#                                       cache_layout, k_scale, v_scale, angles)
#
# What an engine runs for each batch of new tokens (vLLM's rotary_embedding + reshape_and_cache in one pass;
# ropekit/append.hpp): query ([tokens, heads, head_dim], or vLLM's flattened [tokens, heads · head_dim]; may be None)
# and key ([tokens, kv_heads, head_dim], or flattened) rotated in place, and the rotated key and the value written to
# the cache slots of slot_mapping (int32/int64, −1: not cached) in key_cache / value_cache — [pages, page_size,
# kv_heads, dim] for cache_layout "nhd", [pages, kv_heads, page_size, dim] for "hnd" — of float32, bfloat16, float16
# or float8_e4m3fn (stored = e4m3(x / scale), k_scale and v_scale; 1 for the other types). value and value_cache may
# both be None (a keys-only cache). The bits of rotate_, then a conversion to the cache type, then a copy.
_lib.define("rotate_and_cache_(Tensor positions, Tensor(a!)? query, Tensor(b!) key, Tensor? value, "
            "Tensor slot_mapping, Tensor(c!) key_cache, Tensor(d!)? value_cache, int rope, str cache_layout, "
            "float k_scale, float v_scale, str angles) -> ()")


def _unflatten(t: Optional[torch.Tensor], name: str, head_dim: int) -> Optional[torch.Tensor]:
    if t is None or t.dim() != 2:
        return t
    if t.shape[-1] % head_dim != 0:
        raise Error(f"{name}: {t.shape[-1]} lanes per token: not a multiple of head_dim = {head_dim}")
    return t.view(t.shape[0], -1, head_dim)  # vLLM's flattened heads


_CACHE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def _rotate_and_cache_check(positions, query, key, value, slot_mapping, key_cache, value_cache, rope, cache_layout,
                            k_scale, v_scale, angles):
    """What the binding checks first (shapes and types), for the fake implementation and before the real call."""
    r, head_dim = _entry(rope)
    if cache_layout not in ("nhd", "hnd"):
        raise Error(f'cache_layout = "{cache_layout}": "nhd" ([pages, page_size, kv_heads, dim]) or "hnd" '
                    "([pages, kv_heads, page_size, dim])")
    if angles not in ANGLES:
        raise Error(f'angles = "{angles}": one of {", ".join(ANGLES)}')
    query, key = _unflatten(query, "query", head_dim), _unflatten(key, "key", head_dim)
    if (value is None) != (value_cache is None):
        raise Error("value and value_cache: give both (keys and values) or neither (a keys-only cache, MLA)")
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if t is None:
            continue
        if t.dtype not in _CACHE_DTYPES:
            raise Error(f"{name}: dtype {t.dtype} is not a cache type (float32, bfloat16, float16, float8_e4m3fn)")
        if t.dim() != 4:
            raise Error(f"{name}: {t.dim()} dimensions; a paged cache is [pages, page_size, kv_heads, dim] or "
                        "[pages, kv_heads, page_size, dim]")
    if value is not None and value.dim() == 2:
        value = value.view(value.shape[0], key.shape[1], -1)
    _check(query if query is not None else key, key, None, rope, "thd", "forward", angles)
    if key.dim() != 3:
        raise Error(f"key: {key.dim()} dimensions; [tokens, kv_heads, head_dim] (or flattened) expected")
    for name, t in (("positions", positions), ("slot_mapping", slot_mapping)):
        if t.dtype not in (torch.int32, torch.int64):
            raise Error(f"{name}: dtype {t.dtype}: must be int32 or int64")
    return r, query, key, value


def _rotate_and_cache_cpu(positions, query, key, value, slot_mapping, key_cache, value_cache, rope, cache_layout,
                          k_scale, v_scale, angles):
    r, query, key, value = _rotate_and_cache_check(positions, query, key, value, slot_mapping, key_cache, value_cache,
                                                   rope, cache_layout, k_scale, v_scale, angles)
    from . import rotate_and_cache
    rotate_and_cache(r, key_cache, value_cache, key, value, slot_mapping, query=query, positions=positions,
                     cache_layout=cache_layout, k_scale=k_scale, v_scale=v_scale, angles=angles)


def _rotate_and_cache_fake(*args):
    _rotate_and_cache_check(*args)


_lib.impl("rotate_and_cache_", _rotate_and_cache_cpu, "CPU")


def _rotate_and_cache_cuda(positions, query, key, value, slot_mapping, key_cache, value_cache, rope, cache_layout,
                           k_scale, v_scale, angles):
    """CUDA tensors: ropekit::cuda::append on torch's current stream (the CPU's bits; an out-of-range position or
    slot is raised by the next cuda_check). positions and slot_mapping: one per token, on the device."""
    _, query, key, value = _rotate_and_cache_check(positions, query, key, value, slot_mapping, key_cache, value_cache,
                                                   rope, cache_layout, k_scale, v_scale, angles)
    device, stream = _cuda_place(key, None, positions)
    _ropekit._rotate_and_cache_cuda(rope, key_cache, value_cache, key, value, slot_mapping.contiguous(), query,
                                    positions.contiguous(), cache_layout, k_scale, v_scale, angles, device, stream)


_lib.impl("rotate_and_cache_", _rotate_and_cache_cuda, "CUDA")
torch.library.register_fake("ropekit::rotate_and_cache_", _rotate_and_cache_fake, lib=_lib)
rotate_and_cache_ = torch.ops.ropekit.rotate_and_cache_


# ---- cos/sin at positions, as an operator ---------------------------------------------------------------------------
#
#   torch.ops.ropekit.cos_sin(positions, rope, angles) -> (cos, sin)
#
# Rope.cos_sin(positions, layout="hf", angles=...) as float32 tensors of shape positions.shape + [rotary_dim]
# (M-RoPE / axial: the leading streams axis consumed), magnitude included: what a rotary module returns. An operator so
# that ropekit.torch.RotaryEmbedding(angles="accurate") and a model patched with it compile without a graph break.
_lib.define("cos_sin(Tensor positions, int rope, str angles) -> (Tensor, Tensor)")


def _cos_sin_shape(positions, rope, angles):
    r, _ = _entry(rope)
    if angles not in ANGLES:
        raise Error(f'angles = "{angles}": one of {", ".join(ANGLES)}')
    if positions.dtype not in (torch.int32, torch.int64):
        raise Error(f"positions: dtype {positions.dtype}: must be int32 or int64")
    rotary_dim, axes = _SHAPES[rope]
    shape = tuple(positions.shape)
    if axes > 1:
        if not shape or shape[0] != axes:
            raise Error(f"positions: shape {shape}; the spec needs {axes} position streams first")
        shape = shape[1:]
    return r, shape + (rotary_dim,)


def _cos_sin_cpu(positions, rope, angles):
    r, _ = _cos_sin_shape(positions, rope, angles)
    cos, sin = r.cos_sin(positions.detach(), layout="hf", angles=angles)
    return torch.from_numpy(cos), torch.from_numpy(sin)


def _cos_sin_fake(positions, rope, angles):
    _, shape = _cos_sin_shape(positions, rope, angles)
    return (torch.empty(shape, dtype=torch.float32, device=positions.device),
            torch.empty(shape, dtype=torch.float32, device=positions.device))


_lib.impl("cos_sin", _cos_sin_cpu, "CPU")


def _cos_sin_cuda(positions, rope, angles):
    """CUDA positions: the CPU's values, computed on the host — the positions copied there (which waits for the
    device) and the results copied back. No device kernel: ropekit.torch.RotaryEmbedding makes the same copy, as
    Hugging Face's module reads its positions once per forward."""
    cos, sin = _cos_sin_cpu(positions.cpu(), rope, angles)
    return cos.to(positions.device), sin.to(positions.device)


_lib.impl("cos_sin", _cos_sin_cuda, "CUDA")
torch.library.register_fake("ropekit::cos_sin", _cos_sin_fake, lib=_lib)
cos_sin = torch.ops.ropekit.cos_sin


# ---- Attention with RoPE fused into its tile loads, as an operator --------------------------------------------------
#
#   torch.ops.ropekit.attention(q, k, v, q_positions, k_positions, rope, layout, causal, window, softmax_scale,
#                               angles) -> Tensor
#
# ropekit.attention (float32 output of q's shape with v's head width; GQA when q's heads are a multiple of k's);
# rope = 0 for attention without RoPE. Forward only: no autograd kernel (ropekit's attention has no backward).
_lib.define("attention(Tensor q, Tensor k, Tensor v, Tensor? q_positions, Tensor? k_positions, int rope, str layout, "
            "bool causal, int window, float? softmax_scale, str angles) -> Tensor")


def _attention_check(q, k, v, q_positions, k_positions, rope, layout, causal, window, softmax_scale, angles):
    # Each of q and k as a rotation checks it (their sequence lengths may differ: a query block against its keys).
    r = _check(q, None, q_positions, rope, layout, "forward", angles, inplace=True) if rope else None
    if rope:
        _check(k, None, k_positions, rope, layout, "forward", angles, inplace=True)
    if rope == 0:
        if layout not in LAYOUTS:
            raise Error(f'layout = "{layout}": one of {", ".join(LAYOUTS)}')
        if q.shape[-1] != k.shape[-1]:
            raise Error(f"k: head_dim = {k.shape[-1]}: q has {q.shape[-1]}")
    rank = 3 if layout == "thd" else 4
    if v.dim() != rank or v.dtype != k.dtype:
        raise Error(f"v: {v.dim()} dimensions of {v.dtype}: layout \"{layout}\" needs {rank}, k's dtype {k.dtype}")
    heads = 1 if layout == "bhsd" else rank - 2
    if k.shape[heads] == 0 or q.shape[heads] % k.shape[heads] != 0:
        raise Error(f"q: {q.shape[heads]} heads: must be a multiple of k's {k.shape[heads]} (GQA)")
    if v.shape[:-1] != k.shape[:-1]:
        raise Error(f"v: shape {tuple(v.shape)}: must match k's {tuple(k.shape)} but for its head width")
    if window < 0:
        raise Error(f"window = {window}: must be >= 0 (0 = none)")
    return r


def _attention_cpu(q, k, v, q_positions, k_positions, rope, layout, causal, window, softmax_scale, angles):
    r = _attention_check(q, k, v, q_positions, k_positions, rope, layout, causal, window, softmax_scale, angles)
    from . import attention as _attention
    return _attention(q, k, v, r, q_positions, k_positions, layout=layout, causal=causal, window=window,
                      softmax_scale=softmax_scale, angles=angles)


def _attention_fake(q, k, v, q_positions, k_positions, rope, layout, causal, window, softmax_scale, angles):
    _attention_check(q, k, v, q_positions, k_positions, rope, layout, causal, window, softmax_scale, angles)
    return torch.empty((*q.shape[:-1], v.shape[-1]), dtype=torch.float32, device=q.device)


_lib.impl("attention", _attention_cpu, "CPU")
torch.library.register_fake("ropekit::attention", _attention_fake, lib=_lib)
attention = torch.ops.ropekit.attention
