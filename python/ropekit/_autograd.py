"""The rotation's backward, once for ropekit's two Python autograd paths (ropekit.torch.RotaryFunction where PyTorch
has no torch.library operators, and the Python registration of ropekit::rotate in ropekit.ops). The C++ operator
library registers the same rule in C++ (python/torch_ops/ops.cpp: a Python autograd kernel would cost the operator
its per-call advantage); test_ops.py checks both registrations' gradients against torch's own autograd.

The rule: the rotation R(θ)·m is orthogonal up to its magnitude m, so its transpose is the rotation by −θ with the
same magnitude — ropekit's direction "backward" (and "backward"'s transpose is "forward"). The inverse direction
(magnitude 1/m) has no ropekit transpose.
"""
from __future__ import annotations

from ._ropekit import Error

_TRANSPOSE = {"forward": "backward", "backward": "forward"}


def transposed(direction: str) -> str:
    """The direction whose rotation is `direction`'s transpose."""
    if direction not in _TRANSPOSE:
        raise Error(f'direction = "{direction}": the inverse rotation has no ropekit transpose; differentiate '
                    'direction "forward" or "backward"')
    return _TRANSPOSE[direction]


def dense_grads(torch, grads, q_like, k_like):
    """The output gradients as contiguous tensors: one autograd does not hand over (an unused output) is zero, an
    expanded (stride-0) or strided one is copied. q_like / k_like: (shape, dtype, device), k_like None without k."""
    out = []
    for i, like in enumerate((q_like, k_like)):
        grad = grads[i] if i < len(grads) else None  # without k, the operator has one output
        if like is None:
            out.append(None)
        elif grad is None:
            out.append(torch.zeros(like[0], dtype=like[1], device=like[2]))
        else:
            out.append(grad.contiguous())
    return out[0], out[1]
