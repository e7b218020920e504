"""ropekit.RopeSet: immutable Ropes per current length (ropekit/rope_set.hpp) from Python — each length's plan that of
a Rope made for that length, one shared object per plan, and a set's Rope never changes."""
import numpy as np
import pytest

import ropekit

DYNAMIC = dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=1024)
LONGROPE = dict(rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [4.0] * 32,
                              "original_max_position_embeddings": 512}, max_position_embeddings=4096)


def test_each_length_has_the_plan_of_a_rope_made_for_it():
    ropes = ropekit.RopeSet(ropekit.Rope(64, **DYNAMIC))
    for length in (1, 1000, 1024, 1025, 3000, 70000):
        want = ropekit.Rope(64, **DYNAMIC, current_length=length)
        got = ropes.at(length)
        assert np.array_equal(got.inv_freq64, want.inv_freq64), length
        assert got.cos_sin_scale == want.cos_sin_scale


def test_lengths_with_one_plan_share_one_rope():
    ropes = ropekit.RopeSet(ropekit.Rope(64, **DYNAMIC))
    short = ropes.at(10)
    assert all(ropes.at(n) is short for n in (1, 500, 1024))  # dynamic NTK: unscaled up to 1024
    assert ropes.at(2048) is not short and ropes.at(2048) is ropes.at(2048)
    longrope = ropekit.RopeSet(ropekit.Rope(64, **LONGROPE))
    assert longrope.at(100) is longrope.at(512)  # short factors
    assert longrope.at(513) is longrope.at(4000) and longrope.at(513) is not longrope.at(512)
    plain = ropekit.RopeSet(ropekit.Rope(64))
    assert plain.at(7) is plain.at(100000) is plain.initial  # a plan that ignores the length
    assert len(plain) == 0


def test_a_sets_rope_never_changes():
    ropes = ropekit.RopeSet(ropekit.Rope(64, **DYNAMIC))
    r = ropes.at(4096)
    before = r.inv_freq64.copy()
    with pytest.raises(ropekit.Error, match=r"RopeSet\.at\(4096\).*at\(100\)"):
        r.set_current_length(100)
    assert np.array_equal(r.inv_freq64, before)
    # A Rope of its own still follows set_current_length for one version, with a DeprecationWarning.
    own = ropekit.Rope(64, **DYNAMIC)
    with pytest.warns(DeprecationWarning, match=r"RopeSet\(rope\)\.at\(length\)"):
        own.set_current_length(4096)
    assert np.array_equal(own.inv_freq64, before)


def test_the_set_keeps_at_most_max_ropes_plans():
    ropes = ropekit.RopeSet(ropekit.Rope(64, **DYNAMIC), max_ropes=2)
    held = [ropes.at(n) for n in (2048, 3000, 4000, 5000)]
    assert len(ropes) <= 2
    assert np.array_equal(held[0].inv_freq64, ropekit.Rope(64, **DYNAMIC, current_length=2048).inv_freq64)
    bucketed = ropekit.RopeSet(ropekit.Rope(64, **DYNAMIC), length_bucket=1024)
    assert bucketed.planned_length(1500) == 2048 and bucketed.at(1500) is bucketed.at(2048)


def test_bad_input_is_an_error_naming_the_value():
    rope = ropekit.Rope(64, **DYNAMIC)
    with pytest.raises(ropekit.Error, match="max_ropes = 0"):
        ropekit.RopeSet(rope, max_ropes=0)
    with pytest.raises(ropekit.Error, match="length_bucket"):
        ropekit.RopeSet(rope, length_bucket=0)
    with pytest.raises(ropekit.Error, match="0"):
        ropekit.RopeSet(rope).at(0)
