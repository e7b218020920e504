"""Context-parallel attention measured (issue 64, item 4): per rank, the attention score entries computed (forward +
backward) and their balance across ranks, the bytes sent against each mode's theory, the K/V bytes a rank holds at
once, and the time of one forward + backward against one process doing the whole sequence on the same cores.

    build/torch-venv/bin/python -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 \\
        --master-port 29511 bench/distributed/cp_bench.py [SEQ=16384] [REPEATS=1]

Rank 0 prints a markdown table. Gloo on 127.0.0.1, one thread per rank; the one-process baseline runs afterwards on
rank 0 with as many threads as there are ranks (the same cores), while the others wait.
"""
import datetime
import os
import platform
import resource
import sys
import time

import torch
import torch.distributed as dist

import ropekit.distributed as cp

HEADS, KV_HEADS, HEAD_DIM, BATCH = 8, 2, 64, 1


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def step(lay, q, k, v, mode, grad):
    """One forward + backward of cp.attention; returns seconds."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    dist.barrier()
    t0 = time.perf_counter()
    out = cp.attention(lay, q, k, v, mode=mode)
    out.backward(grad)
    dist.barrier()
    return time.perf_counter() - t0


def kv_held(mode, world, local_kv_bytes):
    """K and V bytes (float32) a rank holds at once in the forward: its own and what it receives."""
    if mode == "allgather":
        return world * local_kv_bytes
    if mode == "ring":
        return 2 * local_kv_bytes  # this step's block and the next one's
    return world * local_kv_bytes  # Ulysses: the whole sequence for HEADS / world heads: W · local · (1 / W) · W


def theory_bytes(mode, world, q_bytes, kv_bytes, out_bytes):
    """Bytes one rank sends in forward + backward, as traffic counts them (kv_bytes: its K and V together)."""
    w = world
    if mode == "allgather":  # forward: all-gather K, V; backward: again, then all-reduce of the whole dK, dV
        return 2 * (w - 1) * kv_bytes + 2 * (w - 1) * (w * kv_bytes) // w
    if mode == "ring":  # forward: W−1 sends of K, V; backward: W−1 of K, V, dK, dV and a last one of dK, dV
        return (w - 1) * kv_bytes + (w - 1) * 2 * kv_bytes + kv_bytes
    # Ulysses: q, k, v to heads and the output back, forward; the same four the other way, backward
    return 2 * (w - 1) * (q_bytes + kv_bytes + out_bytes) // w


def main():
    seq = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=1800))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    q = torch.randn(BATCH, seq, HEADS, HEAD_DIM)
    k = torch.randn(BATCH, seq, KV_HEADS, HEAD_DIM)
    v = torch.randn(BATCH, seq, KV_HEADS, HEAD_DIM)
    grad = torch.randn(BATCH, seq, HEADS, HEAD_DIM)
    rows = []
    for sharding, mode in [("zigzag", "ring"), ("contiguous", "ring"), ("zigzag", "allgather"),
                           ("zigzag", "ulysses")]:
        lay = cp.layout(seq, sharding=sharding)
        ql, kl, vl, gl = cp.shard(lay, q, k, v, grad)
        times = []
        for _ in range(repeats):
            cp.reset_traffic()
            times.append(step(lay, ql, kl, vl, mode, gl))
        counts = torch.tensor([cp.traffic["score_entries"], cp.traffic["bytes_sent"]], dtype=torch.int64)
        every = [torch.zeros_like(counts) for _ in range(world)]
        dist.all_gather(every, counts)
        scores = [int(c[0]) for c in every]
        sent = [int(c[1]) for c in every]
        kv_bytes = kl.nbytes + vl.nbytes
        rows.append((sharding, mode, sorted(times)[len(times) // 2], scores, sent,
                     theory_bytes(mode, world, ql.nbytes, kv_bytes, gl.nbytes), kv_held(mode, world, kv_bytes)))
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    every_rss = [torch.zeros_like(rss) for _ in range(world)]
    dist.all_gather(every_rss, rss)
    baseline = None
    if rank == 0:  # one process, the whole sequence, the same cores
        torch.set_num_threads(world)
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        cp.reset_traffic()
        t0 = time.perf_counter()
        out = cp._local_attention(cp._whole(seq), qq, kk, vv, True, 0, HEAD_DIM ** -0.5)
        out.backward(grad)
        baseline = (time.perf_counter() - t0, cp.traffic["score_entries"])
    dist.barrier()
    if rank == 0:
        print(f"CPU: {cpu_name()} ({os.cpu_count()} CPUs); torch {torch.__version__}; {world} gloo ranks, one thread "
              f"each; seq {seq}, batch {BATCH}, {HEADS} heads over {KV_HEADS} kv heads, head_dim {HEAD_DIM}, float32, "
              f"causal; one forward + backward, median of {repeats}")
        print()
        print("| sharding | mode | s per step | vs one process | score entries per rank (M) | imbalance | "
              "MiB sent per rank | theory | K/V held per rank (MiB) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for sharding, mode, t, scores, sent, theory, held in rows:
            imbalance = max(scores) / (sum(scores) / len(scores)) - 1
            print(f"| {sharding} | {mode} | {t:.2f} | {baseline[0] / t:.2f}× | "
                  f"{' / '.join(f'{s / 1e6:.0f}' for s in scores)} | {100 * imbalance:.1f} % | "
                  f"{' / '.join(f'{b / 2**20:.1f}' for b in sent)} | {theory / 2**20:.1f} | {held / 2**20:.1f} |")
        print()
        print(f"One process, {world} threads: {baseline[0]:.2f} s, {baseline[1] / 1e6:.0f} M score entries; peak RSS "
              f"per rank {' / '.join(f'{int(r) / 1024:.0f}' for r in every_rss)} MiB")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
