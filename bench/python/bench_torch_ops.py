#!/usr/bin/env python3
"""ropekit's torch.library operator against Hugging Face's RoPE expression, eager and under torch.compile.

  build/torch-venv/bin/python bench/python/bench_torch_ops.py [--threads N] [--repeats R]
  (scripts/test-torch.sh makes build/torch-venv with the wheel installed)

Peers, same tensors, torch.set_num_threads(threads):
  hf eager     HF's apply_rotary_pos_emb: q·cos + rotate_half(q)·sin for q and k, cos/sin precomputed
               (the expression's best case: the rotary module's own cost left out)
  hf compiled  the same function under torch.compile (Inductor's fused C++ kernel on the CPU: the real peer)
  ropekit op   torch.ops.ropekit.rotate (out of place, like the expression: new q, k), eager and inside a
               compiled function
Shapes: prefill 512 tokens × (32 q + 8 k) heads × 128 lanes in [batch, seq, heads, dim] (fp32 and bf16), decode
1 token of the same heads. Reported: µs per call (median of `repeats` timings of a loop of ~50 ms), the ratio of
each peer to the op, and the op's per-call overhead = (op eager − the same C++ call prepared once and run in a loop),
out of place and in place; "added in graph" = op in a compiled function − a compiled function of one fused
elementwise kernel over q and k (the floor of any compiled call) − the op eager. "ATen 2-output op" is
aten._foreach_neg on [q, k] called the same way: what any PyTorch operator returning two new tensors costs. The operator backend
(ropekit.ops.BACKEND: the C++ library or the Python registration) is printed first.
Targets (issue 40): prefill ≥ 2× the compiled expression and ≥ 5× eager; overhead ≤ 3 µs eager, ≈ 0 added inside a
compiled graph.
"""
import argparse
import os
import sys

import torch

import ropekit
import ropekit.torch
import ropekit.ops
from ropekit import _ropekit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_python import per_call  # noqa: E402  (the same timing loop as the binding's benchmark)


def timed(fn, repeats):
    """µs per call: bench_python.per_call's median of `repeats` loops of at least 50 ms."""
    fn()
    return per_call(fn, repeats)[0] * 1e6


def cpu_model():
    """The CPU's identity as issue 42 asks every table to carry: vendor model name, family and model."""
    fields = {}
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return f"{fields.get('model name')} (family {fields.get('cpu family')} model {fields.get('model')})"


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply(q, k, cos, sin):
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # [batch, seq, 1, dim] for [batch, seq, heads, dim]
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ropekit.set_default_threads(args.threads)
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    h = ropekit.ops.handle(rope)
    print(f"# {cpu_model()}, torch {torch.__version__}, ropekit {ropekit.__version__} ({ropekit.simd_target()}), "
          f"threads {args.threads}, operators: {ropekit.ops.BACKEND}")
    print("| case | hf eager µs | hf compiled µs | ropekit op µs | op in place µs | op in compiled fn µs | "
          "compiled floor µs | ATen 2-output op µs | C++ loop µs | eager / op | compiled / op | overhead µs | in place overhead µs | "
          "added in graph µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def op(q, k, pos):
        return torch.ops.ropekit.rotate(q, k, pos, h, "bshd", "forward", "hf")

    def op_inplace(q, k, pos):
        torch.ops.ropekit.rotate_(q, k, pos, h, "bshd", "forward", "hf")

    def floor(q, k, pos):  # a compiled function with one fused elementwise kernel writing new q, k
        return q * 2, k * 2

    for name, seq in (("prefill 512", 512), ("decode 1", 1)):
        for dtype in (torch.float32, torch.bfloat16):
            # Compiled afresh per case: one cache entry each, as a model's graph has (dynamo caches per code
            # object, and the failing guards of other cases' entries would add to every call).
            torch._dynamo.reset()
            hf_compiled = torch.compile(hf_apply, fullgraph=True, dynamic=False)
            op_compiled = torch.compile(op, fullgraph=True, dynamic=False)
            floor_compiled = torch.compile(floor, fullgraph=True, dynamic=False)
            g = torch.Generator().manual_seed(0)
            q = torch.randn(1, seq, 32, 128, generator=g).to(dtype)
            k = torch.randn(1, seq, 8, 128, generator=g).to(dtype)
            pos = torch.arange(4096 - seq, 4096)[None] if seq == 1 else torch.arange(seq)[None]
            cos, sin = (t.to(dtype) for t in ropekit.torch.RotaryEmbedding(rope, angles="hf")(q, pos))
            t_eager = timed(lambda: hf_apply(q, k, cos, sin), args.repeats)
            t_comp = timed(lambda: hf_compiled(q, k, cos, sin), args.repeats)
            t_op = timed(lambda: op(q, k, pos), args.repeats)
            qi, ki = q.clone(), k.clone()  # rotated over and over: the same work, other values
            t_inplace = timed(lambda: op_inplace(qi, ki, pos), args.repeats)
            t_opc = timed(lambda: op_compiled(q, k, pos), args.repeats)
            t_floor = timed(lambda: floor_compiled(q, k, pos), args.repeats)
            # PyTorch's own floor for an operator returning two new tensors from Python: an ATen op, the same
            # sizes, next to nothing to compute.
            t_aten = timed(lambda: torch.ops.aten._foreach_neg.default([q, k]), args.repeats)
            # The C++ loop: the same rotation prepared once, in place (the op copies q, k first: out of place).
            qc, kc = q.clone(), k.clone()
            t_cpp = _ropekit._time_apply(rope, qc, kc, pos, "bshd", 2000 if seq == 1 else 50, args.threads) / 1e3
            dt = "fp32" if dtype == torch.float32 else "bf16"
            print(f"| {name} {dt} | {t_eager:.1f} | {t_comp:.1f} | {t_op:.1f} | {t_inplace:.1f} | {t_opc:.1f} | "
                  f"{t_floor:.1f} | {t_aten:.1f} | {t_cpp:.2f} | {t_eager / t_op:.2f} | {t_comp / t_op:.2f} | {t_op - t_cpp:.1f} | "
                  f"{t_inplace - t_cpp:.1f} | {t_opc - t_floor - t_op:.1f} |")

if __name__ == "__main__":
    main()
