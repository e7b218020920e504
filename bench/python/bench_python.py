#!/usr/bin/env python3
"""The Python binding's cost, measured against the same C++ call in the same run.

  PYTHONPATH=build/release/python /usr/bin/python3 bench/python/bench_python.py [--threads N] [--repeats R]

1. Decode (1 token, 32 q + 8 k heads × 128, fp32, in place): µs per Rope.apply call from Python (NumPy
   and torch) minus µs per call of the identical call prepared and run in a C++ loop (_time_apply) —
   the binding's overhead. Target (issue 15): ≤ 3 µs.
2. Prefill (512 tokens, 32/8 heads × 128, fp32 and bf16, in place): GB/s (bytes read + written) from
   Python vs the C++ loop, and the in-place stream ceiling (NumPy multiply by 1 in place, same bytes).
   Target: Python within 10% of C++.
3. Side by side with PyTorch's Hugging Face expression (q·cos + rotate_half(q)·sin for q and k, cos/sin
   precomputed — the expression's best case; and with HF's rotary_emb forward included), same tensors and
   torch.set_num_threads(threads). Target: ≥ 10× for fp32 prefill.
Each figure is the median of `repeats` timings of a loop long enough to take ~50 ms.
"""
import argparse
import platform
import statistics
import subprocess
import time

import numpy as np
import torch

import ropekit
from ropekit import _ropekit


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except Exception:
        return platform.processor()


def per_call(fn, repeats, min_time=0.05):
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt >= min_time:
            break
        n *= 4
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n)
    return statistics.median(samples), n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    print(f"CPU: {cpu_model()}; SIMD target {ropekit.simd_target()}; threads {a.threads}; torch {torch.__version__}\n")

    # 1. Decode overhead.
    pos = np.array([1000])
    q = np.zeros((1, 1, 32, 128), np.float32)
    k = np.zeros((1, 1, 8, 128), np.float32)
    qt, kt, post = torch.from_numpy(q.copy()), torch.from_numpy(k.copy()), torch.from_numpy(pos)
    cpp_samples = [_ropekit._time_apply(rope, q, k, pos, "bshd", 200000, a.threads) * 1e-9 for _ in range(a.repeats)]
    cpp = statistics.median(cpp_samples)
    py_np, _ = per_call(lambda: rope.apply(q, k, pos, threads=a.threads), a.repeats)
    py_t, _ = per_call(lambda: rope.apply(qt, kt, post, threads=a.threads), a.repeats)
    print("| decode, 1 token × (32 + 8) heads × 128, fp32 | µs per call | overhead over C++ |")
    print("|---|---|---|")
    print(f"| C++ prepare + run (loop in C++) | {cpp * 1e6:.2f} | — |")
    print(f"| Python, NumPy arrays | {py_np * 1e6:.2f} | {(py_np - cpp) * 1e6:.2f} µs |")
    print(f"| Python, torch tensors | {py_t * 1e6:.2f} | {(py_t - cpp) * 1e6:.2f} µs |\n")

    # 2. Prefill throughput, 3. against torch.
    print("| prefill 512 × (32 + 8) × 128, in place | C++ GB/s | Python GB/s | Python / C++ | stream GB/s | Python / stream | "
          "torch HF expr (cos/sin given) GB/s | ropekit in place × | ropekit out of place × | torch HF incl. rotary_emb × |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        rng = np.random.default_rng(0)
        qt = torch.from_numpy(rng.standard_normal((1, 512, 32, 128)).astype(np.float32)).to(dtype)
        kt = torch.from_numpy(rng.standard_normal((1, 512, 8, 128)).astype(np.float32)).to(dtype)
        p = torch.arange(512)
        nbytes = 2 * (qt.numel() + kt.numel()) * qt.element_size()
        cpp = statistics.median(_ropekit._time_apply(rope, qt, kt, p, "bshd", 200, a.threads) * 1e-9 for _ in range(a.repeats))
        py, _ = per_call(lambda: rope.apply(qt, kt, p, threads=a.threads), a.repeats)
        # The in-place stream ceiling: an integer xor in place over the same bytes (NumPy's float16
        # arithmetic is emulated, so a float op would not be a memory ceiling).
        flat = np.zeros(qt.numel() + kt.numel(), np.uint32 if dtype == torch.float32 else np.uint16)
        stream, _ = per_call(lambda: np.bitwise_xor(flat, 0, out=flat), a.repeats)
        # Out of place (a new tensor per call, as the torch expression allocates).
        oop, _ = per_call(lambda: rope.apply(qt, kt, p, inplace=False, threads=a.threads), a.repeats)
        # HF's expression on [b, h, s, d] views (as modeling_llama.py runs it), cos/sin in the dtype.
        emb = ropekit.torch.RotaryEmbedding(rope, angles="hf")
        qh, kh = qt.transpose(1, 2), kt.transpose(1, 2)
        cos, sin = emb(qh, p[None])
        hf, _ = per_call(lambda: ropekit.torch.apply_rotary_pos_emb(qh, kh, cos, sin), a.repeats)
        hf_full, _ = per_call(lambda: ropekit.torch.apply_rotary_pos_emb(qh, kh, *emb(qh, p[None])), a.repeats)
        name = "fp32" if dtype == torch.float32 else "bf16"
        print(f"| {name} | {nbytes / cpp / 1e9:.1f} | {nbytes / py / 1e9:.1f} | {cpp / py:.3f} | {nbytes / stream / 1e9:.1f} | "
              f"{stream / py:.2f} | {nbytes / hf / 1e9:.2f} | {hf / py:.1f} | {hf / oop:.1f} | {hf_full / py:.1f} |")


if __name__ == "__main__":
    import ropekit.torch  # noqa: F401
    main()
