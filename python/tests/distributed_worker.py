"""One rank of test_distributed.py (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT in its environment, as torchrun
sets them): every sharding × attention mode × (one sequence,
packed documents) × (full, sliding window) on a tiny attention layer with RoPE, against the same layer run in one
process on the whole sequence (every rank computes that reference itself, from the same seed). Writes
OUT/rank{r}.json: per case the worst relative differences of the unsharded output and of every gradient, and the
mutations' differences; and the errors bad arguments raise.

    python -m torch.distributed.run --nproc_per_node N --master_addr 127.0.0.1 --master_port P \\
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

    # Tiles of a few query rows (the default holds 2^24 scores): the tiling and its per-tile columns are exercised.
    cp._TILE_SCORES = 2 * HEADS * 8 * world
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


def hf_model(family):
    """A tiny transformers model of the family (12 heads over 2 kv heads, so Ulysses splits them over 2-4 ranks)."""
    import transformers as t
    common = dict(vocab_size=64, hidden_size=96, intermediate_size=64, num_hidden_layers=2, num_attention_heads=12,
                  num_key_value_heads=2, max_position_embeddings=256, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(7)
    if family == "llama":
        model = t.LlamaForCausalLM(t.LlamaConfig(**common))
    elif family == "qwen3":  # QK-norm
        model = t.Qwen3ForCausalLM(t.Qwen3Config(head_dim=8, **common))
    else:  # Qwen2-VL's text model: M-RoPE, position ids [3, batch, seq]
        model = t.Qwen2VLTextModel(t.Qwen2VLTextConfig(
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}, **common))
    model.set_attn_implementation("eager")
    return model


def hf_case(world, family, mode, sharding):
    """A training step of the whole model: the sharded one (context_parallel) against one process (eager)."""
    import copy
    seq = 8 * world
    torch.manual_seed(99)
    ids = torch.randint(0, 64, (2, seq))
    if family == "qwen2_vl":  # t, h, w streams: an image-like block of 2 × 3 in the middle of the text
        pos = torch.arange(seq).repeat(3, 2, 1)
        pos[1, :, 4:10] = 4 + torch.arange(6) // 3
        pos[2, :, 4:10] = 4 + torch.arange(6) % 3
        seq_dim = 2
    else:
        pos = torch.arange(seq)[None].repeat(2, 1)
        seq_dim = 1
    weights = torch.randn(2, seq, 96)
    labels = ids.roll(-1, dims=1)
    labels[:, -1] = -100

    def loss_of(out, lbl, w):
        if family == "qwen2_vl":
            return (out.last_hidden_state * w).sum() / weights.numel()
        return torch.nn.functional.cross_entropy(out.logits.reshape(-1, 64), lbl.reshape(-1), ignore_index=-100,
                                                 reduction="sum") / (labels != -100).sum()

    def head(out):
        return out.last_hidden_state if family == "qwen2_vl" else out.logits

    cp._TILE_SCORES = 1 << 24
    ref = hf_model(family)
    model = copy.deepcopy(ref)
    ref_out = ref(input_ids=ids, position_ids=pos)
    loss_of(ref_out, labels, weights).backward()
    lay = cp.layout(seq, sharding=sharding)
    ids_l, lbl_l, w_l = cp.shard(lay, ids, labels, weights)
    pos_l = cp.shard(lay, pos, seq_dim=seq_dim)
    with cp.context_parallel(model, lay, mode=mode):
        out = model(input_ids=ids_l, position_ids=pos_l)
        loss_of(out, lbl_l, w_l).backward()
        with torch.no_grad():  # the mutation: every rank's tokens at positions 0 … local − 1
            local = torch.arange(lay.local_len).expand_as(pos_l) if seq_dim == 1 else \
                torch.arange(lay.local_len).expand(3, 2, -1)
            wrong = cp.unshard(lay, head(model(input_ids=ids_l, position_ids=local)))
    assert model.config._attn_implementation == "eager"
    grads = {}
    for name, p in model.named_parameters():
        dist.all_reduce(p.grad)
        grads[name] = rel(p.grad, dict(ref.named_parameters())[name].grad)
    full = cp.unshard(lay, head(out).detach())
    return {"out": rel(full, head(ref_out).detach()), "grads": grads,
            "bits_equal_out": bool(torch.equal(full, head(ref_out).detach())),
            "mutations": {"local positions": rel(wrong, head(ref_out).detach())}}


def traffic_case(world):
    """Per mode: the bytes this rank sent and the score entries it computed in one forward + backward (zig-zag, 64·W
    tokens, the default tiles), and the bytes each mode's algorithm sends (docs/distributed.md)."""
    cp._TILE_SCORES = 1 << 24
    seq = 64 * world
    lay = cp.layout(seq, sharding="zigzag")
    torch.manual_seed(5)
    q = torch.randn(1, lay.local_len, HEADS, HEAD_DIM)
    k, v = torch.randn(2, 1, lay.local_len, KV_HEADS, HEAD_DIM)
    kv = cp._nbytes(k) + cp._nbytes(v)
    # Ulysses sends kv heads repeated for their query heads when the ranks cannot split them.
    kv_heads = kv if KV_HEADS % world == 0 else kv * HEADS // KV_HEADS
    theory = {"allgather": 4 * (world - 1) * kv, "ring": (3 * world - 2) * kv,
              "ulysses": 2 * (world - 1) * (2 * cp._nbytes(q) + kv_heads) // world}
    out = {}
    for mode in cp.MODES:
        cp.reset_traffic()
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        cp.attention(lay, qq, kk, vv, mode=mode).sum().backward()
        out[mode] = {"bytes": cp.traffic["bytes_sent"], "theory": theory[mode],
                     "scores": cp.traffic["score_entries"]}
    return out


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
    try:
        model = hf_model("llama")
        catch("hf mode", lambda: cp.context_parallel(model, lay, mode="flash").__enter__())
    except ImportError:
        pass
    catch("hf outside", lambda: cp._hf_attention(None, *[torch.zeros(1, 2, 4, 8)] * 3, None))
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
    try:  # the torch tier installs transformers; Debian's python3-torch (the release tier) has none
        import transformers  # noqa: F401
        hf = True
    except ImportError:
        hf = False
    if hf:
        for family in ("llama", "qwen3", "qwen2_vl"):
            for mode in cp.MODES:
                results[f"hf/{family}/{mode}"] = hf_case(world, family, mode, "zigzag")
        results["hf/llama/ring/striped"] = hf_case(world, "llama", "ring", "striped")
    results["traffic"] = traffic_case(world)
    results["errors"] = errors(world, rank)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
