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

import os
from typing import Optional, Sequence, Union

import numpy as np
import torch

from ._ropekit import Error, Rope

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
    the Backward direction (R(−θ) with the forward magnitude), which is the forward's transpose."""

    @staticmethod
    def forward(ctx, rope: Rope, positions, layout: str, angles: str, q: torch.Tensor, k: Optional[torch.Tensor]):
        ctx.rope, ctx.positions, ctx.layout, ctx.angles = rope, positions, layout, angles
        ctx.has_k = k is not None
        out = rope.apply(q, k, positions, layout=layout, inplace=False, angles=angles)
        return out if ctx.has_k else (out, None)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        if ctx.needs_input_grad[4] is False and ctx.needs_input_grad[5] is False:
            return None, None, None, None, None, None
        # Autograd may hand over expanded (stride-0) or non-contiguous gradients: one contiguous copy,
        # then the transpose rotation in place on it.
        gq = grad_q.contiguous() if grad_q is not None else None
        gk = grad_k.contiguous() if (ctx.has_k and grad_k is not None) else None
        if gq is not None and gk is not None:
            ctx.rope.apply(gq, gk, ctx.positions, layout=ctx.layout, direction="backward", angles=ctx.angles)
        elif gq is not None:
            ctx.rope.apply(gq, None, ctx.positions, layout=ctx.layout, direction="backward", angles=ctx.angles)
        elif gk is not None:
            ctx.rope.apply(None, gk, ctx.positions, layout=ctx.layout, direction="backward", angles=ctx.angles)
        return None, None, None, None, gq, gk


def apply_rotary(rope: Rope, q: torch.Tensor, k: Optional[torch.Tensor] = None, positions=None, *,
                 layout: str = "bshd", angles: str = "accurate"):
    """q (and k) rotated by ropekit's kernel with autograd: returns new tensors (q', k') or q'.

    layout: "bshd" [batch, seq, heads, head_dim] (flash-attn), "bhsd" [batch, heads, seq, head_dim]
    (Hugging Face after transpose) or "thd" [tokens, heads, head_dim] (packed, FlashInfer).
    positions: int32/int64, [batch, seq], [1, seq] or [seq] (M-RoPE: a leading 3); None = 0 … seq−1.
    """
    if isinstance(positions, torch.Tensor):
        positions = positions.detach()
    q_out, k_out = RotaryFunction.apply(rope, positions, layout, angles, q, k)
    return (q_out, k_out) if k is not None else q_out


def _rope_of(config, layer_type: Optional[str], pairing: Optional[str]) -> Rope:
    if isinstance(config, Rope):
        return config
    if isinstance(config, str) and not os.path.exists(config) and not config.endswith(".json"):
        ropes = Rope.from_preset(config, layer_type=layer_type)
    else:
        ropes = Rope.from_config(config, layer_type=layer_type, pairing=pairing)
    if isinstance(ropes, dict):
        raise Error(f"the model has several RoPE layer types ({', '.join(ropes)}): pass layer_type=")
    return ropes


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
    plan fixed between set_current_length calls.
    """

    def __init__(self, config, *, layer_type: Optional[str] = None, angles: str = "accurate",
                 pairing: Optional[str] = None, device=None, follow_length: bool = True):
        super().__init__()
        if angles not in ("accurate", "hf"):
            raise Error(f'angles = "{angles}": must be "accurate" or "hf"')
        self.rope = _rope_of(config, layer_type, pairing)
        self.angles = angles
        self.attention_scaling = self.rope.cos_sin_scale
        self._spec = self.rope.spec  # the same for the Rope's life (set_current_length changes the plan only)
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
        """Re-forms the plan (dynamic NTK, LongRoPE); True when cached keys need re-rotation."""
        changed = self.rope.set_current_length(length)
        self.inv_freq = torch.from_numpy(self.rope.inv_freq).to(self.inv_freq.device)
        self.attention_scaling = self.rope.cos_sin_scale
        return changed

    def _hf(self, position_ids: torch.Tensor):
        lead = position_ids.shape[:-1]
        pos = position_ids.reshape(-1, 1, position_ids.shape[-1]).float().cpu()
        inv = self.inv_freq.cpu()[None, :, None].float().expand(pos.shape[0], -1, 1)
        freqs = (inv @ pos).transpose(1, 2)
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
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
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
    """Stands in for a Hugging Face model's rotary module: forward(x, position_ids[, layer_type]) → (cos, sin) from
    ropekit's plan — one RotaryEmbedding per RoPE layer type (Gemma 3's sliding and full layers)."""

    def __init__(self, ropes, angles: str, original: torch.nn.Module):
        super().__init__()
        self.angles = angles
        self.by_type = torch.nn.ModuleDict({t: RotaryEmbedding(r, angles=angles) for t, r in ropes.items()})
        # What HF code may read off the module it replaced.
        for attr in ("rope_type", "max_seq_len_cached", "original_max_seq_len", "config"):
            if hasattr(original, attr):
                setattr(self, attr, getattr(original, attr))

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: Optional[str] = None):
        if layer_type is None:
            if len(self.by_type) != 1:
                raise Error(f"layer_type: the model has RoPE layer types {', '.join(self.by_type)}; pass one")
            return next(iter(self.by_type.values()))(x, position_ids)
        if layer_type not in self.by_type:
            raise Error(f'layer_type = "{layer_type}": the model\'s RoPE layer types are {", ".join(self.by_type)}')
        return self.by_type[layer_type](x, position_ids)


def patch(model: torch.nn.Module, *, angles: str = "hf") -> torch.nn.Module:
    """Replaces a loaded Hugging Face model's text rotary modules (every `*RotaryEmbedding` outside its vision
    tower) by ropekit's, planned from the model's own config by ropekit's model table. angles="hf": Hugging Face's
    float32 expression on ropekit's inv_freq — the model's logits bit for bit (tests: python/tests/test_hf_models.py);
    angles="accurate": cos/sin of the exact angles, correctly rounded. The attention's rotation expression is left as
    the model's own (HF's q·cos + rotate_half(q)·sin): ropekit supplies the angles. Refuses (ropekit.Error) a model
    whose model_type is not in ropekit's model table, instead of guessing its pairing. Returns the model."""
    from . import model_positions  # the compiled module's reader

    if angles not in ("accurate", "hf"):
        raise Error(f'angles = "{angles}": must be "accurate" or "hf"')
    config = model.config.to_dict()
    plan = model_positions(config)
    for warning in plan["warnings"]:
        if "not in ropekit's model table" in warning:
            raise Error(f"patch: {warning.split(': ', 1)[-1]}")
    ropes = Rope.from_config(config)
    if not isinstance(ropes, dict):
        ropes = {None: ropes}
    replaced = 0
    for name, module in list(model.named_modules()):
        if not type(module).__name__.endswith("RotaryEmbedding") or "vision" in name.lower() \
                or "Vision" in type(module).__name__:
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, _PatchedRotary({t or "default": r for t, r in ropes.items()}, angles, module))
        replaced += 1
    if replaced == 0:
        raise Error(f"patch: no rotary module found in {type(model).__name__}")
    return model
