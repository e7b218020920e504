"""ropekit.distributed: context parallelism on PyTorch's torch.distributed, with every token rotated at its global
position.

    import torch.distributed as dist, ropekit, ropekit.distributed as cp
    dist.init_process_group("gloo")                  # or "nccl"; torchrun sets the rendezvous
    shard = cp.layout(seq_len=4096, sharding="zigzag")   # this rank's tokens, their global positions
    ids, labels = cp.shard(shard, ids, labels)           # [batch, seq] → [batch, seq / world]
    ...
    q, k = ropekit.torch.apply_rotary(rope, q, k, shard.positions)   # one kernel call, global positions
    out = cp.attention(shard, q, k, v, mode="ring")      # exact causal attention over every rank's keys
    full = cp.unshard(shard, out)                        # back in sequence order, on every rank

A `Layout` is what one rank holds of a sequence (or of packed documents, `cu_seqlens`): the global token indices in
local order (`ropekit.cp_indices`), their RoPE positions (`ropekit.cp_positions`: restarting per document) and their
documents; every rank can compute every other rank's, so the collectives below move tensors only.

Shardings (docs/distributed.md sets them beside Megatron-LM, TransformerEngine, torchtitan and DeepSpeed Ulysses):
"contiguous" (rank r holds chunk r), "zigzag" (2·world chunks; rank r holds chunks r and 2·world − 1 − r: the causal
work balanced, as Megatron's get_batch_on_this_cp_rank and TransformerEngine), "striped" (token t on rank
(t // stripe) % world).

Attention modes, both exact (float32 softmax and merge) with autograd, causal, GQA, packed-document masks and a
sliding window:
  "allgather": every rank's K and V (and nothing else: their indices are known) gathered, attention over them in
               sequence order; backward: the keys' and values' gradients summed over the ranks.
  "ring":      K and V passed rank to rank (isend/irecv), one block at a time merged by online softmax (the running
               maximum and sum in float32); blocks that the mask empties are skipped (zig-zag's causal pairs).
               Backward passes K, V and their gradients around the ring again.
  "ulysses":   DeepSpeed-Ulysses: an all-to-all turns sequence shards of q, k, v into head shards of the whole
               sequence (heads a multiple of the world size; kv heads too, or they are repeated for their query heads
               first), attention runs there, and a second one turns the output back; the rotation stays where it
               was, at each token's global position.

Hugging Face models, without editing their code: `with cp.context_parallel(model, shard, mode="ring"):` registers
ropekit's attention as a transformers attention function (AttentionInterface) for the block; the caller passes the
shard's tokens and `position_ids=shard.positions[None]` (M-RoPE streams: `cp.shard(shard, ids3, seq_dim=2)`), so
the model's own rotary embedding (or ropekit.torch.patch's) rotates at global positions.

Errors: arguments that cannot be sharded (a length that is not a multiple of the sharding's unit, an unknown
sharding, a group whose size is not cp_size) and ranks that disagree on them raise `ropekit.Error` on every rank:
`layout` checks the ranks' arguments with one small all-gather first (check=True), so no rank waits for one that
raised.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ._ropekit import Error, cp_indices, cp_positions

__all__ = ["Layout", "layout", "shard", "unshard", "attention", "context_parallel", "traffic", "reset_traffic",
           "SHARDINGS", "MODES"]

SHARDINGS = ("contiguous", "zigzag", "striped")
MODES = ("allgather", "ring", "ulysses")


@dataclass(frozen=True)
class Layout:
    """What rank `rank` of `group` holds: `indices` (global token indices, local order), `positions` (their RoPE
    positions), `documents` (their document ids, 0 without cu_seqlens); `indices_of(r)` etc. for any rank."""

    group: Optional[dist.ProcessGroup]
    rank: int
    world: int
    sharding: str
    seq_len: int
    stripe: int
    cu_seqlens: Optional[tuple]
    start: int
    _all_indices: tuple = field(repr=False)
    _all_positions: tuple = field(repr=False)
    _documents: np.ndarray = field(repr=False)

    @property
    def indices(self) -> torch.Tensor:
        return self.indices_of(self.rank)

    @property
    def positions(self) -> torch.Tensor:
        return self.positions_of(self.rank)

    @property
    def documents(self) -> torch.Tensor:
        return self.documents_of(self.rank)

    @property
    def local_len(self) -> int:
        return self.seq_len // self.world

    def indices_of(self, r: int) -> torch.Tensor:
        """The global token indices rank r holds, in its local order."""
        return torch.from_numpy(self._all_indices[r])

    def positions_of(self, r: int) -> torch.Tensor:
        """The RoPE positions of the tokens rank r holds."""
        return torch.from_numpy(self._all_positions[r])

    def documents_of(self, r: int) -> torch.Tensor:
        """The document ids of the tokens rank r holds (0 without cu_seqlens)."""
        return torch.from_numpy(self._documents[self._all_indices[r]])

    def peer(self, r: int) -> int:
        """The global rank of group rank r (send/recv address global ranks)."""
        return r if self.group is None else dist.get_global_rank(self.group, r)


def _digest(*parts) -> int:
    h = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(h[:7], "little")


def layout(seq_len: int = 0, *, group: Optional[dist.ProcessGroup] = None, sharding: str = "zigzag",
           cu_seqlens: Optional[Sequence[int]] = None, stripe: int = 1, start: int = 0,
           cp_size: Optional[int] = None, check: bool = True) -> Layout:
    """This rank's share of a sequence of seq_len tokens (or of packed documents: cu_seqlens, seq_len then its last
    entry). group: the context-parallel process group (default: the world). cp_size: when given, must equal the
    group's size. start: the first token's position (one sequence). check: compare the ranks' arguments with one
    all-gather of a digest before returning (every rank raises the same ropekit.Error if they differ or cannot be
    sharded); check=False trusts them and needs no collective."""
    if not dist.is_available() or not dist.is_initialized():
        raise Error("ropekit.distributed.layout: torch.distributed is not initialised (init_process_group first)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    problem = None
    if cp_size is not None and cp_size != world:
        problem = f"ropekit.distributed.layout: cp_size = {cp_size}: the process group has {world} ranks"
    cu = None if cu_seqlens is None else tuple(int(c) for c in cu_seqlens)
    if cu is not None:
        if len(cu) < 2:
            problem = problem or f"ropekit.distributed.layout: cu_seqlens = {list(cu)}: needs at least 2 entries"
        elif seq_len not in (0, cu[-1]):
            problem = problem or (f"ropekit.distributed.layout: seq_len = {seq_len}: cu_seqlens ends at {cu[-1]}")
        else:
            seq_len = cu[-1]
    indices = positions = None
    if problem is None:
        try:
            kw = dict(cp_size=world, sharding=sharding, stripe=stripe)
            if cu is not None:
                indices = [cp_indices(cp_rank=r, cu_seqlens=list(cu), **kw) for r in range(world)]
                positions = [cp_positions(cp_rank=r, cu_seqlens=list(cu), **kw) for r in range(world)]
            else:
                indices = [cp_indices(seq_len, cp_rank=r, **kw) for r in range(world)]
                positions = [cp_positions(seq_len, cp_rank=r, start=start, **kw) for r in range(world)]
        except Error as e:
            problem = f"ropekit.distributed.layout: {e}"
    if check:
        mine = torch.tensor([_digest(sharding, seq_len, cu, stripe, start, cp_size, problem)], dtype=torch.int64)
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine, group=group)
        if any(int(t) != int(mine) for t in every):
            raise Error("ropekit.distributed.layout: the ranks disagree on seq_len, cu_seqlens, sharding, stripe, "
                        f"start or cp_size (rank {rank}: seq_len = {seq_len}, sharding = {sharding!r}, "
                        f"cu_seqlens = {list(cu) if cu else None}, stripe = {stripe}, start = {start})")
    if problem is not None:
        raise Error(problem)
    documents = np.zeros(seq_len, dtype=np.int64)
    if cu is not None:
        for d in range(len(cu) - 1):
            documents[cu[d]:cu[d + 1]] = d
    return Layout(group, rank, world, sharding, seq_len, stripe, cu, start,
                  tuple(np.asarray(i, dtype=np.int64) for i in indices),
                  tuple(np.asarray(p, dtype=np.int64) for p in positions), documents)


def _seq_dims(tensors, seq_dim):
    return seq_dim if isinstance(seq_dim, (list, tuple)) else [seq_dim] * len(tensors)


def shard(lay: Layout, *tensors: torch.Tensor, seq_dim=1):
    """Each tensor's sequence dimension (seq_dim: one for all, or one per tensor; M-RoPE position ids [3, batch, seq]
    take 2) cut to this rank's tokens, in the layout's local order. Returns one tensor, or a tuple. Raises
    ropekit.Error when a tensor's sequence dimension is not the layout's length."""
    dims = _seq_dims(tensors, seq_dim)
    out = []
    for i, (t, d) in enumerate(zip(tensors, dims)):
        if t.shape[d] != lay.seq_len:
            raise Error(f"ropekit.distributed.shard: tensor {i} has {t.shape[d]} tokens in dimension {d}: the layout "
                        f"has seq_len = {lay.seq_len}")
        out.append(t.index_select(d, lay.indices.to(t.device)))
    return out[0] if len(out) == 1 else tuple(out)


class _Gather(torch.autograd.Function):
    """All-gather along `dim` of equal shards into sequence order; backward: the full gradient summed over the ranks
    (all-reduce), this rank's tokens taken: the adjoint of the gather when every rank's output enters a loss."""

    @staticmethod
    def forward(ctx, x, lay: Layout, dim: int):
        ctx.lay, ctx.dim = lay, dim
        parts = [torch.empty_like(x) for _ in range(lay.world)]
        dist.all_gather(parts, x.contiguous(), group=lay.group)
        order = torch.cat([lay.indices_of(r) for r in range(lay.world)]).to(x.device)
        full = torch.cat(parts, dim=dim)
        out = torch.empty_like(full)
        out.index_copy_(dim, order, full)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.lay.group)
        return grad.index_select(ctx.dim, ctx.lay.indices.to(grad.device)), None, None


def unshard(lay: Layout, local: torch.Tensor, seq_dim: int = 1) -> torch.Tensor:
    """Every rank's shard of `local` gathered back in sequence order (the inverse of shard), on every rank; with
    autograd (its backward sums the ranks' gradients of the full tensor)."""
    if local.shape[seq_dim] != lay.local_len:
        raise Error(f"ropekit.distributed.unshard: {local.shape[seq_dim]} tokens in dimension {seq_dim}: this rank "
                    f"holds {lay.local_len}")
    return _Gather.apply(local, lay, seq_dim)


# ------------------------------------------------------------------------------------------------ attention

def _mask(q_idx, q_doc, k_idx, k_doc, causal: bool, window: int):
    """[q, k] True where query (index, document) may read key (index, document)."""
    allowed = q_doc[:, None] == k_doc[None, :]
    if causal:
        allowed &= k_idx[None, :] <= q_idx[:, None]
    if window > 0:
        allowed &= (q_idx[:, None] - k_idx[None, :]).abs() < window
    return allowed


def _check_qkv(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise Error("ropekit.distributed.attention: q, k, v must be [batch, seq, heads, head_dim] (bshd); got "
                    f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape[:3] + (k.shape[3],) or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise Error(f"ropekit.distributed.attention: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v "
                    f"{tuple(v.shape)} do not fit together")
    if q.shape[2] % k.shape[2] != 0:
        raise Error(f"ropekit.distributed.attention: {q.shape[2]} query heads is not a multiple of {k.shape[2]} "
                    "key/value heads")


def _scores(q, k, scale):
    """q [b, s, hk, g, d], k [b, t, hk, d] → [b, hk, g, s, t], float32."""
    return torch.einsum("bshgd,bthd->bhgst", q, k) * scale


def _block_forward(q, k, v, allowed, scale, m, l, acc):
    """One key block merged into the running max m, sum l [b, hk, g, s] and accumulator acc [b, hk, g, s, dv]."""
    s = _scores(q, k, scale).masked_fill(~allowed, float("-inf"))
    m_new = torch.maximum(m, s.amax(dim=-1))
    safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
    p = torch.exp(s - safe[..., None])
    alpha = torch.exp(torch.where(torch.isfinite(m), m - safe, torch.full_like(m, float("-inf"))))
    l = l * alpha + p.sum(dim=-1)
    acc = acc * alpha[..., None] + torch.einsum("bhgst,bthd->bhgsd", p, v)
    return m_new, l, acc


def _block_backward(q, k, v, allowed, scale, lse, do, delta):
    """Gradients of one key block: (dq, dk, dv) with P = exp(S − lse)."""
    s = _scores(q, k, scale).masked_fill(~allowed, float("-inf"))
    p = torch.exp(s - lse[..., None])
    dv = torch.einsum("bhgst,bhgsd->bthd", p, do)
    dp = torch.einsum("bhgsd,bthd->bhgst", do, v)
    ds = p * (dp - delta[..., None])
    dq = torch.einsum("bhgst,bthd->bshgd", ds, k) * scale
    dk = torch.einsum("bhgst,bshgd->bthd", ds, q) * scale
    return dq, dk, dv


# Scores one tile may hold (query rows × keys × batch × heads, float32): 64 MiB; and at most _TILE_ROWS query rows, so
# a causal block's tiles skip most of its upper triangle (a tile's rows read the columns up to its last row's).
_TILE_SCORES = 1 << 24
_TILE_ROWS = 256

# What this process's calls have moved and computed since reset_traffic(): bytes it sent (each collective counted as
# its usual algorithm sends them: all-gather and all-to-all (W−1)/W of the gathered or exchanged tensor, all-reduce
# 2(W−1)/W of it, send/recv each tensor), and the attention score entries it computed (forward and backward).
traffic = {"bytes_sent": 0, "score_entries": 0}


def reset_traffic() -> None:
    """Zeroes the `traffic` counters (bytes sent between ranks, attention score entries computed)."""
    traffic["bytes_sent"] = traffic["score_entries"] = 0


def _tiles(allowed, per_row: int):
    """(row indices, column indices) covering every allowed entry of a [q, k] mask: only the rows with an allowed
    key, in chunks whose scores fit _TILE_SCORES (per_row: scores per row and key), each with only the columns its
    rows read (a causal block's triangle, zig-zag's empty halves: never computed)."""
    rows = allowed.any(dim=1).nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    step = max(1, min(_TILE_ROWS, _TILE_SCORES // max(1, allowed.shape[1] * per_row)))
    for i in range(0, rows.numel(), step):
        rt = rows[i:i + step]
        ct = allowed.index_select(0, rt).any(dim=0).nonzero().squeeze(1)
        traffic["score_entries"] += rt.numel() * ct.numel() * per_row
        yield rt, ct


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, lay: Layout, mode: str, causal: bool, window: int, scale: float):
        dtype = q.dtype
        b, s, h, d = q.shape
        hk = k.shape[2]
        qf = q.float().reshape(b, s, hk, h // hk, d)
        kf, vf = k.float().contiguous(), v.float().contiguous()
        dev = q.device
        q_idx, q_doc = lay.indices.to(dev), lay.documents.to(dev)
        m = torch.full((b, hk, h // hk, s), float("-inf"), device=dev)
        l = torch.zeros_like(m)
        acc = torch.zeros((b, hk, h // hk, s, v.shape[3]), device=dev)
        for r, kb, vb in _blocks(lay, kf, vf, mode):
            allowed = _mask(q_idx, q_doc, lay.indices_of(r).to(dev), lay.documents_of(r).to(dev), causal, window)
            for rt, ct in _tiles(allowed, b * h):
                mt, lt, at = _block_forward(qf.index_select(1, rt), kb.index_select(1, ct), vb.index_select(1, ct),
                                            allowed[rt][:, ct], scale, m[..., rt], l[..., rt], acc[..., rt, :])
                m[..., rt], l[..., rt], acc[..., rt, :] = mt, lt, at
        # A query that reads no key (none: every token reads itself when causal) gets 0 and lse −inf.
        out = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], torch.zeros_like(acc))
        lse = torch.where(l > 0, m + torch.log(l.clamp_min(1e-30)), torch.full_like(l, float("-inf")))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.lay, ctx.mode, ctx.causal, ctx.window, ctx.scale = lay, mode, causal, window, scale
        # [b, hk, g, s, dv] → [b, s, h, dv]
        return out.permute(0, 3, 1, 2, 4).reshape(b, s, h, v.shape[3]).to(dtype)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        lay = ctx.lay
        b, s, h, d = q.shape
        hk = k.shape[2]
        g = h // hk
        dev = q.device
        qf = q.float().reshape(b, s, hk, g, d)
        do = grad.float().reshape(b, s, hk, g, v.shape[3]).permute(0, 2, 3, 1, 4)  # [b, hk, g, s, dv]
        delta = (do * out).sum(dim=-1)
        safe_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        q_idx, q_doc = lay.indices.to(dev), lay.documents.to(dev)
        dq = torch.zeros_like(qf)

        def block_grads(r, kb, vb):
            allowed = _mask(q_idx, q_doc, lay.indices_of(r).to(dev), lay.documents_of(r).to(dev), ctx.causal,
                            ctx.window)
            dkb, dvb = torch.zeros_like(kb), torch.zeros_like(vb)
            for rt, ct in _tiles(allowed, b * h):
                dqt, dkt, dvt = _block_backward(qf.index_select(1, rt), kb.index_select(1, ct), vb.index_select(1, ct),
                                                allowed[rt][:, ct], ctx.scale, safe_lse[..., rt], do[..., rt, :],
                                                delta[..., rt])
                dq.index_add_(1, rt, dqt)
                dkb.index_add_(1, ct, dkt)
                dvb.index_add_(1, ct, dvt)
            return dkb, dvb

        kf, vf = k.float().contiguous(), v.float().contiguous()
        if ctx.mode == "local":
            dk, dv = block_grads(0, kf, vf)
        elif ctx.mode == "allgather":
            ks, vs = _gather_all(lay, kf), _gather_all(lay, vf)
            dks, dvs = [], []
            for r in range(lay.world):
                dkb, dvb = block_grads(r, ks[r], vs[r])
                dks.append(dkb)
                dvs.append(dvb)
            dk_all, dv_all = torch.stack(dks), torch.stack(dvs)
            _all_reduce(lay, dk_all)
            _all_reduce(lay, dv_all)
            dk, dv = dk_all[lay.rank], dv_all[lay.rank]
        else:
            dk, dv = _ring_backward(lay, kf, vf, block_grads)
        return (dq.reshape(b, s, h, d).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()  # Tensor.nbytes is torch 2's


def _all_reduce(lay: Layout, x: torch.Tensor):
    traffic["bytes_sent"] += 2 * (lay.world - 1) * _nbytes(x) // lay.world
    dist.all_reduce(x, group=lay.group)


def _gather_all(lay: Layout, x: torch.Tensor):
    traffic["bytes_sent"] += (lay.world - 1) * _nbytes(x)
    parts = [torch.empty_like(x) for _ in range(lay.world)]
    dist.all_gather(parts, x, group=lay.group)
    return parts


def _start_exchange(lay: Layout, tensors):
    """Each tensor sent to the next rank, the previous rank's received into new tensors (one step of the ring),
    without waiting: returns (received, requests)."""
    nxt, prv = lay.peer((lay.rank + 1) % lay.world), lay.peer((lay.rank - 1) % lay.world)
    traffic["bytes_sent"] += sum(_nbytes(t) for t in tensors)
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, nxt, lay.group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, prv, lay.group) for t in received]
    return received, dist.batch_isend_irecv(ops)


def _exchange(lay: Layout, tensors):
    received, requests = _start_exchange(lay, tensors)
    for req in requests:
        req.wait()
    return received


def _blocks(lay: Layout, k, v, mode: str):
    """(owner rank, its K, its V) for every rank: gathered at once, or around the ring (step i holds rank − i's; the
    next step's block travels while this one is computed)."""
    if mode == "local":
        yield 0, k, v
        return
    if mode == "allgather":
        ks, vs = _gather_all(lay, k), _gather_all(lay, v)
        for r in range(lay.world):
            yield r, ks[r], vs[r]
        return
    kb, vb = k, v
    for step in range(lay.world):
        owner = (lay.rank - step) % lay.world
        pending = _start_exchange(lay, [kb, vb]) if step + 1 < lay.world else None
        yield owner, kb, vb
        if pending is not None:
            for req in pending[1]:
                req.wait()
            kb, vb = pending[0]


def _ring_backward(lay: Layout, k, v, block_grads):
    """K, V and their gradient accumulators around the ring: after world steps each block's gradients have every
    rank's contribution and one more step brings them home. K and V travel while a block's gradients are computed;
    the gradients, once computed."""
    kb, vb = k, v
    dkb, dvb = torch.zeros_like(k), torch.zeros_like(v)
    for step in range(lay.world):
        owner = (lay.rank - step) % lay.world
        pending = _start_exchange(lay, [kb, vb]) if step + 1 < lay.world else None
        gk, gv = block_grads(owner, kb, vb)
        dkb, dvb = _exchange(lay, [dkb + gk, dvb + gv])
        if pending is not None:
            for req in pending[1]:
                req.wait()
            kb, vb = pending[0]
    return dkb, dvb


class _Regroup(torch.autograd.Function):
    """Sequence shards [b, local, h, d] ↔ head shards of every token in sequence order [b, seq, h / world, d] (one
    all_to_all_single each way); the backward of one direction is the other."""

    @staticmethod
    def forward(ctx, x, lay: Layout, to_heads: bool):
        ctx.lay, ctx.to_heads = lay, to_heads
        return _seq_to_heads(lay, x) if to_heads else _heads_to_seq(lay, x)

    @staticmethod
    def backward(ctx, grad):
        return (_heads_to_seq(ctx.lay, grad) if ctx.to_heads else _seq_to_heads(ctx.lay, grad)), None, None


def _order(lay: Layout, device):
    return torch.cat([lay.indices_of(r) for r in range(lay.world)]).to(device)


def _seq_to_heads(lay: Layout, x):
    b, s, h, d = x.shape
    w = lay.world
    send = x.reshape(b, s, w, h // w, d).permute(2, 0, 1, 3, 4).contiguous()  # [dest rank, b, s, h/w, d]
    recv = torch.empty_like(send)  # [source rank, b, s, h/w, d]
    traffic["bytes_sent"] += (w - 1) * _nbytes(send) // w
    dist.all_to_all_single(recv, send, group=lay.group)
    gathered = recv.permute(1, 0, 2, 3, 4).reshape(b, w * s, h // w, d)  # rank-major token order
    out = torch.empty_like(gathered)
    out.index_copy_(1, _order(lay, x.device), gathered)
    return out


def _heads_to_seq(lay: Layout, y):
    b, seq, hw, d = y.shape
    w = lay.world
    s = seq // w
    mine = y.index_select(1, _order(lay, y.device)).reshape(b, w, s, hw, d).permute(1, 0, 2, 3, 4).contiguous()
    recv = torch.empty_like(mine)  # [source rank = head group, b, s, h/w, d]
    traffic["bytes_sent"] += (w - 1) * _nbytes(mine) // w
    dist.all_to_all_single(recv, mine, group=lay.group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, s, w * hw, d)


def _ulysses(lay: Layout, q, k, v, causal: bool, window: int, scale: float):
    h, hk = q.shape[2], k.shape[2]
    if h % lay.world:
        raise Error(f"ropekit.distributed.attention: mode = 'ulysses' needs heads ({h}) that are a multiple of the "
                    f"world size ({lay.world})")
    if hk % lay.world:  # fewer kv heads than ranks can split: each kv head repeated for its query heads first
        k, v = k.repeat_interleave(h // hk, dim=2), v.repeat_interleave(h // hk, dim=2)
    qh, kh, vh = (_Regroup.apply(t, lay, True) for t in (q, k, v))
    out = _local_attention(_whole(lay.seq_len, lay._documents), qh, kh, vh, causal, window, scale)
    return _Regroup.apply(out, lay, False)


def _whole(seq_len: int, documents: Optional[np.ndarray] = None) -> Layout:
    """A one-rank layout over a whole sequence in order (Ulysses's head shards; one process's baseline)."""
    whole = np.arange(seq_len, dtype=np.int64)
    docs = np.zeros(seq_len, dtype=np.int64) if documents is None else documents
    return Layout(None, 0, 1, "contiguous", seq_len, 1, None, 0, (whole,), (whole,), docs)


def _local_attention(lay: Layout, q, k, v, causal: bool, window: int, scale: float):
    """attention's tiles over one process's whole sequence (lay: _whole), no collective."""
    return _Attention.apply(q, k, v, lay, "local", causal, window, scale)


def attention(lay: Layout, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mode: str = "ring",
              causal: bool = True, window: int = 0, scale: Optional[float] = None) -> torch.Tensor:
    """Exact softmax attention of this rank's queries over every rank's keys: q [batch, local, heads, head_dim], k and
    v [batch, local, kv_heads, head_dim] (GQA: heads a multiple of kv_heads), already rotated at the layout's global
    positions. The mask: causal by global token index, within a document (cu_seqlens), and a sliding window of
    `window` keys (0: none). scale: default head_dim^-0.5. Returns [batch, local, heads, head_dim_v] in q's dtype;
    scores, softmax and merge in float32. Differentiable in q, k and v."""
    if mode not in MODES:
        raise Error(f"ropekit.distributed.attention: mode = {mode!r}: one of {', '.join(MODES)}")
    _check_qkv(q, k, v)
    if q.shape[1] != lay.local_len:
        raise Error(f"ropekit.distributed.attention: {q.shape[1]} query tokens: this rank holds {lay.local_len}")
    if window < 0:
        raise Error(f"ropekit.distributed.attention: window = {window}: must be ≥ 0")
    scale = q.shape[3] ** -0.5 if scale is None else float(scale)
    if mode == "ulysses":
        return _ulysses(lay, q, k, v, causal, int(window), scale)
    return _Attention.apply(q, k, v, lay, mode, causal, int(window), scale)


# ------------------------------------------------------------------------------------------------ Hugging Face

_ACTIVE = threading.local()
_HF_NAME = "ropekit_cp"


def _hf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                  softcap=None, **kwargs):
    """transformers' attention-function interface (query [b, h, s, d]) → ropekit.distributed.attention under the
    context_parallel block's layout; returns ([b, s, h, d], None). The model's own mask is not read: the layout's
    (causal by global index, documents, the layer's sliding window) is the sharded sequence's."""
    state = getattr(_ACTIVE, "state", None)
    if state is None:
        raise Error("ropekit.distributed: the ropekit_cp attention runs only inside context_parallel(model, layout)")
    lay, mode = state
    if dropout:
        raise Error(f"ropekit.distributed: attention dropout = {dropout}: not supported (model.eval() or "
                    "attention_dropout = 0)")
    if softcap:
        raise Error(f"ropekit.distributed: attention logit softcapping = {softcap}: not supported")
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    causal = getattr(module, "is_causal", True)
    return attention(lay, q, k, v, mode=mode, causal=causal, window=int(sliding_window or 0), scale=scaling), None


def _no_mask(*args, **kwargs):
    return None


@contextlib.contextmanager
def context_parallel(model, lay: Layout, mode: str = "ring"):
    """Within the block, `model` (a transformers PreTrainedModel) attends through ropekit.distributed.attention with
    `lay` and `mode`: feed it the shard's tokens (shard) and position_ids = lay.positions (its global positions).
    The model's attention implementation is restored on exit."""
    if mode not in MODES:
        raise Error(f"ropekit.distributed.context_parallel: mode = {mode!r}: one of {', '.join(MODES)}")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(_HF_NAME, _hf_attention)
    AttentionMaskInterface.register(_HF_NAME, _no_mask)
    previous = model.config._attn_implementation
    model.set_attn_implementation(_HF_NAME)
    _ACTIVE.state = (lay, mode)
    try:
        yield model
    finally:
        _ACTIVE.state = None
        model.set_attn_implementation(previous)
