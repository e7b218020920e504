"""ropekit's kernels as PyTorch 2 custom operators (torch.library, namespace ``ropekit``).

    import ropekit, ropekit.ops
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    h = ropekit.ops.handle(rope)                                  # an int the ops take (a compile-time constant)
    q2, k2 = torch.ops.ropekit.rotate(q, k, positions, h, "bshd", "forward", "accurate")
    torch.ops.ropekit.rotate_(q, k, positions, h, "bshd", "forward", "accurate")   # in place

Operators (CPU tensors; float32 / bfloat16 / float16 storage, float32 arithmetic, one rounding — the C++ contract):

    ropekit::rotate(Tensor q, Tensor? k, Tensor? positions, int rope, str layout, str direction, str angles)
        -> Tensor[]                       out of place: [q'] or [q', k']; differentiable (the backward is the
                                          transpose rotation, direction "backward", exact to the same contract)
    ropekit::rotate_(Tensor(a!) q, Tensor(b!)? k, ...) -> ()     in place

Each has a fake (meta) implementation that checks what the real one checks and raises ropekit.Error with the same
field and value, so shapes flow through torch.compile without running the kernel and bad input fails inside a
compiled graph as it does eagerly. ``torch.compile(fullgraph=True)`` keeps them as single nodes (no graph break).

Debian's PyTorch 1.13 has no torch.library.custom_op: importing this module there raises ImportError saying so,
and ropekit.torch keeps working without the operators.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from ._ropekit import Error, Rope

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError(f"ropekit.ops needs PyTorch >= 2.4 (torch.library.custom_op); this is torch {torch.__version__}: "
                      "ropekit.torch.apply_rotary works without the operators")

__all__ = ["handle", "rope_of", "rotate", "rotate_", "LAYOUTS", "DIRECTIONS", "ANGLES"]

LAYOUTS = ("bshd", "bhsd", "thd")
DIRECTIONS = ("forward", "inverse", "backward")
ANGLES = ("accurate", "hf")
_TRANSPOSE = {"forward": "backward", "backward": "forward"}
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Ropes by handle. A Rope is immutable (ropekit/rope.hpp), so a handle always means the same numbers; handles stay
# valid for the life of the process (a model holds a handful).
_ROPES: dict = {}


def handle(rope: Rope) -> int:
    """The int the operators take for `rope` (registered once; the same Rope gives the same handle)."""
    if not isinstance(rope, Rope):
        raise Error(f"rope: expected a ropekit.Rope, got {type(rope).__name__}")
    key = id(rope)
    _ROPES.setdefault(key, rope)
    return key


def rope_of(h: int) -> Rope:
    try:
        return _ROPES[h]
    except KeyError:
        raise Error(f"rope = {h}: not a handle from ropekit.ops.handle") from None


def _check(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor], rope: int, layout: str,
           direction: str, angles: str) -> Rope:
    """What the kernel's binding checks first, for the fake implementation (and before the real call)."""
    r = rope_of(rope)
    if layout not in LAYOUTS:
        raise Error(f'layout = "{layout}": one of {", ".join(LAYOUTS)}')
    if direction not in DIRECTIONS:
        raise Error(f'direction = "{direction}": one of {", ".join(DIRECTIONS)}')
    if angles not in ANGLES:
        raise Error(f'angles = "{angles}": one of {", ".join(ANGLES)}')
    rank = 3 if layout == "thd" else 4
    head_dim = r.spec["head_dim"]
    for name, t in (("q", q), ("k", k)):
        if t is None:
            continue
        if t.dtype not in _DTYPES:
            raise Error(f"{name}: dtype {t.dtype} is not supported (torch.float32, torch.float16, torch.bfloat16)")
        if t.dim() != rank:
            raise Error(f"{name}: {t.dim()} dimensions: layout \"{layout}\" needs {rank}")
        if t.shape[-1] != head_dim:
            raise Error(f"{name}: head_dim = {t.shape[-1]}: the rope's spec has head_dim = {head_dim}")
    if k is not None and k.dtype != q.dtype:
        raise Error(f"k: dtype {k.dtype} differs from q's {q.dtype}")
    if positions is not None and positions.dtype not in (torch.int32, torch.int64):
        raise Error(f"positions: dtype {positions.dtype}: must be int32 or int64")
    return r


def _outputs(q: torch.Tensor, k: Optional[torch.Tensor]) -> List[torch.Tensor]:
    # Contiguous, as the real implementation allocates them.
    out = [torch.empty(q.shape, dtype=q.dtype, device=q.device)]
    if k is not None:
        out.append(torch.empty(k.shape, dtype=k.dtype, device=k.device))
    return out


@torch.library.custom_op("ropekit::rotate", mutates_args=(), device_types="cpu")
def rotate(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor], rope: int, layout: str,
           direction: str, angles: str) -> List[torch.Tensor]:
    r = _check(q, k, positions, rope, layout, direction, angles)
    out = _outputs(q, k)
    out[0].copy_(q)
    if k is not None:
        out[1].copy_(k)
    r.apply(out[0].detach(), out[1].detach() if k is not None else None,
            positions.detach() if positions is not None else None, layout=layout, inplace=True, direction=direction,
            angles=angles)
    return out


@rotate.register_fake
def _rotate_fake(q, k, positions, rope, layout, direction, angles):
    _check(q, k, positions, rope, layout, direction, angles)
    return _outputs(q, k)


def _rotate_setup(ctx, inputs, output):
    _, k, positions, rope, layout, direction, angles = inputs
    ctx.save_for_backward(positions)
    ctx.has_k = k is not None
    ctx.shapes = (inputs[0].shape, inputs[0].dtype, k.shape if k is not None else None)
    ctx.args = (rope, layout, direction, angles)


def _rotate_backward(ctx, grads):
    (positions,) = ctx.saved_tensors
    rope, layout, direction, angles = ctx.args
    if direction not in _TRANSPOSE:
        raise Error(f'direction = "{direction}": the inverse rotation has no ropekit transpose; differentiate '
                    'direction "forward" or "backward"')
    q_shape, dtype, k_shape = ctx.shapes
    # A gradient autograd does not hand over (an unused output) is zero; expanded (stride-0) ones are made dense.
    gq = grads[0] if grads[0] is not None else torch.zeros(q_shape, dtype=dtype)
    gk = None
    if ctx.has_k:
        gk = grads[1] if grads[1] is not None else torch.zeros(k_shape, dtype=dtype)
    out = rotate(gq.contiguous(), gk.contiguous() if gk is not None else None, positions, rope, layout,
                 _TRANSPOSE[direction], angles)
    return out[0], (out[1] if ctx.has_k else None), None, None, None, None, None


rotate.register_autograd(_rotate_backward, setup_context=_rotate_setup)


@torch.library.custom_op("ropekit::rotate_", mutates_args=("q", "k"), device_types="cpu")
def rotate_(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor], rope: int, layout: str,
            direction: str, angles: str) -> None:
    r = _check(q, k, positions, rope, layout, direction, angles)
    r.apply(q, k, positions, layout=layout, inplace=True, direction=direction, angles=angles)


@rotate_.register_fake
def _rotate_inplace_fake(q, k, positions, rope, layout, direction, angles):
    _check(q, k, positions, rope, layout, direction, angles)
