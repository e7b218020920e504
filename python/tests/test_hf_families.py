"""ropekit.torch.patch on every family of ropekit's model table that transformers builds (issue 61): a tiny random
model from transformers' own config class, run with and without patch(model, angles="hf") — fp32 logits bit for bit.
Each family runs twice: its own layer-type mix with its default RoPE, and every layer of one type with dynamic NTK
switched past max_position_embeddings (positions past the scaling switch; LongRoPE's switch is test_hf_models.py's
Phi-3). A family of the table that is not built here is listed in NOT_BUILT with the reason, so a new row of the table
is either tested or explained. Needs transformers (the test command's virtual environment pins 5.15.0)."""
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import ropekit  # noqa: E402
import ropekit.torch as rt  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128, head_dim=16, max_position_embeddings=256,
             moe_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
             shared_expert_intermediate_size=32, n_shared_experts=1, kv_lora_rank=16, q_lora_rank=16,
             qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2)

MROPE = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}  # 8 pairs: t, h, w sections
# Per family: what its config class needs beyond SMALL for a tiny model that runs (None: leave SMALL's key out).
RECIPES = {
    "mistral4": dict(head_dim=None, num_key_value_heads=4),
    "dbrx": dict(d_model=64, n_heads=4, n_layers=2, max_seq_len=256, hidden_size=None, num_attention_heads=None,
                 num_hidden_layers=None, attn_config={"kv_n_heads": 2, "rope_theta": 1e4, "clip_qkv": 8.0},
                 ffn_config={"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2}),
    "falcon": dict(head_dim=None, new_decoder_architecture=True),
    "gptj": dict(rotary_dim=8),
    "codegen": dict(rotary_dim=8),
    "qwen2_vl_text": dict(rope_parameters=MROPE),
    "qwen2_5_vl_text": dict(rope_parameters=MROPE),
    "qwen3_vl_text": dict(rope_parameters=dict(MROPE, mrope_interleaved=True)),
    "qwen3_vl_moe_text": dict(rope_parameters=dict(MROPE, mrope_interleaved=True)),
    # GLM-4V: M-RoPE over half of each head (partial_rotary_factor 0.5): 4 pairs.
    "glm4v_text": dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [1, 1, 2],
                                        "partial_rotary_factor": 0.5}),
    "glm4v_moe_text": dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [1, 1, 2],
                                            "partial_rotary_factor": 0.5}),
    "glm_ocr_text": dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [1, 1, 2],
                                          "partial_rotary_factor": 0.5}),
    # Hybrids: one attention layer among the linear ones (two layers of either kind would leave nothing to rotate).
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention"]),
    # Qwen3.5: interleaved M-RoPE over half of each head here (4 pairs), as its rotary module always applies it.
    "qwen3_5_text": dict(layer_types=["linear_attention", "full_attention"], partial_rotary_factor=0.5,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5,
                                          "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
    "qwen3_5_moe_text": dict(layer_types=["linear_attention", "full_attention"], partial_rotary_factor=0.5,
                             rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5,
                                              "mrope_section": [2, 1, 1], "mrope_interleaved": True}),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"], position_embedding_type="rope", mamba_n_heads=8,
                             mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=16),
    "nemotron_h": dict(layers_block_type=["linear_attention", "full_attention"], mamba_num_heads=8,
                       mamba_head_dim=16, ssm_state_size=16, n_groups=1, chunk_size=16),
    "jamba": dict(attn_layer_offset=1, attn_layer_period=2, expert_layer_period=2, expert_layer_offset=1,
                  mamba_dt_rank=8, mamba_d_state=8),
    # Mamba-2 mixers at 8 heads × 16 lanes (2 × hidden 64), state 16, chunk 16: the defaults (128 heads, state 256,
    # chunk 256) take minutes on a CPU.
    "bamba": dict(attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=16),
    "falcon_h1": dict(mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=16),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),
    # MLA: the rotary lanes are qk_rope_head_dim (HF sets head_dim to it); query and key heads alike.
    "deepseek_v2": dict(head_dim=None, num_key_value_heads=4),
    "deepseek_v3": dict(head_dim=None, num_key_value_heads=4),
    "deepseek_v32": dict(head_dim=None, num_key_value_heads=4, index_head_dim=16, index_n_heads=2, index_topk=8),
    "glm_moe_dsa": dict(head_dim=None, num_key_value_heads=4, index_head_dim=16, index_n_heads=2, index_topk=8),
    "minicpm3": dict(head_dim=None, num_key_value_heads=4),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], num_layers=2),
    "mamba2": dict(num_heads=8, head_dim=16, expand=2, n_groups=1, state_size=16, chunk_size=16),
    "gemma3n_text": dict(layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
                         laurel_rank=8, hidden_size_per_layer_input=8, altup_num_inputs=2),
}
# Sub-model configs of the multimodal wrappers: the text model from SMALL and its text type's recipe, the other towers
# one tiny layer each (the keys each tower's config class reads; the others are ignored).
TINY_TOWER = dict(depth=1, num_hidden_layers=1, hidden_size=32, embed_dim=32, intermediate_size=64, num_heads=2,
                  num_attention_heads=2, num_key_value_heads=2, out_hidden_size=64, fullatt_block_indexes=[0],
                  deepstack_visual_indexes=[], num_position_embeddings=64, patch_size=14, image_size=28, vocab_size=128,
                  head_dim=16)

# model_type: why this test does not build it.
NOT_BUILT = {
    # model_types real configs carry that transformers reads through another class.
    "code_llama": "transformers has no config class of its own for it (Code Llama configs load as llama)",
    "exaone4_5_text": "transformers 5.15 has no config class for it (EXAONE 4.5's text model reads as exaone4)",
    "RefinedWeb": "the first Falcon releases' model_type; transformers reads their configs as falcon",
    "RefinedWebModel": "the first Falcon releases' model_type; transformers reads their configs as falcon",
    # Built elsewhere or too heavy for the test command.
    "gemma3n": "its vision tower is a timm model (transformers needs timm and Pillow to build it); its text model is "
               "gemma3n_text, tested here",
    "csm": "its Mimi audio codec takes about 36 s to build on 2 cores at its default size; its backbone and depth "
           "decoder are Llama-style (tested by hand: bit for bit, after patch() reads the depth decoder's own config)",
}

SEQ = 40

# model_type: why the dynamic-NTK run is left out for it.
NO_DYNAMIC = {
    "gptj": "its angles are a fixed sinusoid table (no rope types)",
    "codegen": "its angles are a fixed sinusoid table (no rope types)",
    "phi3": "Phi3Config accepts rope_type longrope only (its switch: test_hf_models.py's Phi-3)",
    "phimoe": "PhimoeConfig accepts rope_type longrope only",
    "phi4_multimodal": "Phi4MultimodalConfig accepts rope_type longrope only",
    "gemma4": "transformers' own model fails: dynamic NTK forms the global layers' frequencies over head_dim, not "
              "global_head_dim",
    "gemma4_text": "as gemma4",
}


def _kwargs(model_type, changes):
    kwargs = dict(SMALL)
    kwargs.update(RECIPES.get(model_type, {}))
    kwargs.update(changes)
    return {k: v for k, v in kwargs.items() if v is not None}


def _config_class(model_type):
    from transformers import CONFIG_MAPPING
    return CONFIG_MAPPING[model_type]


def _text_type(model_type):
    subs = getattr(_config_class(model_type), "sub_configs", None) or {}
    if "text_config" not in subs:
        return model_type
    text = getattr(subs["text_config"], "model_type", None)
    if not text:  # AutoConfig: the default text model's type
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            text = _config_class(model_type)().text_config.model_type
    return text


def _tower(config_class):
    """TINY_TOWER's keys that a tower's config class takes (some reject others)."""
    import dataclasses
    if not dataclasses.is_dataclass(config_class):
        return dict(TINY_TOWER)
    names = {f.name for f in dataclasses.fields(config_class)}
    return {k: v for k, v in TINY_TOWER.items() if k in names}


def _config(model_type, **changes):
    config_class = _config_class(model_type)
    subs = getattr(config_class, "sub_configs", None) or {}
    if "text_config" in subs:  # a wrapper: a tiny text model of its own type, tiny towers
        kwargs = {name: (_kwargs(_text_type(model_type), changes) if name == "text_config" else _tower(sub))
                  for name, sub in subs.items()}
    else:  # the model's own keys at the top, its other towers (audio, vision) tiny
        kwargs = dict({name: _tower(sub) for name, sub in subs.items()}, **_kwargs(model_type, changes))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_class(**kwargs)
    config._attn_implementation = "eager"
    return config


def _families():
    """(families with RoPE layers, families without) among the model table's rows transformers has, by ropekit's
    reading of the tiny config each is built from."""
    from transformers import CONFIG_MAPPING
    rope, none = [], []
    for f in ropekit.model_families():
        t = f["model_type"]
        if f["remote_code"] or t in NOT_BUILT:
            continue
        assert t in CONFIG_MAPPING, f"{t}: not in transformers {transformers.__version__}; add it to NOT_BUILT"
        plan = ropekit.model_positions(_config(t).to_dict())
        (rope if any(g["encoding"] == "rope" for g in plan["groups"]) else none).append(t)
    return rope, none


ROPE_FAMILIES, OTHER_FAMILIES = _families()


# Text models the Auto classes do not map.
MODEL_CLASSES = {"mllama_text_model": "MllamaForCausalLM"}


def _build(model_type, **changes):
    from transformers import AutoModel, AutoModelForCausalLM
    config = _config(model_type, **changes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        try:
            if model_type in MODEL_CLASSES:
                return getattr(transformers, MODEL_CLASSES[model_type])(config).eval()
            model = AutoModelForCausalLM.from_config(config)
        except ValueError:  # text models without a causal-LM head class of their own (qwen2_vl_text, ...)
            model = AutoModel.from_config(config)
    return model.eval()


def _output(model, ids):
    with torch.no_grad():
        out = model(ids)
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def _same_logits(model_type, **changes):
    ids = torch.randint(3, 128, (2, SEQ), generator=torch.Generator().manual_seed(1))
    reference, patched = _build(model_type, **changes), rt.patch(_build(model_type, **changes), angles="hf")
    want, got = _output(reference, ids), _output(patched, ids)
    assert torch.equal(got, want), f"{model_type}: max |Δ| {float((got - want).abs().max())}"
    return ids, want


def _layer_mix(model_type):
    """Every layer type the family's default config has, one layer each (at least two layers): Gemma 3's sliding and
    full layers, a hybrid's linear and attention layers; {} for a family without layer types."""
    text = _text_type(model_type)
    if "layer_types" in RECIPES.get(text, {}):
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = _config_class(text)()
    types = list(dict.fromkeys(getattr(default, "layer_types", None) or []))
    if len(types) < 2:  # one kind of layer (or a layer_types some configs derive and do not let one set)
        return {}
    types = (types * 2)[:max(2, len(types))]
    return dict(layer_types=types, num_hidden_layers=len(types))


@pytest.mark.parametrize("model_type", ROPE_FAMILIES)
def test_patch_gives_the_models_logits_bit_for_bit(model_type):
    """The family's own RoPE over a mix of its layer types: HF's logits bit for bit with angles="hf"; with
    angles="accurate" they move (the swap took effect) but only by rounding — cos/sin within an ulp or so of HF's at
    these positions move two layers' logits by at most 3.5e-6 of the largest (Gemma 4's 512-lane global heads; most
    families 2e-7 to 1e-6), where a wrong layout or plan moves them by O(1): bounded at 1e-5."""
    mix = _layer_mix(model_type)
    ids, want = _same_logits(model_type, **mix)
    accurate = rt.patch(_build(model_type, **mix), angles="accurate")
    moved = float((_output(accurate, ids) - want).abs().max())
    assert 0 < moved <= 1e-5 * float(want.abs().max()), f"{model_type}: accurate angles moved logits by {moved}"


def _dynamic(model_type):
    """Every layer of the first RoPE layer type, dynamic NTK (factor 2) on each RoPE dictionary, max_position_embeddings
    24 so that the 40 positions cross the switch."""
    mix = _layer_mix(model_type)
    config = _config(model_type, **mix)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    plan = ropekit.model_positions(text.to_dict())
    rope_type = next(g["layer_type"] for g in plan["groups"] if g["encoding"] == "rope")
    recipe = RECIPES.get(_text_type(model_type), {})
    params = dict(recipe.get("rope_parameters") or text.rope_parameters)
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    if any(isinstance(v, dict) for v in params.values()):  # one dictionary per layer type
        params = {k: (dict(v, **dynamic) if isinstance(v, dict) else v) for k, v in params.items()}
    else:
        params = dict(params, **dynamic)
    changes = dict(rope_parameters=params, max_position_embeddings=24)
    if rope_type and (mix or "layer_types" in recipe):  # families whose layer_types can be set
        changes.update(layer_types=[rope_type] * 2, num_hidden_layers=2)
    return changes


@pytest.mark.parametrize("model_type", [t for t in ROPE_FAMILIES if t not in NO_DYNAMIC])
def test_patch_past_a_dynamic_ntk_switch(model_type):
    """Dynamic NTK on every layer of one type, 40 positions past max_position_embeddings 24: the patched rotary module
    re-forms its plan as HF's dynamic_rope_update does, and the logits stay HF's bit for bit."""
    _same_logits(model_type, **_dynamic(model_type))


@pytest.mark.parametrize("model_type", OTHER_FAMILIES)
def test_patch_refuses_a_model_without_rope(model_type):
    """Nothing to patch (ALiBi, learned positions, no attention, attention without positions): a ropekit.Error saying so
    and naming the model's encoding, the model left as it was."""
    model = _build(model_type)
    before = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ropekit.Error, match="nothing to patch"):
        rt.patch(model)
    assert {n: type(m) for n, m in model.named_modules()} == before


def test_patch_refuses_a_rotary_module_it_does_not_reproduce():
    """A rotary module whose cos/sin no RoPE of ropekit's plan gives (here: its frequencies changed after loading, as a
    custom scaling would) is refused with the difference measured, and the model is left as it was — patch() never
    swaps angles it has not checked against the module it replaces."""
    model = _build("llama")
    model.model.rotary_emb.inv_freq.mul_(1.5)
    before = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ropekit.Error, match="none of ropekit's RoPEs for this config reproduces"):
        rt.patch(model)
    assert {n: type(m) for n, m in model.named_modules()} == before


def test_patch_leaves_only_an_unread_parameter_set_to_the_model():
    """DeepSeek V4's model computes its "main" and "compress" rope parameter sets on every forward. With a sliding
    layer both are read and both are ropekit's, bit for bit; with compressed layers only, nothing reads "main" and the
    patched module leaves it to the model's own (ropekit's plan has no layer of it to check it against) — which the
    patch refused before."""
    def passthrough(model):
        return {m.passthrough for m in model.modules() if isinstance(m, rt._PatchedRotary)}

    mixed = dict(layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
                 num_hidden_layers=3)
    _same_logits("deepseek_v4", **mixed)
    assert passthrough(rt.patch(_build("deepseek_v4", **mixed))) == {()}
    compressed = dict(layer_types=["compressed_sparse_attention", "heavily_compressed_attention"], num_hidden_layers=2)
    _same_logits("deepseek_v4", **compressed)
    assert passthrough(rt.patch(_build("deepseek_v4", **compressed))) == {("main",)}
