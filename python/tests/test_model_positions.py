"""ropekit.ModelPositions: a model's RoPE layer by layer, and Rope.from_config's one return type (issue 62)."""
import numpy as np
import pytest

import ropekit

from conftest import CONFIGS


def test_a_model_with_several_rope_layer_types():
    model = ropekit.ModelPositions.from_preset("gemma-3-4b")
    assert model.rope_layer_types == ["sliding_attention", "full_attention"]
    local, full = model.layer("sliding_attention"), model.layer("full_attention")
    assert local.spec["base"] != full.spec["base"]  # Gemma 3: 10k local, 1M global
    assert model.layer("sliding_attention") is local  # built once: one Rope, one operator handle
    assert model.ropes() == {"sliding_attention": local, "full_attention": full}
    assert model.at_layer(5) is full and model.at_layer(0) is local  # 5 local layers, then a global one
    assert model.to_dict() == ropekit.model_positions_preset("gemma-3-4b")
    with pytest.raises(ropekit.Error, match=r"layer_type = None.*several RoPE layer types "
                                            r"\(sliding_attention, full_attention\)"):
        model.layer()
    with pytest.raises(ropekit.Error, match="no_such_type"):
        model.layer("no_such_type")
    with pytest.raises(ropekit.Error, match="1000"):
        model.at_layer(1000)


def test_from_config_gives_one_rope_or_a_deprecated_dict():
    # One plan: a Rope, as before.
    assert isinstance(ropekit.Rope.from_preset("llama-3.1-8b"), ropekit.Rope)
    # Several: a dict for one more version, with a DeprecationWarning naming what replaces it.
    with pytest.warns(DeprecationWarning, match=r"ModelPositions\.from_config\(\.\.\.\)\.ropes\(\)"):
        ropes = ropekit.Rope.from_config(str(CONFIGS / "gemma-2-2b.json"))
    model = ropekit.ModelPositions.from_config(str(CONFIGS / "gemma-2-2b.json"))
    assert set(ropes) == set(model.rope_layer_types)
    for layer_type, rope in ropes.items():
        assert np.array_equal(rope.inv_freq64, model.layer(layer_type).inv_freq64)
    picked = ropekit.Rope.from_config(str(CONFIGS / "gemma-2-2b.json"), layer_type="full_attention")
    assert np.array_equal(picked.inv_freq64, model.layer("full_attention").inv_freq64)


def test_a_layer_without_rope_is_named():
    model = ropekit.ModelPositions.from_config(str(CONFIGS / "llama-4-scout-17b-16e.json"))
    nope = [i for i, t in enumerate(model.layer_types) if t not in model.rope_layer_types]
    assert nope, "Llama 4 has NoPE layers"
    with pytest.raises(ropekit.Error, match=rf"layer {nope[0]} has no RoPE"):
        model.at_layer(nope[0])
    assert isinstance(model.layer(), ropekit.Rope)  # its one RoPE layer type
