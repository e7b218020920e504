#!/usr/bin/env python3
"""The peers of bench/cuda_bench on the same GPU: Hugging Face's RoPE expression in PyTorch, eager and compiled.

  python3 bench/python/bench_cuda_torch.py [--json FILE]     (scripts/gpu-check.sh runs it where torch sees a GPU)

Same shapes as cuda_bench's prefill rows, in place there, out of place here (the expression makes new tensors):
q [batch, seq, 32, 128] and k [batch, seq, 8, 128], θ = 5e5, half pairing (rotate_half). Two forms:
  apply      HF's apply_rotary_pos_emb: q·cos + rotate_half(q)·sin for q and k, cos/sin [batch, seq, 128] given
             (the expression's best case: the rotary module's cost left out)
  with angles  the rotary module too: inv_freq ⊗ positions in float32, cat, cos/sin, cast — what a layer pays when
             nothing is cached
each eager and under torch.compile (Inductor's fused Triton kernel: the real peer). A device-to-device copy of q and
k (torch's clone) is timed in the same run. Each figure: the median of 9 timings (CUDA events) of a loop of at least
20 ms, as cuda_bench. µs per call; compare with cuda_bench's rows of the same name.
"""
import argparse
import json
import sys

import torch


def timed(fn):
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 1
    while True:
        start.record()
        for _ in range(n):
            fn()
        stop.record()
        stop.synchronize()
        if start.elapsed_time(stop) >= 20.0 or n >= 1 << 20:
            break
        n *= 2
    us = []
    for _ in range(9):
        start.record()
        for _ in range(n):
            fn()
        stop.record()
        stop.synchronize()
        us.append(start.elapsed_time(stop) * 1e3 / n)
    return sorted(us)[len(us) // 2]


def write_json(path, rows):
    """The rows, with the GPU's name and torch's version, to `path` (nothing when it is empty)."""
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply(q, k, cos, sin):
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # [b, s, 1, d]: bshd
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def angles(inv_freq, positions, dtype):
    freqs = positions[..., None].float() * inv_freq  # [b, s, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def with_angles(q, k, inv_freq, positions):
    cos, sin = angles(inv_freq, positions, q.dtype)
    return apply(q, k, cos, sin)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    a = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_cuda_torch: no CUDA device")
        return 0
    dev = torch.device("cuda")
    # One compiled function per shape: Dynamo would otherwise stop recompiling after 8 and run later shapes eagerly.
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, device=dev, dtype=torch.float32) / 128))
    rows = []
    # fp16 moves the bytes bf16 does: left out to keep the device run short.
    for dtype in (torch.bfloat16, torch.float32):
        for batch, seq in ((2, 8192), (1, 512), (1, 65536)):
            q = torch.randn(batch, seq, 32, 128, device=dev, dtype=dtype)
            k = torch.randn(batch, seq, 8, 128, device=dev, dtype=dtype)
            positions = torch.arange(seq, device=dev).expand(batch, seq).contiguous()
            cos, sin = angles(inv_freq, positions, dtype)
            apply_c, with_c = torch.compile(apply, dynamic=False), torch.compile(with_angles, dynamic=False)
            row = {"name": f"prefill {batch}x{seq} {str(dtype).split('.')[1]} half",
                   "copy_us": timed(lambda: (q.clone(), k.clone()))}
            row["apply_eager_us"] = timed(lambda: apply(q, k, cos, sin))
            row["apply_compiled_us"] = timed(lambda: apply_c(q, k, cos, sin))
            row["angles_eager_us"] = timed(lambda: with_angles(q, k, inv_freq, positions))
            row["angles_compiled_us"] = timed(lambda: with_c(q, k, inv_freq, positions))
            rows.append(row)
            print(f"{row['name']:<34} copy {row['copy_us']:9.2f} µs  apply eager {row['apply_eager_us']:9.2f}  "
                  f"compiled {row['apply_compiled_us']:9.2f}  with angles eager {row['angles_eager_us']:9.2f}  "
                  f"compiled {row['angles_compiled_us']:9.2f}", flush=True)
            del q, k, positions, cos, sin
    for batch in (1, 16, 64, 256):
        q = torch.randn(batch, 1, 32, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, 1, 8, 128, device=dev, dtype=torch.bfloat16)
        positions = torch.full((batch, 1), 4095, device=dev)
        cos, sin = angles(inv_freq, positions, q.dtype)
        apply_c = torch.compile(apply, dynamic=False)
        row = {"name": f"decode batch {batch} bf16 half", "apply_eager_us": timed(lambda: apply(q, k, cos, sin)),
               "apply_compiled_us": timed(lambda: apply_c(q, k, cos, sin))}
        rows.append(row)
        print(f"{row['name']:<34} apply eager {row['apply_eager_us']:9.2f} µs  compiled {row['apply_compiled_us']:9.2f}",
              flush=True)
    write_json(a.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
