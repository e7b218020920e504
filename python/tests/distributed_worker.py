"""One rank of test_distributed.py, run under torchrun on 127.0.0.1: every sharding × attention mode × (one sequence,
packed documents) × (full, sliding window) on a tiny attention layer with RoPE, against the same layer run in one
process on the whole sequence (every rank computes that reference itself, from the same seed). Writes
OUT/rank{r}.json: per case the worst relative differences of the unsharded output and of every gradient, and the
mutations' differences; and the errors bad arguments raise.

    python -m torch.distributed.run --nproc-per-node N --master-addr 127.0.0.1 --master-port P \\
        distributed_worker.py OUT
"""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import ropekit
import ropekit.distributed as cp
from ropekit.torch import apply_rotary

DIM, HEADS, KV_HEADS, HEAD_DIM = 32, 12, 2, 8  # 12 heads: Ulysses splits them over 2, 3 or 4 ranks


def rel(got, want):
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


class Layer(torch.nn.Module):
    """x → q, k, v projections, RoPE at the given positions (ropekit), attention, output projection."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.k = torch.nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.v = torch.nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)
        self.rope = ropekit.Rope(HEAD_DIM, base=10000.0)

    def project(self, x, positions):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, HEADS, HEAD_DIM)
        k = self.k(x).view(b, s, KV_HEADS, HEAD_DIM)
        v = self.v(x).view(b, s, KV_HEADS, HEAD_DIM)
        q, k = apply_rotary(self.rope, q, k, positions, layout="bshd")
        return q, k, v


def reference_attention(q, k, v, documents, causal, window):
    """Plain softmax attention over the whole sequence in float32 (the one-process reference)."""
    s = q.shape[1]
    idx = torch.arange(s)
    allowed = documents[:, None] == documents[None, :]
    if causal:
        allowed &= idx[None, :] <= idx[:, None]
    if window:
        allowed &= (idx[:, None] - idx[None, :]).abs() < window
    kk = k.repeat_interleave(HEADS // KV_HEADS, dim=2)
    vv = v.repeat_interleave(HEADS // KV_HEADS, dim=2)
    scores = torch.einsum("bshd,bthd->bhst", q, kk) * HEAD_DIM ** -0.5
    p = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return torch.einsum("bhst,bthd->bshd", p, vv)


def run_case(world, rank, sharding, mode, packed, window):
    seq = 8 * world * 3  # a multiple of every sharding's unit (zigzag: 2·world; striped, stripe 2: 2·world)
    cu = [0, 2 * world * 2, 2 * world * 3, seq] if packed else None
    torch.manual_seed(1234)
    layer = Layer()
    x = torch.randn(2, seq, DIM)
    target = torch.randn(2, seq, DIM)
    documents = torch.zeros(seq, dtype=torch.int64)
    if packed:
        for d in range(len(cu) - 1):
            documents[cu[d]:cu[d + 1]] = d
        positions = torch.as_tensor(ropekit.packed_positions(cu), dtype=torch.int64)
    else:
        positions = torch.arange(seq)
    # The reference: one process, the whole sequence.
    ref_layer = Layer()
    ref_layer.load_state_dict(layer.state_dict())
    q, k, v = ref_layer.project(x, positions)
    ref_out = ref_layer.o(reference_attention(q, k, v, documents, True, window).reshape(2, seq, -1))
    ref_loss = ((ref_out - target) ** 2).sum() / target.numel()
    ref_loss.backward()
    ref_grads = {n: p.grad.clone() for n, p in ref_layer.named_parameters()}

    lay = cp.layout(cu_seqlens=cu, sharding=sharding, stripe=2) if packed else \
        cp.layout(seq, sharding=sharding, stripe=2)
    xs, ts = cp.shard(lay, x, target)
    q, k, v = layer.project(xs, lay.positions)
    out = layer.o(cp.attention(lay, q, k, v, mode=mode, window=window).reshape(2, lay.local_len, -1))
    loss = ((out - ts) ** 2).sum() / target.numel()
    loss.backward()
    for p in layer.parameters():  # data parallel over the context: the ranks' gradients summed
        dist.all_reduce(p.grad, group=lay.group)
    full = cp.unshard(lay, out.detach())
    result = {"out": rel(full, ref_out.detach()),
              "grads": {n: rel(p.grad, ref_grads[n]) for n, p in layer.named_parameters()},
              "bits_equal_out": bool(torch.equal(full, ref_out.detach()))}
    # Mutations: rotating at local positions, and a zig-zag shard rotated with the contiguous shard's positions.
    with torch.no_grad():
        wrong = {"local positions": torch.arange(lay.local_len)}
        if sharding == "zigzag" and not packed:
            wrong["contiguous positions"] = cp.layout(seq, sharding="contiguous", check=False).positions
        result["mutations"] = {}
        for name, pos in wrong.items():
            q, k, v = layer.project(xs, pos)
            o = layer.o(cp.attention(lay, q, k, v, mode=mode, window=window).reshape(2, lay.local_len, -1))
            result["mutations"][name] = rel(cp.unshard(lay, o), ref_out.detach())
    return result


def errors(world, rank):
    """The errors of bad arguments: each raised on every rank, none hangs (the group's timeout bounds a wait)."""
    out = {}

    def catch(name, f):
        try:
            f()
            out[name] = None
        except ropekit.Error as e:
            out[name] = str(e)

    catch("zigzag length", lambda: cp.layout(2 * world + 1, sharding="zigzag"))
    catch("packed document", lambda: cp.layout(cu_seqlens=[0, 2 * world, 2 * world + 3], sharding="zigzag"))
    catch("cp_size", lambda: cp.layout(4 * world, cp_size=world + 1))
    catch("disagree", lambda: cp.layout(4 * world if rank == 0 else 8 * world))
    catch("sharding", lambda: cp.layout(4 * world, sharding="ring"))
    lay = cp.layout(4 * world)
    catch("mode", lambda: cp.attention(lay, *[torch.zeros(1, 4, 2, 8)] * 3, mode="ulysses-typo"))
    catch("shard length", lambda: cp.shard(lay, torch.zeros(1, 4 * world + 1)))
    catch("query tokens", lambda: cp.attention(lay, *[torch.zeros(1, 5, 2, 8)] * 3))
    catch("ulysses heads", lambda: cp.attention(lay, *[torch.zeros(1, 4, 5, 8)] * 3, mode="ulysses"))
    return out


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.set_num_threads(1)
    results = {}
    for sharding in cp.SHARDINGS:
        for mode in cp.MODES:
            for packed in (False, True):
                for window in (0, 5):
                    key = f"{sharding}/{mode}/{'packed' if packed else 'one'}/w{window}"
                    results[key] = run_case(world, rank, sharding, mode, packed, window)
    results["errors"] = errors(world, rank)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
