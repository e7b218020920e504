"""ropekit: rotary position embeddings that give Hugging Face's numbers, with accurate angles.

    import numpy as np, ropekit
    rope = ropekit.Rope.from_preset("llama-3.1-8b")
    q = np.random.standard_normal((1, 16, 32, 128)).astype(np.float32)   # [batch, seq, heads, head_dim]
    rope.apply(q)                                                          # rotated in place, positions 0..15

See docs/python.md for the API, its numerics contract and how it maps to Hugging Face, flash-attn and
FlashInfer conventions. PyTorch integration (autograd, nn.Module, HF-signature helpers): ropekit.torch.
"""
from ._ropekit import (  # noqa: F401  (the compiled core)
    Error,
    __version__,
    KvCache,
    Model,
    ModelPositions,
    PagedKvCache,
    Rope,
    RopeSet,
    RotateCall,
    Tokenizer,
    attention,
    cp_indices,
    cp_positions,
    cu_seqlens_from_eod,
    default_threads,
    eval,
    eval_methods,
    linear_attention,
    llama4_vision_position_ids,
    model_families,
    model_positions,
    model_positions_gguf,
    model_positions_preset,
    mrope_decode_positions,
    mrope_position_ids,
    needs_rerotation,
    packed_positions,
    passkey,
    pixtral_position_ids,
    presets,
    rejected_slot_ranges,
    rotate_and_cache,
    scaling_variants,
    set_default_threads,
    set_simd_target,
    simd_target,
    simd_targets,
    tree_mask,
    tree_positions,
    verify_positions,
    vision_position_ids,
    vision_rope,
    vision_window_index,
    window_order,
)

__all__ = [
    "Error", "KvCache", "Model", "ModelPositions", "PagedKvCache", "Rope", "RopeSet", "RotateCall", "needs_rerotation", "Tokenizer", "attention", "default_threads", "eval", "eval_methods", "passkey",
    "linear_attention", "model_families", "model_positions", "model_positions_gguf", "model_positions_preset", "presets",
    "scaling_variants", "set_default_threads", "set_simd_target", "simd_target", "simd_targets",
    "packed_positions", "cu_seqlens_from_eod", "cp_indices", "cp_positions", "verify_positions", "tree_positions",
    "tree_mask", "rejected_slot_ranges", "mrope_position_ids", "mrope_decode_positions", "vision_rope",
    "vision_position_ids", "vision_window_index", "window_order", "pixtral_position_ids", "llama4_vision_position_ids",
]
