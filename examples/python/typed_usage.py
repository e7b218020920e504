#!/usr/bin/env python3
"""ropekit from a typed program: `mypy --strict` passes on this file (the test command checks it in its torch tier),
so the package's types — the compiled module's stubs (ropekit/_ropekit.pyi) and the annotated Python — are what a
user's checker sees.

  PYTHONPATH=build/release/python python3 examples/python/typed_usage.py
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

import ropekit
from ropekit.torch import RotaryEmbedding, apply_rotary


def rotate_queries(rope: ropekit.Rope, seq: int, heads: int) -> npt.NDArray[np.float32]:
    """A [1, seq, heads, head_dim] block of queries rotated in place at positions 0 … seq−1."""
    q = np.random.default_rng(0).standard_normal((1, seq, heads, rope.head_dim)).astype(np.float32)
    rope.apply(q)
    return q


def relative_logit(rope: ropekit.Rope, m: int, n: int) -> float:
    """⟨R(m)q, R(n)k⟩ for fixed q and k: depends on m − n alone."""
    d = rope.head_dim
    q = np.sin(0.1 * np.arange(d, dtype=np.float32)).reshape(1, 1, 1, d)
    k = np.cos(0.3 * np.arange(d, dtype=np.float32)).reshape(1, 1, 1, d)
    rope.apply(q, positions=np.array([[m]], dtype=np.int64))
    rope.apply(k, positions=np.array([[n]], dtype=np.int64))
    return float(np.dot(q.ravel().astype(np.float64), k.ravel().astype(np.float64)))


def rotate_with_autograd(rope: ropekit.Rope) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated by the fused kernel with autograd, and the gradient of q."""
    q = torch.randn(1, 8, 4, rope.head_dim, requires_grad=True)
    k = torch.randn(1, 8, 2, rope.head_dim)
    q_rot, k_rot = apply_rotary(rope, q, k, torch.arange(8).unsqueeze(0))
    (grad,) = torch.autograd.grad(q_rot.sum() + k_rot.sum(), [q])
    return q_rot, grad


def main() -> None:
    model: ropekit.ModelPositions = ropekit.ModelPositions.from_preset("llama-3.1-8b")
    rope: ropekit.Rope = model.layer()
    print(f"{model.model_type}: head_dim {rope.head_dim}, {rope.rope_type}")
    q = rotate_queries(rope, seq=16, heads=4)
    print(f"rotated {q.shape}, SIMD target {ropekit.simd_target()}")
    near, far = relative_logit(rope, 1007, 7), relative_logit(rope, 1_000_007, 999_007)
    print(f"logit at distance 1000: {near:.6f} near 0, {far:.6f} near 10^6")
    positions: npt.NDArray[np.int64] = ropekit.packed_positions([0, 3, 7])
    print(f"packed positions of two documents: {positions.tolist()}")
    q_rot, grad = rotate_with_autograd(rope)
    cos, sin = RotaryEmbedding(rope)(q_rot, torch.arange(8).unsqueeze(0))
    print(f"autograd: q {tuple(q_rot.shape)}, grad {tuple(grad.shape)}; HF-style cos/sin {tuple(cos.shape)}")
    if abs(near - far) > 1e-4 * abs(near):
        raise SystemExit("the logit moved with the absolute position")


if __name__ == "__main__":
    main()
