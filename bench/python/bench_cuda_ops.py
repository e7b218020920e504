#!/usr/bin/env python3
"""ropekit's Python entry points on a GPU: what a call costs from Python, against the same work replayed from a CUDA
graph (an engine's decode path, where no Python runs per call) and against torch.compile's fused expression.

  PYTHONPATH=<a build's python folder> python3 bench/python/bench_cuda_ops.py [--json FILE]
  (scripts/gpu-check.sh runs it after building the module against the machine's torch)

Shapes as bench/cuda_bench's: 32 q + 8 k heads × 128, bf16, θ = 5e5, half pairing. Rows, µs per call (the median of 9
timings by CUDA events of a loop of at least 20 ms, as cuda_bench):
  rotate_ eager        torch.ops.ropekit.rotate_ called from Python (dispatch, checks, launch)
  rotate_ graph        the same call captured once in a CUDA graph and replayed
  Rope.apply           Rope.apply on CUDA tensors (its hand-over to the operators included)
  rotate_and_cache_    the fused rotate-and-append into a bf16 NHD paged cache (pages of 16), eager and replayed
  compiled expression  Hugging Face's q·cos + rotate_half(q)·sin under torch.compile, cos/sin given (new tensors)
for decode (1 token per sequence, batch 1, 64, 256, position 4095) and prefill (2 × 8192).
"""
import argparse

import torch

# The same timing (CUDA events, medians of 9 loops of >= 20 ms) and expression as the PyTorch peers' benchmark.
from bench_cuda_torch import apply as expression, timed, write_json


def graphed(fn):
    """fn captured in a CUDA graph after a warm-up on a side stream (torch's recipe); returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    a = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_cuda_ops: no CUDA device")
        return 0
    import ropekit
    from ropekit import ops
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    dev = torch.device("cuda")
    rope = ropekit.Rope(128, base=500000.0, pairing="half")
    h = ops.handle(rope)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, ropekit {ropekit.__version__}")
    rows = []
    for batch, seq, position in ((1, 1, 4095), (64, 1, 4095), (256, 1, 4095), (2, 8192, 0)):
        q = torch.randn(batch, seq, 32, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, seq, 8, 128, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch * seq, 8, 128, device=dev, dtype=torch.bfloat16)
        positions = (position + torch.arange(seq, device=dev)).expand(batch, seq).contiguous()
        pages = (batch * seq + 15) // 16
        key_cache = torch.zeros(pages, 16, 8, 128, device=dev, dtype=torch.bfloat16)
        value_cache = torch.zeros_like(key_cache)
        slots = torch.arange(batch * seq, device=dev)
        flat = positions.reshape(-1)
        qt, kt = q.view(batch * seq, 32, 128), k.view(batch * seq, 8, 128)
        cos, sin = rope.cos_sin(positions.cpu().numpy(), layout="hf")
        cos = torch.as_tensor(cos, device=dev).to(torch.bfloat16)
        sin = torch.as_tensor(sin, device=dev).to(torch.bfloat16)
        compiled = torch.compile(expression, dynamic=False)

        def rotate_():
            torch.ops.ropekit.rotate_(q, k, positions, h, "bshd", "forward", "accurate")

        def append_():
            torch.ops.ropekit.rotate_and_cache_(flat, qt, kt, v, slots, key_cache, value_cache, h, "nhd", 1.0, 1.0,
                                                "accurate")

        name = f"decode batch {batch}" if seq == 1 else f"prefill {batch}x{seq}"
        row = {"name": f"{name} bf16 half",
               "rotate_eager_us": timed(rotate_),
               "rotate_graph_us": timed(graphed(rotate_)),
               "rope_apply_us": timed(lambda: rope.apply(q, k, positions)),
               "append_eager_us": timed(append_),
               "append_graph_us": timed(graphed(append_)),
               "compiled_expression_us": timed(lambda: compiled(q, k, cos, sin))}
        ops.cuda_check()
        rows.append(row)
        print(f"{row['name']:<24} rotate_ eager {row['rotate_eager_us']:8.2f} µs  graph {row['rotate_graph_us']:8.2f}"
              f"  Rope.apply {row['rope_apply_us']:8.2f}  rotate_and_cache_ eager {row['append_eager_us']:8.2f}"
              f"  graph {row['append_graph_us']:8.2f}  compiled expression {row['compiled_expression_us']:8.2f}",
              flush=True)
    write_json(a.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
