"""A real Hugging Face forward as the test of ropekit.torch.patch: tiny random-weight models built from configs of
Llama 3.1, Mistral, Qwen2.5 (YaRN), Qwen3 (QK-norm), Gemma 3 (two layer types), Phi-3 (LongRoPE) and Qwen2-VL's
text model (M-RoPE: hidden states, three distinct streams), run with and without patch(model): logits bit-identical with angles="hf" (eager and under
torch.compile), greedy continuations identical, and with angles="accurate" within the accurate angles' effect.
Needs transformers (the test command's virtual environment pins 5.15.0); skipped where it is absent."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import ropekit  # noqa: E402
import ropekit.torch as rt  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128)


def _configs():
    from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config, Qwen3Config
    long_factors = [1.0 + 0.25 * i for i in range(8)]
    return {
        "llama3.1": LlamaConfig(**SMALL, head_dim=16, max_position_embeddings=1024,
                                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 64}),
        "mistral": MistralConfig(**SMALL, head_dim=16, sliding_window=None,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        "qwen2.5-yarn": Qwen2Config(**SMALL, max_position_embeddings=512,
                                    rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                     "original_max_position_embeddings": 128}),
        "qwen3": Qwen3Config(**SMALL, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        "gemma3": Gemma3TextConfig(**SMALL, head_dim=16, sliding_window=8,
                                   layer_types=["sliding_attention", "full_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                    "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                       "rope_theta": 1e6}}),
        "phi3-longrope": Phi3Config(**SMALL, pad_token_id=0, max_position_embeddings=256,
                                    original_max_position_embeddings=32,
                                    rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                                     "short_factor": [1.0] * 8, "long_factor": long_factors,
                                                     "original_max_position_embeddings": 32}),
    }


def test_patched_qwen2_vl_text_model_with_three_position_streams():
    """Qwen2-VL's text model (M-RoPE sections) on distinct t/h/w streams: hidden states bit for bit."""
    from transformers import Qwen2VLTextConfig, Qwen2VLTextModel
    config = Qwen2VLTextConfig(**SMALL, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                         "mrope_section": [2, 3, 3]})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    reference = Qwen2VLTextModel(config).eval()
    torch.manual_seed(0)
    patched = rt.patch(Qwen2VLTextModel(config).eval(), angles="hf")
    ids = torch.randint(0, config.vocab_size, (1, 10), generator=torch.Generator().manual_seed(3))
    t = torch.tensor([[0, 1, 2, 2, 2, 2, 2, 2, 5, 6]])
    h = torch.tensor([[0, 1, 2, 2, 3, 3, 4, 4, 5, 6]])
    w = torch.tensor([[0, 1, 2, 3, 2, 3, 2, 3, 5, 6]])
    position_ids = torch.stack([t, h, w])
    with torch.no_grad():
        want = reference(ids, position_ids=position_ids).last_hidden_state
        got = patched(ids, position_ids=position_ids).last_hidden_state
    assert torch.equal(got, want)


def _model(config):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("name", list(_configs()))
def test_patched_model_gives_hf_logits(name):
    config = _configs()[name]
    reference, patched = _model(config), _model(config)
    rt.patch(patched, angles="hf")
    # 48 tokens: Phi-3 crosses its original 32 (LongRoPE's long factors), Gemma 3 its window of 8.
    ids = torch.randint(0, config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = reference(ids).logits
        got = patched(ids).logits
    assert torch.equal(got, want), f"{name}: max |Δ| {float((got - want).abs().max())}"
    out_ref = reference.generate(ids[:1, :12], max_new_tokens=8, do_sample=False)
    out_pat = patched.generate(ids[:1, :12], max_new_tokens=8, do_sample=False)
    assert torch.equal(out_pat, out_ref)
    # Accurate angles: cos/sin rounded from the exact angle instead of HF's float32 one (≤ 1 float32 ulp apart at
    # these positions); through two layers the logits move by a few ulp — measured 1.9e-7 to 3.8e-7 of the largest
    # logit over these seven models (transformers 5.15.0, torch 2.9.1). They must move (the swap took effect) and stay
    # within 2e-6 of it.
    accurate = rt.patch(_model(config), angles="accurate")
    with torch.no_grad():
        moved = float((accurate(ids).logits - want).abs().max())
    assert 0 < moved <= 2e-6 * float(want.abs().max()), f"{name}: accurate angles moved logits by {moved}"


def test_patched_model_under_torch_compile():
    config = _configs()["llama3.1"]
    reference, patched = _model(config), rt.patch(_model(config), angles="hf")
    ids = torch.randint(0, config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = torch.compile(reference)(ids).logits
        got = torch.compile(patched)(ids).logits
    assert torch.equal(got, want)


def test_patched_model_with_accurate_angles_compiles_without_a_graph_break_of_its_own():
    """angles="accurate" forms cos/sin through torch.ops.ropekit.cos_sin: the patched model has the graph breaks the
    model has (none of its own), and compiled it stays within the accurate angles' bound of HF compiled."""
    config = _configs()["qwen2.5-yarn"]
    reference, patched = _model(config), rt.patch(_model(config), angles="accurate")
    ids = torch.randint(0, config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        breaks = [torch._dynamo.explain(m)(ids).graph_break_count for m in (reference, patched)]
        assert breaks[1] == breaks[0], breaks
        want = torch.compile(reference)(ids).logits
        got = torch.compile(patched)(ids).logits
        eager = patched(ids).logits
    moved = float((got - want).abs().max())
    assert 0 < moved <= 2e-6 * float(want.abs().max()), moved
    assert float((got - eager).abs().max()) <= 2e-6 * float(want.abs().max())


def test_patch_refuses_a_model_type_it_does_not_know():
    from transformers import LlamaConfig
    model = _model(LlamaConfig(**SMALL))
    settings = model.config.to_dict()

    class Unknown:  # a config from a family ropekit's model table does not list
        def to_dict(self):
            return dict(settings, model_type="my_new_model")

    model.config = Unknown()
    with pytest.raises(ropekit.Error, match="my_new_model"):
        rt.patch(model)


def test_drop_in_follows_longrope_short_long_short_bit_for_bit():
    """RotaryEmbedding(config, angles="hf") beside Phi3RotaryEmbedding, called short → long → short (LongRoPE's switch
    at original_max_position_embeddings both ways, and back): cos/sin and rotated q/k bit for bit in the same PyTorch.
    (Across PyTorch versions the float32 cos/sin kernels differ by 1 ulp on a few values — Debian's 1.13 against 2.9:
    6 of 320 short-factor cosines — which no caller can match: docs/python.md.)"""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding, apply_rotary_pos_emb
    config = _configs()["phi3-longrope"]
    hf, ours = Phi3RotaryEmbedding(config), rt.RotaryEmbedding(config.to_dict(), angles="hf")
    q = torch.randn(1, 4, 100, 16, generator=torch.Generator().manual_seed(5))
    k = torch.randn(1, 2, 100, 16, generator=torch.Generator().manual_seed(6))
    for n in (20, 100, 31, 33, 20, 32, 100, 20):
        pos = torch.arange(n)[None]
        want, got = hf(q, pos), ours(q, pos)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), n
        assert all(torch.equal(a, b) for a, b in zip(apply_rotary_pos_emb(q[:, :, :n], k[:, :, :n], *got),
                                                     apply_rotary_pos_emb(q[:, :, :n], k[:, :, :n], *want))), n
