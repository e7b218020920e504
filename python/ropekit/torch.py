"""ropekit for PyTorch: autograd through the fused kernel, and Hugging Face's rotary interfaces.

    from ropekit.torch import RotaryEmbedding, apply_rotary, apply_rotary_pos_emb

    rotary = RotaryEmbedding("config.json")             # like LlamaRotaryEmbedding(config)
    cos, sin = rotary(x, position_ids)                  # accurate angles (angles="hf": HF's bits)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)         # HF's signature and expression

    q, k = apply_rotary(rotary.rope, q, k, position_ids, layout="bhsd")   # the fused kernel, with autograd

Numerics: docs/python.md. apply_rotary is ropekit's kernel (ropekit/call.hpp's contract: float32
arithmetic, one rounding to storage); its backward is the kernel's Backward direction (the transpose of
the forward rotation, magnitude included), so gradients of q and k are exact to the same contract.
"""
from __future__ import annotations

import copy
import json
import os
from typing import Any, Optional, Sequence, Tuple, Union, overload

import numpy as np
import torch

from ._autograd import dense_grads, transposed
from ._ropekit import Error, ModelPositions, Rope, RopeSet, needs_rerotation

try:  # the torch.library operators (PyTorch >= 2.4); Debian's 1.13 keeps the NumPy path
    from . import ops as _ops
except ImportError:
    _ops = None

__all__ = [
    "RotaryFunction", "apply_rotary", "RotaryEmbedding", "rotate_half", "apply_rotary_pos_emb",
    "apply_multimodal_rotary_pos_emb", "patch",
]


class RotaryFunction(torch.autograd.Function):
    """Forward: q, k rotated by `rope` at `positions` (new tensors). Backward: the gradients rotated by
    the Backward direction (R(−θ) with the forward magnitude), which is the forward's transpose.

    apply_rotary's path where PyTorch has no torch.library operators (< 2.4); with them it differentiates
    through ropekit::rotate, whose backward is the same transpose rotation (ropekit.ops)."""

    @staticmethod
    def forward(ctx, rope: Rope, positions, layout: str, angles: str, q: torch.Tensor, k: Optional[torch.Tensor]):
        ctx.rope, ctx.positions, ctx.layout, ctx.angles = rope, positions, layout, angles
        ctx.like = ((q.shape, q.dtype, q.device), (k.shape, k.dtype, k.device) if k is not None else None)
        out = rope.apply(q, k, positions, layout=layout, inplace=False, angles=angles)
        return out if k is not None else (out, None)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        if ctx.needs_input_grad[4] is False and ctx.needs_input_grad[5] is False:
            return None, None, None, None, None, None
        # The one backward rule (ropekit/_autograd.py), applied in place on the dense copies.
        gq, gk = dense_grads(torch, (grad_q, grad_k), *ctx.like)
        ctx.rope.apply(gq, gk, ctx.positions, layout=ctx.layout, direction=transposed("forward"), angles=ctx.angles)
        return None, None, None, None, gq, gk


# What positions may be: a tensor, an array or a sequence of ints (None: 0 … seq−1).
Positions = Union[torch.Tensor, np.ndarray, Sequence[int], None]


@overload
def apply_rotary(rope: Rope, q: torch.Tensor, k: None = None, positions: Positions = None, *, layout: str = "bshd",
                 angles: str = "accurate") -> torch.Tensor: ...


@overload
def apply_rotary(rope: Rope, q: torch.Tensor, k: torch.Tensor, positions: Positions = None, *, layout: str = "bshd",
                 angles: str = "accurate") -> Tuple[torch.Tensor, torch.Tensor]: ...


def apply_rotary(rope: Rope, q: torch.Tensor, k: Optional[torch.Tensor] = None, positions: Positions = None, *,
                 layout: str = "bshd",
                 angles: str = "accurate") -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """q (and k) rotated by ropekit's kernel with autograd: returns new tensors (q', k') or q'.

    layout: "bshd" [batch, seq, heads, head_dim] (flash-attn), "bhsd" [batch, heads, seq, head_dim]
    (Hugging Face after transpose) or "thd" [tokens, heads, head_dim] (packed, FlashInfer).
    positions: int32/int64, [batch, seq], [1, seq] or [seq] (M-RoPE: a leading 3); None = 0 … seq−1.
    """
    if isinstance(positions, torch.Tensor):
        positions = positions.detach()
    if _ops is not None:
        # The operator, whose autograd is the transpose rotation (one backward for both): positions as a tensor, for
        # CUDA tensors placed as Rope.apply places them (on q's device, a broadcast expanded: ropekit/_cuda.py).
        h = _ops.handle(rope)
        if q.is_cuda:
            from . import _cuda
            batch, seq = _cuda._tokens(q, layout)
            positions = _cuda._positions(torch, positions, batch, seq, _ops._SHAPES[h][1], q.device)
        elif positions is not None and not isinstance(positions, torch.Tensor):
            positions = torch.as_tensor(np.asarray(positions))
        out = _ops.rotate(q, k, positions, h, layout, "forward", angles)
        return (out[0], out[1]) if k is not None else out[0]
    q_out, k_out = RotaryFunction.apply(rope, positions, layout, angles, q, k)
    return (q_out, k_out) if k is not None else q_out


def _rope_of(config, layer_type: Optional[str], pairing: Optional[str]) -> Rope:
    if isinstance(config, Rope):
        return config
    if isinstance(config, str) and not os.path.exists(config) and not config.endswith(".json"):
        model = ModelPositions.from_preset(config)
    else:
        model = ModelPositions.from_config(config, pairing=pairing)
    return model.layer(layer_type)


class RotaryEmbedding(torch.nn.Module):
    """Hugging Face's rotary module (LlamaRotaryEmbedding and kin): forward(x, position_ids) → (cos, sin)
    of shape [batch, seq, rotary_dim] in x's dtype and device, magnitude (attention_scaling) included.

    config: a config.json path or dict, a preset name, or a ropekit.Rope. layer_type picks one layer type
    of a per-layer model (Gemma 3's "sliding_attention", ...). angles="accurate" (default): cos/sin of the
    exact angle, correctly rounded (ropekit's table). angles="hf": Hugging Face's own float32 expression
    (inv_freq @ position_ids, cos, × attention_scaling) on ropekit's inv_freq — HF's bits wherever the
    inv_freq is HF's (golden vectors: 22 539 of 22 800 values bit-identical, the rest within 2 ulp).
    M-RoPE (Qwen2-VL/2.5-VL sections): position_ids [3, batch, seq] give cos/sin [3, batch, seq, dim] for
    apply_multimodal_rotary_pos_emb; Qwen3-VL's interleaved layout returns the selected [batch, seq, dim].
    Length-dependent variants decide their plan per call as Hugging Face's dynamic_rope_update does, from
    max(position_ids) + 1 (LongRoPE: long factors past original_max_position_embeddings; dynamic NTK: grown
    to the longest call past max_position_embeddings, reset by a shorter call); follow_length=False keeps the
    plan fixed between set_current_length calls. Each plan is an immutable Rope of one ropekit.RopeSet: the module
    switches `rope` to the set's Rope for the new length and never changes a Rope in place.
    """

    def __init__(self, config: Union[str, os.PathLike[str], dict[str, Any], Rope], *, layer_type: Optional[str] = None,
                 angles: str = "accurate", pairing: Optional[str] = None,
                 device: Union[torch.device, str, None] = None, follow_length: bool = True) -> None:
        super().__init__()
        if angles not in ("accurate", "hf"):
            raise Error(f'angles = "{angles}": must be "accurate" or "hf"')
        self.rope = _rope_of(config, layer_type, pairing)
        self.angles = angles
        self.attention_scaling = self.rope.cos_sin_scale
        self._spec = self.rope.spec  # every Rope of the set has this spec (a length changes the plan only)
        self._set = RopeSet(self.rope) if self.rope.depends_on_length else None
        self._handle = _ops.handle(self.rope) if _ops is not None else None  # outside forward: traced code
        self.register_buffer("inv_freq", torch.from_numpy(self.rope.inv_freq).to(device), persistent=False)
        # Length-dependent plans follow Hugging Face's dynamic_rope_update unless follow_length=False (then only
        # set_current_length changes them): LongRoPE takes the long factors when max(position_ids) + 1 exceeds
        # original_max_position_embeddings; dynamic NTK grows with the longest call seen past
        # max_position_embeddings and resets when a call is shorter than it.
        self._follow = follow_length and self.rope.depends_on_length
        scaling = self.rope.spec["rope_scaling"] or {}
        self._original = scaling.get("original_max_position_embeddings") or scaling.get("max_position_embeddings")
        self._cached = self._original

    def set_current_length(self, length: int) -> bool:
        """Takes the plan for `length` (dynamic NTK, LongRoPE): `rope` becomes the RopeSet's Rope for it (the Rope
        held before is unchanged). True when keys cached under the previous plan need re-rotation."""
        if self._set is None:  # a plan that ignores the length
            return False
        before = self.rope
        self.rope = self._set.at(length)
        if self.rope is before:
            return False
        if _ops is not None:
            self._handle = _ops.handle(self.rope)
        self.inv_freq = torch.from_numpy(self.rope.inv_freq).to(self.inv_freq.device)
        self.attention_scaling = self.rope.cos_sin_scale
        return needs_rerotation(before, self.rope)

    def _hf(self, position_ids: torch.Tensor):
        lead = position_ids.shape[:-1]
        pos = position_ids.reshape(-1, 1, position_ids.shape[-1]).float().cpu()
        inv = self.inv_freq.cpu()[None, :, None].float().expand(pos.shape[0], -1, 1)
        freqs = (inv @ pos).transpose(1, 2).reshape(*lead, position_ids.shape[-1], -1)
        sections = self._spec["mrope_section"]
        if self._spec.get("mrope_interleaved") and sections is not None and position_ids.dim() == 3:
            # Qwen3-VL's apply_interleaved_mrope: pair j takes stream h where j % 3 == 1 and j < 3·section[1], stream w
            # where j % 3 == 2 and j < 3·section[2], else t (the module returns the selected [batch, seq, dim]).
            selected = freqs[0].clone()
            for axis, offset in ((1, 1), (2, 2)):
                pick = slice(offset, sections[axis] * 3, 3)
                selected[..., pick] = freqs[axis, ..., pick]
            freqs, lead = selected, lead[1:]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
        return cos.reshape(*lead, -1, cos.shape[-1]), sin.reshape(*lead, -1, sin.shape[-1])

    def _accurate(self, position_ids: torch.Tensor):
        spec = self._spec
        if _ops is not None:
            # Through the operator: no graph break under torch.compile (a NumPy round trip would be one).
            h = self._handle
            pos = position_ids.cpu()
            if spec["mrope_section"] is not None and not spec["mrope_interleaved"]:
                outs = [_ops.cos_sin(torch.stack([pos[a]] * 3), h, "accurate") for a in range(3)]
                return torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])
            return _ops.cos_sin(pos, h, "accurate")
        pos = position_ids.detach().cpu().numpy()
        if spec["mrope_section"] is not None and not spec["mrope_interleaved"]:
            # Each stream's own cos/sin (Qwen2-VL's module output): all three streams at stream a.
            outs = [self.rope.cos_sin(np.stack([pos[a]] * 3), layout="hf") for a in range(3)]
            return np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs])
        return self.rope.cos_sin(pos, layout="hf")

    def _follow_hf_length(self, position_ids: torch.Tensor):
        seq_len = int(position_ids.max()) + 1
        if self.rope.rope_type == "longrope":
            if self._cached is None or (seq_len > self._original) != (self._cached > self._original):
                self.set_current_length(seq_len)
                self._cached = seq_len
        elif seq_len > self._cached:  # dynamic NTK: growth
            self.set_current_length(seq_len)
            self._cached = seq_len
        elif seq_len < self._original < self._cached:  # back below the trained length: the original plan
            self.set_current_length(self._original)
            self._cached = self._original

    @torch.no_grad()
    def complex_frequencies(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Llama 4's form of the same angles: freqs_cis = polar(1, position × inv_freq) · attention_scaling, complex64
        [batch, seq, rotary_dim / 2] on x's device. angles="hf": Hugging Face's float32 expression (torch.polar of
        inv_freq @ position_ids); "accurate": cos + i·sin of the exact angles, correctly rounded, times the scale."""
        if self._follow and position_ids.numel() > 0:
            self._follow_hf_length(position_ids)
        if self.angles == "hf":
            pos = position_ids[:, None, :].float().cpu()
            inv = self.inv_freq.cpu()[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            freqs = (inv @ pos).transpose(1, 2)
            out = torch.polar(torch.ones_like(freqs), freqs) * self.attention_scaling
        else:
            cos, sin = (torch.as_tensor(a) for a in self._accurate(position_ids))
            half = cos.shape[-1] // 2
            out = torch.complex(cos[..., :half].float(), sin[..., :half].float())
        return out.to(x.device)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if self._follow and position_ids.numel() > 0:
            self._follow_hf_length(position_ids)
        if self.angles == "hf":
            cos, sin = self._hf(position_ids)
        else:
            cos, sin = (torch.as_tensor(a) for a in self._accurate(position_ids))
        return cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's rotate_half: [-x2, x1] for x = [x1, x2]."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    rd = cos.shape[-1]
    if rd == x.shape[-1]:
        return (x * cos) + (rotate_half(x) * sin)
    rot, rest = x[..., :rd], x[..., rd:]  # partial rotary (GPT-NeoX, Phi, GLM): the tail passes through
    return torch.cat(((rot * cos) + (rotate_half(rot) * sin), rest), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         position_ids=None, unsqueeze_dim: int = 1):
    """Hugging Face's apply_rotary_pos_emb, same signature and expression (q·cos + rotate_half(q)·sin,
    differentiable by autograd), with partial rotary handled as GPT-NeoX/Phi do (cos narrower than the
    head: the tail passes through). position_ids is ignored, as in HF. Use it with RotaryEmbedding's
    cos/sin to swap the angles under an HF model; use apply_rotary for ropekit's fused kernel."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def apply_multimodal_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                                    mrope_section: Sequence[int], unsqueeze_dim: int = 1):
    """Qwen2-VL's apply_multimodal_rotary_pos_emb: cos/sin [3, batch, seq, dim] (one per stream t, h, w),
    sections in pairs; the chunks of each half take their stream in turn, then HF's rotation."""
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


class _PatchedRotary(torch.nn.Module):
    """Stands in for a Hugging Face model's rotary module: forward(x, position_ids[, layer_type]) → what the module it
    replaced returned — (cos, sin) in its lane layout, or complex freqs_cis (Llama 4) — from ropekit's plan: one
    RotaryEmbedding per RoPE layer type (Gemma 3's sliding and full layers).

    layout: "half" — cos/sin as cat(f, f) over the rotary width (rotate_half models, and the ones that de-interleave
    their weights or split cos in attention); "interleaved" — repeat_interleave(f, 2) (Cohere: GPT-J pairs rotated with
    cos/sin already interleaved); "pairs" — f once per pair (GPT-OSS); "complex" — polar(1, f) · scale over the pairs
    (Llama 4's freqs_cis)."""

    def __init__(self, by_type: dict, layout: str, angles: str, original: torch.nn.Module,
                 passthrough: Sequence[str] = ()):
        super().__init__()
        self.layout = layout
        self.angles = angles
        self.by_type = torch.nn.ModuleDict(by_type)
        # Layer types served by the module replaced, unchanged: rope parameter sets no layer of the model reads.
        self.passthrough = tuple(passthrough)
        if self.passthrough:
            self.original = original
        # The module replaced, for patching again (not a submodule: its buffers are not the model's any more).
        object.__setattr__(self, "replaced", original)
        # What HF code may read off the module it replaced.
        for attr in ("rope_type", "max_seq_len_cached", "original_max_seq_len", "config", "layer_types",
                     "mrope_section"):
            if hasattr(original, attr):
                setattr(self, attr, getattr(original, attr))

    def _rotary(self, layer_type: Optional[str]) -> RotaryEmbedding:
        if layer_type is not None and layer_type in self.by_type:
            return self.by_type[layer_type]
        distinct = {id(r.rope): r for r in self.by_type.values()}
        if len(distinct) == 1:  # one RoPE serves every layer type the model asks for
            return next(iter(distinct.values()))
        if layer_type is None:
            raise Error(f"layer_type: the model has RoPE layer types {', '.join(self.by_type)}; pass one")
        raise Error(f'layer_type = "{layer_type}": the model\'s RoPE layer types are {", ".join(self.by_type)}')

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: Optional[str] = None):
        if layer_type is not None and layer_type in self.passthrough:
            return self.original(x, position_ids, layer_type)
        rotary = self._rotary(layer_type)
        if self.layout == "complex":
            return rotary.complex_frequencies(x, position_ids)
        return _in_layout(*rotary(x, position_ids), self.layout, rotary.rope.spec["mrope_section"])


def _takes_layer_type(module: torch.nn.Module) -> bool:
    import inspect
    try:
        return "layer_type" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def _probe_positions(rope: Rope, n: int) -> torch.Tensor:
    """Positions 0 … n−1 for one sequence; M-RoPE: three distinct streams (t, h, w), as the text models take them."""
    t = torch.arange(n)
    if rope.spec["mrope_section"] is None:
        return t[None]
    return torch.stack([t, t // 2, t % 3])[:, None, :]


_LAYOUTS = ("half", "interleaved", "pairs")


def _select_sections(x: torch.Tensor, sections: Sequence[int]) -> torch.Tensor:
    """[3, ..., dim] per-stream cos or sin (cat layout) → [..., dim] with each M-RoPE section from its stream, as
    Qwen2-VL's apply_multimodal_rotary_pos_emb selects them (GLM-4V's rotary module does the same on the pairs)."""
    return torch.cat([m[i % 3] for i, m in enumerate(x.split(list(sections) * 2, dim=-1))], dim=-1)


def _in_layout(cos: torch.Tensor, sin: torch.Tensor, layout: str, sections: Optional[Sequence[int]] = None):
    """cos/sin from HF's cat(f, f) layout into a rotary module's: "half" as they are; "interleaved" repeat_interleave(f,
    2) (Cohere); "pairs" one value per pair, f alone (GPT-OSS); "selected-…": M-RoPE streams already selected by
    section (GLM-4V), then one of those."""
    if layout.startswith("selected-"):
        cos, sin, layout = _select_sections(cos, sections), _select_sections(sin, sections), layout[len("selected-"):]
    if layout == "half":
        return cos, sin
    half = cos.shape[-1] // 2
    if layout == "pairs":
        return cos[..., :half], sin[..., :half]
    return cos[..., :half].repeat_interleave(2, dim=-1), sin[..., :half].repeat_interleave(2, dim=-1)


def _difference(got, want) -> float:
    """The largest |difference| between what a rotary module returned and a candidate, inf where the shapes differ."""
    if isinstance(got, torch.Tensor):
        got = (got,)
    if isinstance(want, torch.Tensor):
        want = (want,)
    if not isinstance(got, (tuple, list)) or len(got) != len(want):
        return float("inf")
    worst = 0.0
    for g, w in zip(got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.is_complex() != w.is_complex():
            return float("inf")
        worst = max(worst, float((g.detach().cpu().to(w.dtype) - w).abs().max()) if g.numel() else 0.0)
    return worst


def _match_module(name: str, module: torch.nn.Module, ropes: dict, layer_types: Sequence[str], unread: Sequence[str],
                  angles: str) -> "_Match":
    """Which of ropekit's RoPEs a model's rotary module computes, for each layer type it serves, and its output's lane
    layout: the module and ropekit's plan are run side by side on a short probe (positions below every length switch,
    so dynamic NTK and LongRoPE keep their state), and the module is replaced only where they agree — a layout, plan or
    scale ropekit does not reproduce is refused, never patched silently wrong."""
    takes_type = _takes_layer_type(module)
    types = list(dict.fromkeys(layer_types)) if takes_type else [None]
    if takes_type and not types:
        types = list(ropes)
    candidates = {}
    for key, rope in ropes.items():
        candidates.setdefault(id(rope), (key, rope))
    device = next((b.device for b in module.buffers()), torch.device("cpu"))
    x = torch.zeros(1, 1, 8, device=device)
    by_type, layout, report, passthrough = {}, None, [], []
    for lt in types:
        if lt in unread:  # a parameter set no layer reads: the module's own values, which no logit depends on
            passthrough.append(lt)
            continue
        best, served = None, False
        for key, rope in candidates.values():
            hf = RotaryEmbedding(rope, angles="hf", follow_length=False)
            n = max(2, min(8, int(hf._original or 8)))
            pos = _probe_positions(rope, n).to(device)
            try:
                out = module(x, pos, lt) if takes_type else module(x, pos)
            except Exception:  # a layer type this module does not serve (e.g. a NoPE layer type)
                continue
            served = True
            cos, sin = hf(x.cpu(), pos.cpu())
            layouts = list(_LAYOUTS)
            sections = rope.spec["mrope_section"]
            if sections is not None and cos.dim() == 4:  # per-stream cos/sin: the module may select them itself
                layouts += [f"selected-{lay}" for lay in _LAYOUTS]
            options = [(lay, _in_layout(cos, sin, lay, sections)) for lay in layouts]
            options.append(("complex", hf.complex_frequencies(x.cpu(), pos.cpu())))
            for lay, want in options:
                d = _difference(out, want)
                scale = max(1.0, abs(rope.cos_sin_scale))
                if d <= 1e-5 * scale and (best is None or d < best[0]):
                    best = (d, lay, key, rope)
            report.append(f"{lt or 'the module'} vs {key or 'the model'}'s RoPE: "
                          f"{min(_difference(out, w) for _, w in options):.3g}")
        if best is None:
            if served:  # the module computes this layer type's cos/sin and no RoPE of the plan gives them
                raise Error(f"patch: {name} ({type(module).__name__}) computes cos/sin that none of ropekit's RoPEs "
                            f"for this config reproduces ({'; '.join(report)}): not patched — ropekit's model table "
                            "may be wrong for this model (please report it); ropekit.torch.RotaryEmbedding(config) "
                            "gives ropekit's plan")
            continue
        if layout is not None and best[1] != layout:
            raise Error(f"patch: {name} returns cos/sin in two layouts ({layout}, {best[1]}); not patched")
        layout = best[1]
        by_type[lt or best[2] or "default"] = best[2]
    if not by_type:
        raise Error(f"patch: {name} ({type(module).__name__}) could not be called on a probe of {len(types)} layer "
                    "type(s) with positions 0 … 7: not patched")
    return _Match(name, module, by_type, layout, passthrough, _follows_length(module))


class _Match:
    """What the probe found a model's rotary module computes: for each layer type it serves, the key of the RoPE in
    the model's plan ({layer type or None: Rope}) it equals, its output's lane layout, the layer types it passes
    through, and whether it follows the length."""

    def __init__(self, name, module, keys: dict, layout: str, passthrough: Sequence[str], follows: bool):
        self.name, self.module, self.keys, self.layout = name, module, keys, layout
        self.passthrough, self.follows = list(passthrough), follows

    def build(self, ropes: dict, angles: str, follow_length: Optional[bool] = None,
              adopt: bool = True) -> "_PatchedRotary":
        """The replacement module with `ropes` (the same keys as the plan the probe matched against: the model's own
        or a method's) in the layout found. adopt: take the module's own float32 inv_freq where it is the plan's to
        an ulp (angles="hf" on the model's own plan)."""
        follows = self.follows if follow_length is None else follow_length
        made, rotaries = {}, {}
        for lt, key in self.keys.items():  # one RotaryEmbedding per distinct RoPE, shared by the layer types it serves
            rope = ropes[key]
            if id(rope) not in made:
                made[id(rope)] = RotaryEmbedding(rope, angles=angles, follow_length=follows)
                if angles == "hf" and adopt:
                    _adopt_module_frequencies(made[id(rope)], self.module, lt)
            rotaries[lt] = made[id(rope)]
        device = next((b.device for b in self.module.buffers()), None)
        out = _PatchedRotary(rotaries, self.layout, angles, self.module, self.passthrough)
        return out.to(device) if device is not None else out


def _follows_length(module: torch.nn.Module) -> bool:
    """Whether a rotary module re-forms a length-dependent plan per call: its forward is wrapped by transformers'
    dynamic_rope_update (most families). Qwen2-VL's and Qwen2.5-VL's are not ("# Ignore copy"): their dynamic NTK
    stays at the plan made at initialisation, and so does the module that replaces them."""
    forward = getattr(type(module), "forward", None)
    while forward is not None:  # through the decorators (torch.no_grad, ...), each a functools.wraps
        code = getattr(forward, "__code__", None)
        if code is not None and code.co_filename.replace("\\", "/").endswith("transformers/modeling_rope_utils.py"):
            return True
        forward = getattr(forward, "__wrapped__", None)
    return False


def _adopt_module_frequencies(rotary: RotaryEmbedding, module: torch.nn.Module, layer_type: Optional[str]):
    """angles="hf": the model's own float32 inv_freq where it is ropekit's plan to within one float32 ulp per pair.
    ropekit forms base ** exponent with a correctly rounded pow; PyTorch's vectorised float32 pow (SLEEF, by CPU) is off
    by an ulp on a few pairs (Gemma 4's 256-pair global layers: one), which moves the model's logits. The plan is
    ropekit's and checked here; the last bit is the model's. A length-dependent plan (dynamic NTK, LongRoPE) keeps
    ropekit's frequencies, which it re-forms at every switch."""
    if rotary.rope.depends_on_length:
        return
    own = getattr(module, f"{layer_type}_inv_freq", None) if layer_type else None
    if own is None:
        own = getattr(module, "inv_freq", None)
    if not isinstance(own, torch.Tensor) or own.shape != rotary.inv_freq.shape:
        return
    mine = rotary.inv_freq.double().cpu().numpy()
    theirs = own.detach().double().cpu().numpy()
    if np.all(np.abs(theirs - mine) <= np.spacing(np.abs(mine).astype(np.float32)).astype(np.float64)):
        rotary.inv_freq = own.detach().float().clone().to(rotary.inv_freq.device)


def _sinusoid_table(rope: Rope, num_positions: int, angles: str) -> torch.Tensor:
    """GPT-J / CodeGen's embed_positions: [num_positions, rotary_dim] = cat(sin, cos) of position × inv_freq."""
    if angles == "hf":  # their create_sinusoidal_positions' float32 expression, on ropekit's inv_freq
        inv = torch.from_numpy(rope.inv_freq).float()
        angle = torch.einsum("i , j -> i j", torch.arange(num_positions, dtype=torch.int64).float(), inv).float()
        return torch.cat((torch.sin(angle), torch.cos(angle)), dim=1)
    cos, sin = (torch.as_tensor(a) for a in rope.cos_sin(np.arange(num_positions), layout="hf"))
    half = cos.shape[-1] // 2
    return torch.cat((sin[..., :half], cos[..., :half]), dim=1).float()


def _patch_tables(model: torch.nn.Module, ropes: dict, angles: str) -> int:
    """Attention modules that keep their angles in a sinusoid table (GPT-J, CodeGen: `embed_positions`, no rotary
    module): the table replaced by ropekit's, where the model's own agrees with ropekit's plan."""
    rope = next(iter(ropes.values()))
    replaced = 0
    for name, module in model.named_modules():
        table = getattr(module, "embed_positions", None)
        if not isinstance(table, torch.Tensor) or table.dim() != 2 or not hasattr(module, "rotary_dim"):
            continue
        want = _sinusoid_table(rope, table.shape[0], "hf")
        if want.shape != table.shape or float((table.float().cpu() - want).abs().max()) > 1e-5:
            raise Error(f"patch: {name}.embed_positions ({tuple(table.shape)}) is not ropekit's sin/cos table for this "
                        "config: not patched")
        module.embed_positions = _sinusoid_table(rope, table.shape[0], angles).to(table.device, table.dtype)
        replaced += 1
    return replaced


def patch(model: torch.nn.Module, *, angles: str = "hf", rope_scaling: Optional[dict] = None,
          trained_length: Optional[int] = None, follow_length: Optional[bool] = None) -> torch.nn.Module:
    """Replaces a loaded Hugging Face model's text rotary modules (every `*RotaryEmbedding` outside its vision
    tower) by ropekit's, planned from the model's own config by ropekit's model table; where a family keeps its angles
    in a table inside attention (GPT-J, CodeGen: `embed_positions`), the table. angles="hf": Hugging Face's float32
    expression on ropekit's inv_freq — the model's logits bit for bit (tests: python/tests/test_hf_families.py, every
    family of the model table transformers builds); angles="accurate": cos/sin of the exact angles, correctly rounded.
    The attention's rotation expression is left as the model's own: ropekit supplies the angles, in the layout the
    replaced module returned (cat or interleaved cos/sin, or complex freqs_cis), checked against it on a short probe
    before anything is replaced. Refuses (ropekit.Error, the model left as it was) a model whose model_type is not in
    ropekit's model table instead of guessing its pairing, a module whose cos/sin ropekit's plan does not reproduce, and
    a model with nothing to patch (no RoPE). Returns the model.

    rope_scaling: a context-extension method instead of the model's own scaling — a rope_scaling (or v5
    rope_parameters) fragment in config.json syntax, {"rope_type": "yarn", "factor": 4, ...}. The probe still checks
    each module against the model's own plan first; then the fragment's plan goes where the model's own scaling
    applies: every RoPE layer, but where the config's rope_parameters are per layer type, the sliding_attention set
    keeps its own (Gemma 3's local layers, as the C++ lab leaves them); the model's rope_theta and partial rotary factor
    kept unless the fragment gives its own.
    trained_length: the length the fragment extends from (max_position_embeddings in the plan; dynamic NTK's
    original length), default the config's. follow_length: whether a length-dependent plan follows each call's
    max(position_ids) + 1 as Hugging Face's modules do (default: as the module replaced did). A patched model may
    be patched again (another method): the probe runs on the module first replaced."""
    if angles not in ("accurate", "hf"):
        raise Error(f'angles = "{angles}": must be "accurate" or "hf"')
    if rope_scaling is not None and not isinstance(rope_scaling, dict):
        raise Error(f"rope_scaling = {rope_scaling!r}: must be a dict (a rope_scaling fragment)")
    if trained_length is not None and (not isinstance(trained_length, int) or trained_length < 2):
        raise Error(f"trained_length = {trained_length!r}: must be an integer >= 2")
    matches = _matches(model, angles)
    if not matches:
        if rope_scaling is not None:
            raise Error(f"patch: {type(model).__name__} keeps its angles in a sinusoid table (or has no rotary "
                        "module): rope_scaling needs a rotary module to replace")
        top = model.config.to_dict()
        if _patch_tables(model, _plan_of(top, None)[0], angles) == 0:
            raise Error(f"patch: no rotary module and no sinusoid table found in {type(model).__name__}: nothing to "
                        "patch")
        return model
    swaps = []
    for name, match, config, family in matches:
        if rope_scaling is None:
            ropes, adopt = _plan_of(config, family)[0], True
        else:
            ropes = _plan_of(_config_with_scaling(config, rope_scaling, trained_length), family)[0]
            adopt = False
            missing = [k for k in match.keys.values() if k not in ropes]
            if missing:
                raise Error(f"patch: rope_scaling {json.dumps(rope_scaling)} leaves the model without RoPE layer "
                            f"type(s) {missing}")
        swaps.append((name, match.build(ropes, angles, follow_length, adopt)))
    for name, replacement in swaps:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, replacement)
    return model


def _matches(model: torch.nn.Module, angles: str):
    """Every text rotary module of `model` matched against its config's plan: [(name, _Match, config dict, family)].
    A module patched before is matched as the module it replaced. Everything is matched before anything is replaced:
    a refusal leaves the model as it was."""
    top = model.config.to_dict()
    _plan_of(top, None)  # the model's own type must be in the model table, whatever its modules' configs say
    planned = {id(model.config): (top, None)}
    out, patched = [], []
    for name, module in list(model.named_modules()):
        if any(name.startswith(p + ".") for p in patched):  # inside a module patched before
            continue
        if isinstance(module, _PatchedRotary):
            patched.append(name)
            module = module.replaced
        elif not type(module).__name__.endswith("RotaryEmbedding"):
            continue
        if "vision" in name.lower() or "Vision" in type(module).__name__:
            continue
        # A sub-model's rotary module reads its own config (CSM's depth decoder, a wrapper's text_config).
        own = getattr(module, "config", None)
        if own is not None and hasattr(own, "to_dict") and id(own) not in planned:
            planned[id(own)] = (own.to_dict(), top.get("model_type"))
        config, family = planned[id(own)] if id(own) in planned else planned[id(model.config)]
        out.append((name, _match_module(name, module, *_plan_of(config, family), angles), config, family))
    return out


def _per_type_parameters(config: dict) -> bool:
    """Whether a config's rope_parameters are per layer type ({"full_attention": {...}, "sliding_attention": {...}})."""
    params = config.get("rope_parameters")
    return isinstance(params, dict) and bool(params) and all(isinstance(v, dict) for v in params.values())


def _config_with_scaling(config: dict, fragment: dict, trained_length: Optional[int]) -> dict:
    """`config` with a method's rope_scaling fragment where the model's own scaling applies (patch's rope_scaling)."""
    out = copy.deepcopy(config)

    def merged(own: dict) -> dict:
        kept = {k: own[k] for k in ("rope_theta", "partial_rotary_factor") if k in own}
        return {**kept, **fragment}

    params = out.get("rope_parameters")
    if _per_type_parameters(out):
        for layer_type, own in params.items():  # per layer type (Gemma 3): the sliding layers keep theirs
            if layer_type != "sliding_attention":
                params[layer_type] = merged(own)
    elif isinstance(params, dict) and params:
        out["rope_parameters"] = merged(params)
    else:
        out["rope_scaling"] = dict(fragment)
    if trained_length is not None:
        out["max_position_embeddings"] = trained_length
    return out


def _plan_of(config: dict, family: Optional[str]):
    """ropekit's RoPEs for a config ({layer_type or None: Rope}), the layer types a rotary module may be asked for, and
    the rope parameter sets no layer reads (DeepSeek V4 without sliding layers computes its "main" set all the same).
    A model_type the model table does not know is refused (its pairing would be a guess), except a sub-model's config
    inside a family the table knows (CSM's csm_depth_decoder_model), which is read with that family's rules."""
    model = ModelPositions.from_config(config)
    unknown = [w for w in model.warnings if "not in ropekit's model table" in w]
    if unknown and family is not None and family != config.get("model_type"):
        config = dict(config, model_type=family)
        model = ModelPositions.from_config(config)
        unknown = [w for w in model.warnings if "not in ropekit's model table" in w]
    if unknown:
        raise Error(f"patch: {unknown[0].split(': ', 1)[-1]}")
    plan = model.to_dict()
    if not any(g["encoding"] == "rope" for g in plan["groups"]):
        raise Error(f"patch: model_type {plan['model_type']} has no RoPE layer ({plan['family']}): nothing to patch")
    ropes = model.ropes()
    if len(ropes) == 1:
        ropes = {None: next(iter(ropes.values()))}
    # The names a rotary module taking layer_type may be called with: the model's layer types, or the names of its
    # rope parameter sets where those differ (DeepSeek V4's "main" and "compress").
    params = config.get("rope_parameters") or {}
    named_sets = [k for k, v in params.items() if isinstance(v, dict)] if isinstance(params, dict) else []
    types = [t for t in plan["layer_types"] if t] or [t for t in ropes if t]
    read = {g["rope_parameters"] for g in plan["groups"] if g["encoding"] == "rope"}
    unread = [k for k in named_sets if k not in read and k not in types]
    return ropes, list(dict.fromkeys(types + named_sets)), unread
