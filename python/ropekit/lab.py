"""ropekit.lab: the long-context lab on any causal LM Hugging Face transformers loads, on any device PyTorch has.

    python -m ropekit.lab eval --model DIR --tokens ids.i32 --csv lab.csv     # or torchrun --nproc-per-node R ...

    import ropekit.lab
    result = ropekit.lab.eval("path/to/model", tokens, methods="orig,pi,yarn,rerope", device="cuda")
    result.write_csv("lab.csv")

The protocol is the C++ lab's (`ropekit eval`, docs/lab.md) exactly: windows from a BOS, lengths N with scale
s = max(1, N / L0), targets 1 … N − 1, the NLL of the float32 logits taken in float64, averaged per bucket of target
position; the same CSV columns and JSON. The methods are the C++ lab's own definitions (its parser and each method's
reading, ropekit._ropekit._lab_method): a method that changes the frequencies is installed with
ropekit.torch.patch(model, rope_scaling=...), so the model's per-layer story is kept (NoPE layers stay unrotated,
Gemma 3's local layers keep their RoPE); a method that changes how attention uses positions (swa, restart, the
regimes rerope / self_extend / dca, log-n, dynamic NTK's re-rotated and stale caches) runs in `lab_attention`, a
transformers attention function with the C++ attention's semantics. Under torchrun the (method, N, window) items
spread over the ranks (item k on rank k mod R) and rank 0 gathers them: the table is the one process's, bit for bit.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from . import Error, ModelPositions, RopeSet
from . import _ropekit

try:
    import torch
except ImportError as e:  # pragma: no cover - the lab needs PyTorch
    raise ImportError("ropekit.lab needs PyTorch (pip install torch transformers)") from e

__all__ = ["Row", "Result", "AttentionRow", "PasskeyCell", "PasskeyResult", "parse_methods", "load", "eval", "passkey",
           "passkey_prompt", "chart", "lab_attention", "main"]

CSV_HEADER = "method,N,scale,bucket_lo,bucket_hi,tokens,mean_nll,ppl"


@dataclass
class Row:
    """One line of the perplexity table: a method at evaluation length n (scale = n / trained length), the targets
    at positions [bucket_lo, bucket_hi) of every window, their count, mean negative log-likelihood and perplexity."""
    method: str
    n: int
    scale: float
    bucket_lo: int
    bucket_hi: int
    tokens: int
    mean_nll: float
    ppl: float


class _Written:
    """What a result writes: its CSV (csv()) and its JSON (to_json()), to files."""

    def write_csv(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.csv())

    def write_json(self, path) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")


@dataclass
class AttentionRow:
    """The attention probe's statistics for one method, one layer (−1: every layer together) and the queries whose
    target falls in [query_lo, query_hi): means over (query, head) pairs and windows (the C++ AttentionStatsRow)."""
    method: str
    n: int
    layer: int
    query_lo: int
    query_hi: int
    samples: int
    entropy: float
    entropy_ratio: float
    own_bos: float
    earlier_stories: float
    mass: list  # per key-distance bucket (Result.distance_edges)


@dataclass
class Result(_Written):
    """The table (rows method-major, then N, then bucket; empty buckets left out), as the C++ lab's EvalResult."""
    rows: list
    window_starts: list
    trained_length: int
    window_size: int
    methods: list  # [(name, fragment)]
    seconds: float = 0.0
    method_seconds: list = field(default_factory=list)
    tokens_read: int = 0
    model: str = ""
    tokens: int = 0
    attention: list = field(default_factory=list)  # AttentionRow, with attention_stats
    distance_edges: list = field(default_factory=list)

    def attention_csv(self) -> str:
        """The C++ lab's attention CSV (`ropekit eval --attention-stats`)."""
        e = self.distance_edges
        head = "method,N,layer,query_lo,query_hi,samples,entropy,entropy_ratio,own_bos,earlier_stories" + "".join(
            f",mass_{e[d]}_{e[d + 1]}" if d + 1 < len(e) else f",mass_{e[d]}_" for d in range(len(e)))
        lines = [head]
        for r in self.attention:
            lines.append(f"{_field(r.method)},{r.n},{r.layer},{r.query_lo},{r.query_hi},{r.samples},{r.entropy:.6g},"
                         f"{r.entropy_ratio:.6g},{r.own_bos:.6g},{r.earlier_stories:.6g}" +
                         "".join(f",{m:.6g}" for m in r.mass))
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """The C++ lab's CSV (`ropekit eval --csv`): the same columns, the same number formats."""
        lines = [CSV_HEADER]
        for r in self.rows:
            lines.append(f"{_field(r.method)},{r.n},{_g(r.scale)},{r.bucket_lo},{r.bucket_hi},{r.tokens},"
                         f"{r.mean_nll:.9g},{r.ppl:.9g}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        """The C++ lab's JSON (`ropekit eval --json`)."""
        return {
            "model": self.model, "tokens": self.tokens, "window_size": self.window_size,
            "window_starts": list(self.window_starts), "trained_length": self.trained_length,
            "seconds": self.seconds, "method_seconds": list(self.method_seconds),
            "methods": [{"name": n, "fragment": f} for n, f in self.methods],
            "rows": [{"method": r.method, "N": r.n, "scale": r.scale, "bucket_lo": r.bucket_lo,
                      "bucket_hi": r.bucket_hi, "tokens": r.tokens, "mean_nll": r.mean_nll, "ppl": r.ppl}
                     for r in self.rows],
        }


def _g(x: float) -> str:
    """fmt's "{}" of a double as the C++ CSV writes the scale: the shortest text that reads back, no ".0"."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def _field(text: str) -> str:
    """A CSV field as the C++ lab writes it: quoted where it holds a comma, a quote or a line break."""
    if not any(c in text for c in ',"\n\r'):
        return text
    return '"' + text.replace('"', '""') + '"'


def parse_methods(methods: str) -> list:
    """"orig,pi,name={...},rerope:w=384" → [(name, fragment)], by the C++ lab's parser (the same errors)."""
    return [tuple(m) for m in _ropekit._lab_parse_methods(methods)]


# ---------------------------------------------------------------------------------------------------------------
# Loading


def _pretrained_args(path: str, gguf_file: Optional[str] = None):
    """from_pretrained's directory and keyword arguments for a model directory or a GGUF file (transformers reads
    both the weights and the tokenizer from the file; it dequantizes the weights)."""
    if os.path.isfile(path):
        return os.path.dirname(path) or ".", {"gguf_file": os.path.basename(path)}
    return path, ({"gguf_file": gguf_file} if gguf_file else {})


def _auto_tokenizer(path):
    from transformers import AutoTokenizer
    directory, kwargs = _pretrained_args(os.fspath(path))
    return AutoTokenizer.from_pretrained(directory, **kwargs)


def load(model, *, device="cpu", dtype="float32", gguf_file: Optional[str] = None):
    """A causal LM from a local Hugging Face directory (or a GGUF file, through transformers' GGUF reader), in
    `dtype` (float32 or bfloat16) on `device`; a model object passes through (moved and cast). Errors: a path that
    is not there, a directory transformers cannot load (ropekit.Error naming the path and transformers' reason)."""
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if isinstance(dtype, str):
        if dtype not in dtypes:
            raise Error(f'dtype = "{dtype}": must be float32 or bfloat16')
        dtype = dtypes[dtype]
    if isinstance(model, torch.nn.Module):
        # The weights in `dtype`, the buffers as they are: module.to(dtype) would also round the rotary modules'
        # float32 inv_freq to bfloat16 (what from_pretrained(dtype=...) never does).
        model = model.to(device=device)
        for param in model.parameters():
            if param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
        return model.eval()
    try:
        import transformers
    except ImportError as e:
        raise Error("ropekit.lab: loading a model needs transformers (pip install transformers)") from e
    path = os.fspath(model)
    if not os.path.exists(path):
        raise Error(f"model = {path}: no such file or directory")
    path, kwargs = _pretrained_args(path, gguf_file)
    kwargs["dtype"] = dtype
    try:
        m = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as e:  # transformers' own reason, whatever its type
        raise Error(f"model = {model}: transformers cannot load it as a causal LM: {type(e).__name__}: {e}") from e
    return m.to(device).eval()


# ---------------------------------------------------------------------------------------------------------------
# The attention function: the C++ attention's window, story mask, regimes, log-n and dynamic-NTK rows


class _LayerRotation:
    """How one changed layer's q and k arrive rotated (the plan its patched rotary module gives: positions × inv_freq
    of the method's Rope at L0) and the plans a dynamic method moves them to."""

    def __init__(self, rope, device, length: Optional[int] = None, changed: bool = True):
        spec = rope.spec
        self._set = RopeSet(rope) if rope.depends_on_length else None
        arriving = self._set.at(length) if self._set is not None and length is not None else rope
        self.changed = changed  # the method sets this layer's RoPE (else the layer keeps its own: Gemma 3's local)
        self.pairing = spec["pairing"]
        self.rotary_dim = spec["rotary_dim"]
        self.inv_freq = torch.from_numpy(np.asarray(arriving.inv_freq, dtype=np.float64)).to(device)
        self.magnitude = arriving.cos_sin_scale
        self._plans = {}
        self.device = device

    def plan_at(self, length: int):
        """The plan after `length` tokens (dynamic NTK grows it past L0; LongRoPE switches factors): its inv_freq
        (float64) and its magnitude relative to the plan q and k arrive with."""
        if self._set is None:
            return self.inv_freq, 1.0
        got = self._plans.get(length)
        if got is None:
            rope = self._set.at(length)
            got = (torch.from_numpy(np.asarray(rope.inv_freq, dtype=np.float64)).to(self.device),
                   rope.cos_sin_scale / self.magnitude)
            self._plans[length] = got
        return got

    def turns(self, lengths) -> tuple:
        """For each length: the plan's inv_freq minus the arriving one [len, pairs] and the magnitude ratio [len]."""
        plans = [self.plan_at(int(L)) for L in lengths]
        turn = torch.stack([p[0] for p in plans]) - self.inv_freq[None, :]
        ratio = torch.tensor([p[1] for p in plans], dtype=torch.float32, device=self.device)
        return turn, ratio

    def rotate(self, x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        """x [..., n, head_dim] (float32) rotated by angles [..., n, pairs] (float64, broadcast over x's leading
        dimensions): each pair turned by its angle, in the model's pairing; lanes past the rotary width as they are."""
        cos, sin = torch.cos(angles).float(), torch.sin(angles).float()
        r = self.rotary_dim
        if self.pairing == "half":
            a, b = x[..., : r // 2], x[..., r // 2: r]
            out = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
        else:  # interleaved pairs (2j, 2j + 1)
            a, b = x[..., 0:r:2], x[..., 1:r:2]
            out = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
        return torch.cat((out, x[..., r:]), dim=-1) if r < x.shape[-1] else out


@dataclass
class _Reading:
    """What lab_attention does for the forward under way (one window of one method)."""
    window: int = 0                      # > 0: keys with i − j < window only (swa)
    story: Optional[torch.Tensor] = None  # [N] story index per position: attention within a story (restart)
    story_start: Optional[np.ndarray] = None  # [N] the first position of each position's story
    regimes: Optional[dict] = None
    logn_length: int = 0
    dynamic: Optional[str] = None        # "consistent" (dyn_ntk) or "stale" (dyn_ntk_stale)
    trained_length: int = 0
    layers: dict = field(default_factory=dict)  # layer index → _LayerRotation, every RoPE layer
    token_lengths: Optional[np.ndarray] = None  # restart: each token's story length (its plan's length)
    probe: Optional["_Probe"] = None     # the attention probe, when this window is probed


class _Probe:
    """The attention probe (the C++ lab's EvalOptions::attention_stats, ropekit/lab.hpp's AttentionStatsRow): per
    layer and bucket of the query's target (query i predicts i + 1), sums over (query, head) pairs of each query's
    attention distribution over the keys it sees — its entropy, entropy / ln(keys seen) (pairs that see ≥ 2 keys),
    its mass on the first token of the query's own story and on earlier stories, and its mass per bucket of key
    distance i − j. From lab_attention's float32 probabilities, summed in float64."""

    def __init__(self, layers: int, targets: Sequence[int], distance: Sequence[int]):
        self.targets = np.asarray(targets, dtype=np.int64)
        self.distance = np.asarray(distance, dtype=np.int64)
        t, d = len(self.targets), len(self.distance)
        self.samples = np.zeros((layers, t), dtype=np.int64)
        self.ratio_samples = np.zeros((layers, t), dtype=np.int64)
        self.entropy = np.zeros((layers, t))
        self.ratio = np.zeros((layers, t))
        self.own_bos = np.zeros((layers, t))
        self.earlier = np.zeros((layers, t))
        self.mass = np.zeros((layers, t, d))

    def add(self, layer: int, i: torch.Tensor, j: torch.Tensor, p: torch.Tensor, visible: torch.Tensor,
            story_start: np.ndarray, n: int) -> None:
        keep = (i < n - 1).cpu().numpy()  # the window's last query predicts nothing
        if not keep.any():
            return
        heads = p.shape[0] * p.shape[1]
        p64 = p.reshape(heads, p.shape[2], p.shape[3]).double()
        logp = torch.where(p64 > 0, torch.log(torch.where(p64 > 0, p64, torch.ones_like(p64))), torch.zeros_like(p64))
        entropy = -(p64 * logp).sum(-1)  # [heads, rows]
        seen = visible.sum(-1)  # [rows]
        ratio = torch.where(seen >= 2, entropy / torch.log(seen.clamp(min=2).double()), torch.zeros_like(entropy))
        dist = torch.as_tensor(self.distance, device=p.device)
        bucket = torch.searchsorted(dist, (i[:, None] - j[None, :]).clamp(min=0).contiguous(), right=True) - 1
        mass = torch.zeros(heads, p.shape[2], len(self.distance), dtype=torch.float64, device=p.device)
        mass.scatter_add_(2, bucket[None].expand(heads, -1, -1), p64)
        start = torch.as_tensor(story_start, device=p.device)[i]  # [rows]
        own = (p64 * (j[None, None, :] == start[None, :, None])).sum(-1)
        earlier = (p64 * (j[None, None, :] < start[None, :, None])).sum(-1)
        target = np.searchsorted(self.targets, i.cpu().numpy() + 1, side="right") - 1
        rows = np.flatnonzero(keep)
        tb = target[rows]
        np.add.at(self.samples[layer], tb, heads)
        np.add.at(self.ratio_samples[layer], tb, heads * (seen.cpu().numpy()[rows] >= 2))
        np.add.at(self.entropy[layer], tb, entropy.sum(0).cpu().numpy()[rows])
        np.add.at(self.ratio[layer], tb, ratio.sum(0).cpu().numpy()[rows])
        np.add.at(self.own_bos[layer], tb, own.sum(0).cpu().numpy()[rows])
        np.add.at(self.earlier[layer], tb, earlier.sum(0).cpu().numpy()[rows])
        np.add.at(self.mass[layer], tb, mass.sum(0).cpu().numpy()[rows])

    def merge(self, other: "_Probe") -> None:
        for name in ("samples", "ratio_samples", "entropy", "ratio", "own_bos", "earlier", "mass"):
            getattr(self, name).__iadd__(getattr(other, name))

    def rows(self, method: str, n: int) -> list:
        """The C++ lab's rows: every layer together (layer −1) per bucket, then each layer per bucket."""
        out = []
        t = len(self.targets)

        def row(layer, b, samples, ratio_samples, entropy, ratio, own, earlier, mass):
            if samples == 0:
                return
            hi = int(self.targets[b + 1]) if b + 1 < t else n
            out.append(AttentionRow(method, n, layer, int(self.targets[b]), hi, int(samples), entropy / samples,
                                    ratio / ratio_samples if ratio_samples else 0.0, own / samples, earlier / samples,
                                    [float(m) / samples for m in mass]))

        for b in range(t):
            row(-1, b, self.samples[:, b].sum(), self.ratio_samples[:, b].sum(), self.entropy[:, b].sum(),
                self.ratio[:, b].sum(), self.own_bos[:, b].sum(), self.earlier[:, b].sum(), self.mass[:, b].sum(0))
        for layer in range(self.samples.shape[0]):
            for b in range(t):
                row(layer, b, self.samples[layer, b], self.ratio_samples[layer, b], self.entropy[layer, b],
                    self.ratio[layer, b], self.own_bos[layer, b], self.earlier[layer, b], self.mass[layer, b])
        return out


_READING: Optional[_Reading] = None
_BLOCK_ELEMENTS = 1 << 24  # a query block's score matrix: at most this many float32 logits per regime


def _regime_positions(reg: dict, i: torch.Tensor, j: torch.Tensor):
    """ropekit/attention.hpp's regimes on index vectors i [bi], j [bj]: the regime of each (i, j) [bi, bj] and each
    regime's query positions [R, bi] and key positions [R, bj] (tests: against ropekit._ropekit._regime_table)."""
    t = reg["type"]
    if t in ("rerope", "self_extend"):
        w = reg["window"]
        which = ((i[:, None] - j[None, :]) >= w).to(torch.int8)
        if t == "rerope":
            qp = torch.stack((i, torch.full_like(i, w)))
            kp = torch.stack((j, torch.zeros_like(j)))
        else:
            g = reg["group"]
            qp = torch.stack((i, torch.div(i, g, rounding_mode="floor") + w - w // g))
            kp = torch.stack((j, torch.div(j, g, rounding_mode="floor")))
        return which, qp, kp
    if t == "dca":
        chunk, local = reg["chunk_size"], reg["local_size"]
        c = chunk - local
        ci, cj = torch.div(i, c, rounding_mode="floor"), torch.div(j, c, rounding_mode="floor")
        gap = ci[:, None] - cj[None, :]
        which = torch.where(gap <= 0, 0, torch.where(gap == 1, 1, 2)).to(torch.int8)
        im = i % c
        qp = torch.stack((im, torch.clamp(im + c, max=chunk), torch.full_like(i, min(2 * c - 1, chunk))))
        kp = torch.stack((j % c,) * 3)
        return which, qp, kp
    raise Error(f'regimes.type = "{t}": rerope, self_extend or dca')


def lab_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """A transformers attention function (AttentionInterface) with the C++ attention's semantics for the lab's
    methods: the causal mask, a sliding window (the layer's own and the method's), attention within a story (restart),
    position regimes (scale·⟨R(P_q) q, R(P_k) k⟩ with (P_q, P_k) per (i, j) as ropekit/attention.hpp defines them),
    log-n query scaling max(1, ln(i + 1) / ln L), logit soft-capping, and dynamic NTK: each query past L0 with the
    plan of the length read so far over every key (the re-rotated cache) or each token with its own (the stale cache).
    q and k arrive rotated by the patched rotary module at positions 0 … N − 1 (the story's for restart); a regime
    or plan turns them further by the difference, exact in float64 angles. Scores and softmax in float32, query
    blocks of at most 2^24 logits. One sequence (batch 1), no padding, no KV cache: the lab reads whole windows."""
    reading = _READING
    if reading is None:
        raise Error("lab_attention: called outside ropekit.lab (no reading set)")
    if query.shape[0] != 1:
        raise Error(f"lab_attention: batch = {query.shape[0]}: the lab reads one window at a time")
    if kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None:
        raise Error(f"lab_attention: {type(module).__name__} has attention sinks, which the lab's attention does not "
                    "model")
    if query.shape[2] != key.shape[2]:
        raise Error("lab_attention: queries and keys differ in length (a KV cache): the lab reads whole windows")
    out_dtype = query.dtype
    q, k, v = query[0].float(), key[0].float(), value[0].float()  # [H, N, D], [KV, N, D], [KV, N, Dv]
    heads, n, _ = q.shape
    kv_heads = k.shape[0]
    group = heads // kv_heads
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    softcap = kwargs.get("softcap")
    window = reading.window
    own_window = kwargs.get("sliding_window") or 0
    if own_window:
        window = min(window, own_window) if window else own_window
    # As the C++ runner: regimes on every RoPE layer, each with its own RoPE (Gemma 3's local layers too); log-n on
    # every layer (NoPE too); the dynamic plans on the layers whose RoPE the method sets.
    layer = reading.layers.get(getattr(module, "layer_idx", -1))
    changed = layer is not None and layer.changed
    device = q.device
    pos = torch.arange(n, device=device)
    if changed and (reading.dynamic == "stale" or reading.token_lengths is not None):
        # Each token with the plan of its own length: stale keys, the length read when the token was appended
        # (max(p + 1, L0): HF clamps at L0); restart, its story's length (each story read on its own).
        lengths = reading.token_lengths if reading.token_lengths is not None else \
            [max(p + 1, reading.trained_length) for p in range(n)]
        turn, ratio = layer.turns(lengths)
        at = pos if reading.story_start is None or reading.token_lengths is None else \
            pos - torch.as_tensor(reading.story_start, device=device)
        angles = at.double()[:, None] * turn
        q, k = layer.rotate(q, angles) * ratio[:, None], layer.rotate(k, angles) * ratio[:, None]
    regimes = reading.regimes if layer is not None else None
    logn = reading.logn_length
    dynamic = changed and reading.dynamic == "consistent" and n > reading.trained_length
    out = torch.empty(heads, n, v.shape[-1], device=device)
    qg = q.reshape(kv_heads, group, n, -1)
    rows = max(1, min(n, _BLOCK_ELEMENTS // max(1, heads * n)))
    if dynamic:
        rows = max(1, min(rows, 16))
    for a in range(0, n, rows):
        b = min(n, a + rows)
        i = pos[a:b]
        lo = 0
        if window:
            lo = max(0, a - window + 1)
        if reading.story is not None:
            lo = max(lo, int(reading.story_start[a]))
        j = pos[lo:b]
        qb, kb = qg[:, :, a:b], k[:, lo:b]
        if regimes is not None:
            which, qp, kp = _regime_positions(regimes, i, j)
            scores = None
            for r in range(qp.shape[0]):
                qr = layer.rotate(qb, (qp[r] - i).double()[:, None] * layer.inv_freq[None, :])
                kr = layer.rotate(kb, (kp[r] - j).double()[:, None] * layer.inv_freq[None, :])
                s_r = torch.einsum("cgid,cjd->cgij", qr, kr)
                scores = s_r if scores is None else torch.where(which == r, s_r, scores)
        elif dynamic and b > reading.trained_length:
            # Rows past L0: query i and every key under the plan of length i + 1 (rows before L0 keep the base plan).
            length = torch.clamp(i + 1, min=reading.trained_length).tolist()
            turn, ratio = layer.turns(length)  # [rows, pairs], [rows]
            qa = layer.rotate(qb, i.double()[:, None] * turn)  # [KV, g, rows, D]
            ka = layer.rotate(kb[:, None], j.double()[None, :, None] * turn[:, None, :])  # [KV, rows, keys, D]
            scores = torch.einsum("cgid,cijd->cgij", qa, ka) * (ratio * ratio)[:, None]
        else:
            scores = torch.einsum("cgid,cjd->cgij", qb, kb)
        factor = torch.full((b - a,), scale, dtype=torch.float64, device=device)
        if logn:
            factor = factor * torch.clamp(torch.log((i + 1).double()) / math.log(logn), min=1.0)
        scores = scores * factor.float()[:, None]
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        visible = j[None, :] <= i[:, None]
        if window:
            visible &= (i[:, None] - j[None, :]) < window
        if reading.story is not None:
            visible &= reading.story[j][None, :] == reading.story[i][:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        if reading.probe is not None:
            reading.probe.add(getattr(module, "layer_idx", 0), i, j, p, visible, reading.story_start, n)
        out[:, a:b] = torch.einsum("cgij,cjd->cgid", p, v[:, lo:b]).reshape(heads, b - a, -1)
    return out.transpose(0, 1)[None].to(out_dtype), None


def _register_attention() -> str:
    from transformers import AttentionInterface
    AttentionInterface.register("ropekit_lab", lab_attention)
    return "ropekit_lab"


# ---------------------------------------------------------------------------------------------------------------
# The protocol


class _Lab:
    """One model under the lab: its probe matched once, then each method's rotary modules and attention installed
    per (method, N)."""

    def __init__(self, model, trained_length: int):
        from .torch import _matches
        self.model = model
        self.l0 = trained_length
        self.config = model.config.to_dict()
        self.device = next(model.parameters()).device
        self.matches = _matches(model, "accurate")  # checked against the model's own plan before any method
        if not self.matches:
            raise Error(f"{type(model).__name__}: no rotary module the lab can replace (a model keeping its angles in "
                        "a sinusoid table, or without RoPE)")
        # The model's own attention for the methods that leave attention alone; eager where the model soft-caps its
        # attention logits (Gemma 2), which SDPA ignores.
        self.own_attention = model.config._attn_implementation
        if getattr(model.config.get_text_config(), "attn_logit_softcapping", None) and self.own_attention == "sdpa":
            self.own_attention = "eager"
        self.lab_attention = _register_attention()
        self.decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        self.head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self._split_checked: Optional[bool] = None

    def plan(self, method: tuple, s: float):
        """The method's reading at scale s and the ropes its rotary modules take ({key: Rope} per match)."""
        from .torch import _config_with_scaling, _plan_of
        name, fragment = method
        reading = _ropekit._lab_method(name, fragment, s, self.l0)
        fragment_json = reading["rope_scaling"]
        ropes = []
        for _, match, config, family in self.matches:
            if fragment_json is None:
                ropes.append(_plan_of(config, family)[0])
            else:
                try:
                    planned = _plan_of(_config_with_scaling(config, fragment_json, self.l0), family)[0]
                except Error as e:
                    raise Error(f"method {name}: {e}") from e
                ropes.append(planned)
        if reading["kind"] == "batched" and fragment and any(
                r.depends_on_length for rs in ropes for r in rs.values()):
            reading["kind"] = "dynamic"  # a length-dependent fragment reads like dyn_ntk (docs/lab.md)
        return reading, ropes

    def install(self, reading: dict, ropes: list, n: int, probe: bool = False) -> Optional[_Reading]:
        """Puts the method's rotary modules in place and returns what lab_attention must do (None: the model's own
        attention)."""
        dynamic = reading["kind"] in ("dynamic", "dynamic_stale")
        fixed = dynamic or reading["kind"] == "restart"  # the plan turned per token in lab_attention
        for (name, match, _, _), rs in zip(self.matches, ropes):
            replacement = match.build(rs, "accurate", follow_length=False if fixed else None, adopt=False)
            parent_name, _, attr = name.rpartition(".")
            parent = self.model.get_submodule(parent_name) if parent_name else self.model
            setattr(parent, attr, replacement.to(self.device))
        needs = probe or reading["window"] or reading["kind"] != "batched" or reading["regimes"] or \
            reading["logn_length"]
        if not needs:
            self.model.set_attn_implementation(self.own_attention)
            return None
        self.model.set_attn_implementation(self.lab_attention)
        return _Reading(window=reading["window"], regimes=reading["regimes"], logn_length=reading["logn_length"],
                        dynamic={"dynamic": "consistent", "dynamic_stale": "stale"}.get(reading["kind"]),
                        trained_length=self.l0, layers=self._layers(ropes, None if fixed else n))

    def _layers(self, ropes: list, length: Optional[int]) -> dict:
        """Layer index → _LayerRotation for every RoPE layer (NoPE layers have none): its RoPE under the method, the
        plan its q and k arrive with (a length-dependent one at `length`, the window's, as the patched module takes
        it; None: the initial plan), and whether the method sets it — every RoPE layer but those with a RoPE of their
        own (the sliding layers of a per-layer-type config: Gemma 3's local layers), as patch's rope_scaling does."""
        from .torch import _per_type_parameters
        positions = ModelPositions.from_config(self.config)
        per_type = _per_type_parameters(self.config)
        out = {}
        method_ropes = ropes[0]
        types = positions.layer_types
        for index in range(positions.num_layers):
            lt = types[index] if index < len(types) else None
            try:
                own = positions.at_layer(index)
            except Error:
                continue  # a NoPE layer
            if own is None:
                continue
            rope = method_ropes.get(lt) if lt in method_ropes else method_ropes.get(None)
            if rope is None:
                continue
            changed = not (per_type and lt == "sliding_attention")
            out[index] = _LayerRotation(rope, self.device, length, changed)
        return out

    def read(self, reading: dict, lab_reading: Optional[_Reading], window: np.ndarray, bos: int, score):
        """One forward over `window` (token ids) under the method installed: positions 0 … n − 1 (restart: from each
        story's BOS, attention within the story), lab_attention's reading set for the call; returns score(ids,
        position_ids) on the model's device."""
        global _READING
        n = len(window)
        position = np.arange(n)
        story, first = _story_index(window, bos)
        if reading["kind"] == "restart":  # each story from position 0, attending within itself, with its own plan
            position = position - first
            lab_reading.story = torch.from_numpy(story).to(self.device)
            ends = np.append(np.flatnonzero(np.diff(story)) + 1, n)  # one past each story's last token
            lab_reading.token_lengths = (ends - np.unique(first))[story]
        if lab_reading is not None:
            lab_reading.story_start = first
        _READING = lab_reading
        try:
            return score(torch.from_numpy(np.ascontiguousarray(window))[None].to(self.device),
                         torch.from_numpy(position)[None].to(self.device))
        finally:
            _READING = None

    @torch.no_grad()
    def argmax(self, ids: torch.Tensor, position_ids: torch.Tensor, first: int) -> np.ndarray:
        """The greedy next token at positions first … n − 1 (float32 logits)."""
        if self._split():
            hidden = self.decoder(input_ids=ids, position_ids=position_ids, use_cache=False).last_hidden_state[0]
            logits = self._logits(hidden[first:])
        else:
            logits = self.model(input_ids=ids, position_ids=position_ids, use_cache=False).logits[0, first:].float()
        return logits.argmax(-1).cpu().numpy()

    @torch.no_grad()
    def nll(self, ids: torch.Tensor, position_ids: torch.Tensor) -> np.ndarray:
        """−log softmax of the float32 logits at every position but the last, for the next token, in float64."""
        n = ids.shape[-1]
        vocab = self.model.config.get_text_config().vocab_size
        targets = ids[0, 1:]
        out = np.empty(n - 1, dtype=np.float64)
        rows = max(1, (1 << 24) // vocab)
        if self._split():
            hidden = self.decoder(input_ids=ids, position_ids=position_ids, use_cache=False).last_hidden_state[0]
            for a in range(0, n - 1, rows):
                b = min(n - 1, a + rows)
                logits = self._logits(hidden[a:b])
                out[a:b] = self._rows(logits, targets[a:b])
        else:
            logits = self.model(input_ids=ids, position_ids=position_ids, use_cache=False).logits[0, : n - 1].float()
            out[:] = self._rows(logits, targets)
        return out

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden).float()
        cfg = self.model.config.get_text_config()
        if getattr(cfg, "logit_scale", None):  # Cohere
            logits = logits * cfg.logit_scale
        if getattr(cfg, "logits_scaling", None):  # Granite
            logits = logits / cfg.logits_scaling
        cap = getattr(cfg, "final_logit_softcapping", None)
        if cap:  # Gemma 2 / 3
            logits = torch.tanh(logits / cap) * cap
        return logits

    @staticmethod
    def _rows(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
        lp = torch.log_softmax(logits.double(), dim=-1)
        return (-lp.gather(1, targets[:, None])[:, 0]).cpu().numpy()

    def _split(self) -> bool:
        """Whether the decoder's hidden states and the output head give the model's own logits (checked once on a
        short input; else every call runs the whole model and keeps all its logits)."""
        if self._split_checked is not None:
            return self._split_checked
        ok = self.decoder is not None and self.head is not None
        if ok:
            ids = torch.arange(1, 9, device=self.device)[None] % self.model.config.get_text_config().vocab_size
            with torch.no_grad():
                want = self.model(input_ids=ids, use_cache=False).logits[0].float()
                got = self._logits(self.decoder(input_ids=ids, use_cache=False).last_hidden_state[0])
            ok = got.shape == want.shape and bool((got - want).abs().max() <= 1e-4 * (1 + want.abs().max()))
        self._split_checked = ok
        return ok

    def restore(self):
        for name, match, _, _ in self.matches:
            parent_name, _, attr = name.rpartition(".")
            parent = self.model.get_submodule(parent_name) if parent_name else self.model
            setattr(parent, attr, match.module)
        self.model.set_attn_implementation(self.own_attention)


def _story_index(tokens: np.ndarray, bos: int):
    """Per position: the index of its story (a BOS starts one) and the first position of its story."""
    starts = (tokens == bos)
    starts[0] = True
    story = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)[story]
    return story, first


def _distributed():
    """(rank, world size) when torch.distributed is initialised (torchrun), else (0, 1)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _plans(lab: "_Lab", parsed: list, lengths: Sequence[int], l0: int, max_n: int) -> dict:
    """Every method at every length resolved before any forward, so that a bad method fails first:
    {(method index, length index): (reading, ropes)}. A regime whose window reaches past every length never acts
    (the method would be orig): an error, by the C++ lab's check."""
    plans = {}
    for mi, method in enumerate(parsed):
        for li, n in enumerate(lengths):
            plans[mi, li] = lab.plan(method, max(1.0, n / l0))
    _ropekit._lab_check_regimes_act(parsed, l0, max_n)
    return plans


def _gather(results: dict, seconds: np.ndarray, world: int):
    """Every rank's {item: value} and per-method seconds, merged on every rank (torch.distributed)."""
    if world == 1:
        return results, seconds
    import torch.distributed as dist
    gathered = [None] * world
    dist.all_gather_object(gathered, (results, seconds.tolist()))
    merged, total = {}, np.zeros(len(seconds))
    for part, secs in gathered:
        merged.update(part)
        total += np.asarray(secs)
    return merged, total


def eval(model, tokens, *, methods="orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,dyn_ntk_stale,llama3,swa,restart",
         lengths: Sequence[int] = (), buckets: Sequence[int] = (), window_size: Optional[int] = None,
         windows: Optional[int] = None, trained_length: Optional[int] = None, bos_id: Optional[int] = None,
         device="cpu", dtype="float32", attention_stats: bool = False,
         progress: Optional[Callable] = None) -> Result:
    """The lab's table for `model` (a path or a loaded transformers causal LM) on `tokens` (ids; the windows start at
    BOS tokens), as `ropekit eval` computes it (docs/lab.md). methods: the C++ lab's list syntax and names (built-ins,
    NAME=JSON fragments, NAME:key=value regimes). trained_length L0: default the config's max_position_embeddings.
    bos_id: default the config's. Under torch.distributed (torchrun) every rank calls it with the same arguments; the
    items (method, N, window) spread over the ranks and every rank returns the whole table. progress(done, total,
    what) is called after each item this rank reads. Errors (ropekit.Error, before any forward): a model transformers
    cannot load, an unknown or malformed method, a method the model cannot take, a length outside [2, window_size],
    buckets that do not increase from 0, no window that fits, token ids outside the vocabulary. attention_stats: the
    attention probe at the largest N (Result.attention, the C++ lab's rows and CSV), from every layer of any model."""
    start_clock = time.perf_counter()
    m = load(model, device=device, dtype=dtype)
    cfg = m.config.get_text_config()
    source = os.fspath(model) if not isinstance(model, torch.nn.Module) else type(model).__name__
    ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        bad = int(np.flatnonzero((ids < 0) | (ids >= cfg.vocab_size))[0])
        raise Error(f"tokens[{bad}] = {ids[bad]}: outside the model's vocabulary [0, {cfg.vocab_size})")
    l0 = trained_length if trained_length is not None else getattr(cfg, "max_position_embeddings", None)
    if l0 is None:
        raise Error(f"{source}: no max_position_embeddings in its config; pass trained_length")
    protocol = _ropekit._lab_protocol(int(l0), window_size, list(lengths), list(buckets))
    l0, window_size = protocol["trained_length"], protocol["window_size"]
    lengths, buckets = protocol["lengths"], protocol["buckets"]
    parsed = parse_methods(methods) if isinstance(methods, str) else [tuple(x) for x in methods]
    bos = bos_id if bos_id is not None else cfg.bos_token_id
    if bos is None:
        raise Error(f"{source}: no bos_token_id in its config; pass bos_id")
    starts = _ropekit._lab_windows(ids.astype(np.int32).tolist(), window_size, windows, int(bos))
    lab = _Lab(m, l0)
    max_n = max(lengths)
    plans = _plans(lab, parsed, lengths, l0, max_n)
    rank, world = _distributed()
    items = [(mi, li, wi) for mi in range(len(parsed)) for li in range(len(lengths)) for wi in range(len(starts))]
    mine = items[rank::world]
    total = sum(lengths[li] for _, li, _ in mine)
    done = 0
    edges = np.asarray(buckets, dtype=np.int64)
    results = {}
    seconds = np.zeros(len(parsed))
    distance = [0, 1, 16] + [int(e) for e in buckets if 16 < e < max_n]
    layers = cfg.num_hidden_layers
    try:
        current = None
        for mi, li, wi in mine:
            clock = time.perf_counter()
            n = lengths[li]
            probing = attention_stats and n == max_n
            if current != (mi, li):
                reading, ropes = plans[mi, li]
                lab_reading = lab.install(reading, ropes, n, probe=probing)
                current = (mi, li)
            probe = _Probe(layers, buckets, distance) if probing else None
            if lab_reading is not None:
                lab_reading.probe = probe
            nll = lab.read(reading, lab_reading, ids[starts[wi]: starts[wi] + n], int(bos), lab.nll)
            targets = np.arange(1, n)
            which = np.searchsorted(edges, targets, side="right") - 1
            sums = np.zeros(len(edges))
            counts = np.zeros(len(edges), dtype=np.int64)
            np.add.at(sums, which, nll)
            np.add.at(counts, which, 1)
            results[mi, li, wi] = (sums, counts, probe)
            seconds[mi] += time.perf_counter() - clock
            done += n
            if progress:
                progress(done, total, f"{parsed[mi][0]} N={n}")
    finally:
        lab.restore()
    results, seconds = _gather(results, seconds, world)
    rows, attention = [], []
    for mi, (name, _) in enumerate(parsed):
        if attention_stats:
            merged = _Probe(layers, buckets, distance)
            for wi in range(len(starts)):  # windows in order
                merged.merge(results[mi, lengths.index(max_n), wi][2])
            attention += merged.rows(name, max_n)
        for li, n in enumerate(lengths):
            s = max(1.0, n / l0)
            sums = np.zeros(len(edges))
            counts = np.zeros(len(edges), dtype=np.int64)
            for wi in range(len(starts)):  # windows in order: the same sums on any number of ranks
                part = results[mi, li, wi]
                sums += part[0]
                counts += part[1]
            for b in range(len(edges)):
                if counts[b] == 0:
                    continue
                mean = sums[b] / counts[b]
                hi = int(edges[b + 1]) if b + 1 < len(edges) else max(window_size, int(edges[b]) + 1)
                rows.append(Row(name, n, s, int(edges[b]), hi, int(counts[b]), float(mean), math.exp(mean)))
    return Result(rows=rows, window_starts=list(starts), trained_length=l0, window_size=window_size,
                  methods=[(a, b) for a, b in parsed], seconds=time.perf_counter() - start_clock,
                  method_seconds=seconds.tolist(), tokens_read=sum(lengths) * len(starts) * len(parsed),
                  model=source, tokens=int(ids.size), attention=attention,
                  distance_edges=distance if attention_stats else [])


# ---------------------------------------------------------------------------------------------------------------
# Passkey retrieval

# The standard task (Mohtashami & Jaggi 2023, as the YaRN and LongLoRA papers run it): a key in a long filler text,
# asked for at the end. The text, the prompt's layout and the keys are the C++ lab's (ropekit/lab.hpp), one definition.
PASSKEY_INTRO = _ropekit._PASSKEY_TEXT["intro"]
PASSKEY_FILLER = _ropekit._PASSKEY_TEXT["filler"]
PASSKEY_NEEDLE = _ropekit._PASSKEY_TEXT["needle"]
PASSKEY_QUESTION = _ropekit._PASSKEY_TEXT["question"]
PASSKEY_CSV_HEADER = "method,length,scale,depth,keys,retrieved,accuracy"


@dataclass
class PasskeyCell:
    """One cell of the passkey grid: a method at a prompt length and needle depth, keys tried and retrieved."""
    method: str
    length: int
    scale: float
    depth: float
    keys: int
    retrieved: int

    @property
    def accuracy(self) -> float:
        return self.retrieved / self.keys


@dataclass
class PasskeyResult(_Written):
    """The length × depth accuracy grid per method (cells method-major, then length, then depth)."""
    cells: list
    trained_length: int
    methods: list
    seconds: float = 0.0
    model: str = ""

    def csv(self) -> str:
        """The C++ lab's CSV (`ropekit passkey --csv`): the same columns, the same number formats."""
        lines = [PASSKEY_CSV_HEADER]
        for c in self.cells:
            lines.append(f"{_field(c.method)},{c.length},{_g(c.scale)},{_g(c.depth)},{c.keys},{c.retrieved},"
                         f"{c.accuracy:.9g}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        """The C++ lab's JSON (`ropekit passkey --json`)."""
        return {"model": self.model, "trained_length": self.trained_length, "seconds": self.seconds,
                "methods": [{"name": n, "fragment": f} for n, f in self.methods],
                "cells": [{"method": c.method, "length": c.length, "scale": c.scale, "depth": c.depth,
                           "keys": c.keys, "retrieved": c.retrieved, "accuracy": c.accuracy} for c in self.cells]}


def _encoder(tokenizer, model):
    """text → ids without BOS, for a ropekit.Tokenizer (or the path of a llama2.c tokenizer.bin), a transformers
    tokenizer, or None (the model directory's own, through AutoTokenizer)."""
    from . import Tokenizer
    if isinstance(tokenizer, (str, os.PathLike)) and str(tokenizer).endswith(".bin"):
        tokenizer = Tokenizer(os.fspath(tokenizer))
    if isinstance(tokenizer, Tokenizer):
        # llama2.c's encoder adds SentencePiece's dummy-prefix space itself.
        return lambda text: list(tokenizer.encode(text[1:] if text.startswith(" ") else text, bos=False))
    if tokenizer is None:
        if isinstance(model, torch.nn.Module):
            raise Error("passkey: pass the tokenizer of a model given as an object")
        try:
            tokenizer = _auto_tokenizer(model)
        except Exception as e:
            raise Error(f"passkey: the model {model} has no tokenizer transformers can load ({e}); pass one") from e
    elif isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = _auto_tokenizer(tokenizer)
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def passkey_prompt(encode: Callable, length: int, depth: float, key: str, bos: int):
    """The prompt of exactly `length` tokens (BOS, the intro, filler with the needle at relative depth `depth` of the
    filler — at the sentence boundary nearest to it —, the question) and the answer's tokens (the key as it continues
    the question), by the C++ lab's passkey_prompt with `encode` (text → ids without BOS). Errors: a length below
    the prompt without filler, a depth outside [0, 1]."""
    prompt, answer = _ropekit._passkey_prompt(lambda text: [int(t) for t in encode(text)], int(length), float(depth),
                                              str(key), int(bos))
    return np.asarray(prompt, dtype=np.int64), np.asarray(answer, dtype=np.int64)


def passkey(model, tokenizer=None, *, methods="orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,llama3",
            lengths: Sequence[int] = (), depths: Optional[Sequence[float]] = None, keys: int = 5,
            seed: int = 0, trained_length: Optional[int] = None, bos_id: Optional[int] = None, device="cpu",
            dtype="float32", progress: Optional[Callable] = None) -> PasskeyResult:
    """Passkey retrieval per method on a length × depth grid: `keys` 5-digit keys per cell (the same keys for every
    method, and the C++ lab's: splitmix64 from `seed`), each hidden at relative depth d of a filler text of `length`
    tokens (passkey_prompt), greedy decoding, exact match. The greedy answer is scored in one teacher-forced forward:
    the key is retrieved iff each of its tokens is the argmax of the float32 logits given the prompt and the key's
    tokens before it — exactly the greedy decoder's exact-match outcome when the key's tokenization is the one it
    produces. lengths: default L0/2, L0, 2·L0, 4·L0; depths: default 0 … 1 in quarters (the C++ lab's defaults); the
    method's scale at a length L is s = max(1, L / L0). Methods, devices, torchrun: as eval. Errors (before any
    forward): a length below the prompt's own, a depth outside [0, 1], keys < 1, and eval's."""
    start_clock = time.perf_counter()
    if keys < 1:
        raise Error(f"keys = {keys}: must be >= 1")
    m = load(model, device=device, dtype=dtype)
    cfg = m.config.get_text_config()
    source = os.fspath(model) if not isinstance(model, torch.nn.Module) else type(model).__name__
    encode = _encoder(tokenizer, model)
    l0 = trained_length if trained_length is not None else getattr(cfg, "max_position_embeddings", None)
    if l0 is None or l0 < 2:
        raise Error(f"trained_length = {l0}: pass the model's trained length (>= 2)")
    lengths = list(lengths) or list(_ropekit._passkey_lengths(l0))
    depths = list(depths) if depths is not None else list(_ropekit._PASSKEY_DEPTHS)
    bos = bos_id if bos_id is not None else cfg.bos_token_id
    if bos is None:
        raise Error(f"{source}: no bos_token_id in its config; pass bos_id")
    parsed = parse_methods(methods) if isinstance(methods, str) else [tuple(x) for x in methods]
    key_text = iter(_ropekit._passkey_keys(seed, len(lengths) * len(depths) * keys))  # the C++ lab's keys, in order
    prompts = {(li, di, ki): passkey_prompt(encode, n, d, next(key_text), int(bos))
               for li, n in enumerate(lengths) for di, d in enumerate(depths) for ki in range(keys)}
    for prompt, answer in prompts.values():
        if int(max(prompt.max(), answer.max())) >= cfg.vocab_size:
            raise Error(f"passkey: the tokenizer gives ids past the model's vocabulary ({cfg.vocab_size})")
    lab = _Lab(m, l0)
    plans = _plans(lab, parsed, lengths, l0, max(lengths))
    rank, world = _distributed()
    items = [(mi, li, di, ki) for mi in range(len(parsed)) for li in range(len(lengths)) for di in range(len(depths))
             for ki in range(keys)]
    mine = items[rank::world]
    results, seconds = {}, np.zeros(len(parsed))
    done, total = 0, sum(lengths[li] for _, li, _, _ in mine)
    try:
        current = None
        for mi, li, di, ki in mine:
            clock = time.perf_counter()
            reading, ropes = plans[mi, li]
            if current != (mi, li):
                lab_reading = lab.install(reading, ropes, lengths[li])
                current = (mi, li)
            prompt, answer = prompts[li, di, ki]
            window = np.concatenate((prompt, answer))
            first = len(prompt) - 1
            got = lab.read(reading, lab_reading, window, int(bos),
                           lambda ids, pos: lab.argmax(ids, pos, first)[: len(answer)])
            results[mi, li, di, ki] = bool(np.array_equal(got, answer))
            seconds[mi] += time.perf_counter() - clock
            done += lengths[li]
            if progress:
                progress(done, total, f"passkey {parsed[mi][0]} L={lengths[li]}")
    finally:
        lab.restore()
    results, seconds = _gather(results, seconds, world)
    cells = []
    for mi, (name, _) in enumerate(parsed):
        for li, n in enumerate(lengths):
            for di, d in enumerate(depths):
                hit = sum(results[mi, li, di, ki] for ki in range(keys))
                cells.append(PasskeyCell(name, n, max(1.0, n / l0), float(d), keys, int(hit)))
    return PasskeyResult(cells=cells, trained_length=l0, methods=list(parsed),
                         seconds=time.perf_counter() - start_clock, model=source)


def chart(result, svg, *, title: str = "", cli: Optional[str] = None) -> None:
    """Draws a Result (PPL by target position at the largest N) or a PasskeyResult (one accuracy grid per method) to
    `svg` with the C++ lab's charts: `ropekit chart` on the result's CSV, so both labs' charts look the same. cli: the
    `ropekit` executable (default $ROPEKIT_CLI, else `ropekit` on PATH). Errors: no such executable, a chart it
    could not draw (its message)."""
    import shutil
    import subprocess
    import tempfile
    exe = cli or os.environ.get("ROPEKIT_CLI") or shutil.which("ropekit")
    if not exe or not os.path.exists(exe):
        raise Error(f"--svg {svg}: drawing needs the ropekit command line (build it with the README's command and put "
                    "it on PATH, or set ROPEKIT_CLI); the CSV has the numbers")
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = os.path.join(tmp, "lab.csv")
        result.write_csv(csv_path)
        cmd = [exe, "chart", "--csv", csv_path, "--svg", os.fspath(svg), "--title", title or result.model or "lab",
               "--trained-length", str(result.trained_length)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise Error(f"--svg {svg}: {done.stderr.strip() or done.stdout.strip()}")


# ---------------------------------------------------------------------------------------------------------------
# The command line


class _Progress:
    """A line on stderr after each item: tokens read, the rate, and the time left at that rate."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.start = time.perf_counter()

    def __call__(self, done, total, what):
        elapsed = time.perf_counter() - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        end = "\n" if done >= total or not self.stream.isatty() else "\r"
        self.stream.write(f"{what}: {done}/{total} positions, {rate:.0f}/s, ETA {eta:.0f} s{' ' * 8}{end}")
        self.stream.flush()


def _read_tokens(args) -> np.ndarray:
    if args.tokens:
        try:
            return np.fromfile(args.tokens, dtype="<i4")
        except OSError as e:
            raise Error(f"--tokens {args.tokens}: {e.strerror}") from e
    try:
        text = open(args.text, encoding="utf-8").read()
    except OSError as e:
        raise Error(f"--text {args.text}: {e.strerror}") from e
    if args.tokenizer:
        from . import Tokenizer
        tok = Tokenizer(args.tokenizer)
        return np.asarray(tok.encode_stories(text) if args.stories else tok.encode(text), dtype=np.int64)
    try:
        tok = _auto_tokenizer(args.model)
    except Exception as e:
        raise Error(f"--text: the model {args.model} has no tokenizer transformers can load ({e}); pass --tokens or "
                    "--tokenizer") from e
    ids = tok(text)["input_ids"]
    if tok.bos_token_id is not None and (not ids or ids[0] != tok.bos_token_id):
        ids = [tok.bos_token_id] + ids
    return np.asarray(ids, dtype=np.int64)


def _ints(text: Optional[str], what: str) -> list:
    if not text:
        return []
    try:
        return [int(x) for x in text.split(",")]
    except ValueError as e:
        raise Error(f"{what} = {text}: a comma-separated list of integers") from e


def main(argv=None) -> int:
    """`python -m ropekit.lab eval|passkey ...`: the lab on any transformers model (argv: the arguments, None:
    sys.argv's); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m ropekit.lab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="perplexity by target position per method (docs/lab.md's protocol)")
    ev.add_argument("--model", required=True, help="a Hugging Face model directory or a GGUF file")
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="int32 token ids (little-endian), as `ropekit tokenize` writes them")
    src.add_argument("--text", help="a UTF-8 text file, tokenized with --tokenizer or the model's own tokenizer")
    ev.add_argument("--tokenizer", help="with --text: a llama2.c tokenizer.bin")
    ev.add_argument("--stories", action="store_true",
                    help="with --tokenizer: each story (split at <|endoftext|>) from a BOS, as `ropekit tokenize`")
    ev.add_argument("--methods", default="orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,dyn_ntk_stale,llama3,swa,restart")
    ev.add_argument("--lengths", help="N values (default L0/2, L0, 2·L0, 4·L0, 8·L0)")
    ev.add_argument("--buckets", help="bucket edges of target position (default 0, L0/2, L0, 2·L0, 4·L0, 8·L0)")
    ev.add_argument("--window-size", type=int)
    ev.add_argument("--windows", type=int)
    ev.add_argument("--trained-length", type=int)
    ev.add_argument("--bos-id", type=int)
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ev.add_argument("--threads", type=int, help="CPU threads for PyTorch")
    ev.add_argument("--csv")
    ev.add_argument("--json")
    ev.add_argument("--svg", help="the chart, drawn by `ropekit chart` as `ropekit eval --svg` draws it")
    ev.add_argument("--attention-stats", help="the attention probe at the largest N, as a CSV (the C++ lab's)")
    pk = sub.add_parser("passkey", help="passkey retrieval per method on a length × depth grid")
    pk.add_argument("--model", required=True, help="a Hugging Face model directory or a GGUF file")
    pk.add_argument("--tokenizer", help="a llama2.c tokenizer.bin or a transformers tokenizer directory "
                                        "(default: the model's own)")
    pk.add_argument("--methods", default="orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,llama3")
    pk.add_argument("--lengths", help="prompt lengths in tokens (default L0/2, L0, 2·L0, 4·L0)")
    pk.add_argument("--depths", help="relative depths of the key in the filler (default 0,0.25,0.5,0.75,1)")
    pk.add_argument("--keys", type=int, default=5, help="keys per (length, depth) cell")
    pk.add_argument("--seed", type=int, default=0)
    for p in (pk,):
        p.add_argument("--trained-length", type=int)
        p.add_argument("--bos-id", type=int)
        p.add_argument("--device", default="cpu")
        p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
        p.add_argument("--threads", type=int, help="CPU threads for PyTorch")
        p.add_argument("--csv")
        p.add_argument("--json")
        p.add_argument("--svg", help="the grids, drawn by `ropekit chart` as `ropekit passkey --svg` draws them")
    args = parser.parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    try:
        if args.threads:
            torch.set_num_threads(args.threads)
        if distributed:
            import datetime
            import torch.distributed as dist
            backend = "nccl" if str(args.device).startswith("cuda") else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
                args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
        if args.command == "eval":
            tokens = _read_tokens(args)
            result = eval(args.model, tokens, methods=args.methods, lengths=_ints(args.lengths, "--lengths"),
                          buckets=_ints(args.buckets, "--buckets"), window_size=args.window_size,
                          windows=args.windows, trained_length=args.trained_length, bos_id=args.bos_id,
                          device=args.device, dtype=args.dtype, attention_stats=bool(args.attention_stats),
                          progress=_Progress())
        else:
            try:
                depths = [float(x) for x in args.depths.split(",")] if args.depths else None
            except ValueError as e:
                raise Error(f"--depths = {args.depths}: a comma-separated list of numbers") from e
            result = passkey(args.model, args.tokenizer, methods=args.methods,
                             lengths=_ints(args.lengths, "--lengths"), depths=depths, keys=args.keys, seed=args.seed,
                             trained_length=args.trained_length, bos_id=args.bos_id, device=args.device,
                             dtype=args.dtype, progress=_Progress())
        rank, _ = _distributed()
        if rank == 0:
            if args.command == "eval":
                _print_table(result)
            else:
                _print_grid(result)
            if args.csv:
                result.write_csv(args.csv)
            if getattr(args, "attention_stats", None):
                with open(args.attention_stats, "w") as f:
                    f.write(result.attention_csv())
            if args.svg:
                chart(result, args.svg, title=os.path.basename(os.path.normpath(args.model)))
            if args.json:
                result.write_json(args.json)
    except Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if distributed:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
    return 0


def _print_grid(result: PasskeyResult) -> None:
    """Accuracy per method: rows lengths, columns depths."""
    depths = sorted({c.depth for c in result.cells})
    for name, _ in result.methods:
        print(f"\n{name}: passkey accuracy (rows: length in tokens; columns: depth; L0 = {result.trained_length})")
        print("| length | " + " | ".join(f"{d:g}" for d in depths) + " |")
        print("|---:|" + "---:|" * len(depths))
        for n in sorted({c.length for c in result.cells}):
            cells = {c.depth: c for c in result.cells if c.method == name and c.length == n}
            print(f"| {n} | " + " | ".join(f"{cells[d].retrieved}/{cells[d].keys}" for d in depths) + " |")
    print(f"\n{result.seconds:.1f} s")


def _print_table(result: Result) -> None:
    """PPL by target position, one table per N (the C++ lab's layout)."""
    by_n = {}
    for r in result.rows:
        by_n.setdefault(r.n, []).append(r)
    print(f"windows {len(result.window_starts)} of {result.window_size} (starts "
          f"{', '.join(map(str, result.window_starts))}); L0 = {result.trained_length}")
    for n, rows in by_n.items():
        cols = sorted({(r.bucket_lo, r.bucket_hi) for r in rows})
        print(f"\nN = {n} (s = {_g(max(1.0, n / result.trained_length))}): PPL by target position")
        print("| method | " + " | ".join(f"{lo}–{min(hi, n)}" for lo, hi in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for name, _ in result.methods:
            cells = {(r.bucket_lo, r.bucket_hi): r.ppl for r in rows if r.method == name}
            print(f"| {name} | " + " | ".join(f"{cells[c]:.3f}" if c in cells else "" for c in cols) + " |")
    print(f"\n{result.tokens_read} model positions in {result.seconds:.2f} s; seconds per method: " +
          ", ".join(f"{n} {s:.1f}" for (n, _), s in zip(result.methods, result.method_seconds)))


if __name__ == "__main__":
    sys.exit(main())
