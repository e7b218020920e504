"""Position ids beyond one text stream from Python: the C++ functions' values (tests/position_ids_test.cpp
checks those against Megatron-LM's and TransformerEngine's definitions) and ropekit.Error on bad input."""
import numpy as np
import pytest

import ropekit


def test_packed_and_eod():
    assert list(ropekit.packed_positions([0, 3, 5, 9])) == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert list(ropekit.packed_positions([0, 2, 4], start_offsets=[5, 0])) == [5, 6, 0, 1]
    cu = ropekit.cu_seqlens_from_eod([7, 7, 0, 7, 0, 7], eod=0)
    assert list(cu) == [0, 3, 5, 6]
    assert ropekit.packed_positions(cu).dtype == np.int64


def test_context_parallel_ranks_partition_the_tokens():
    for sharding in ("contiguous", "zigzag", "striped"):
        held = np.concatenate([ropekit.cp_indices(16, cp_size=2, cp_rank=r, sharding=sharding) for r in range(2)])
        assert sorted(held) == list(range(16)), sharding
    assert list(ropekit.cp_indices(8, cp_size=2, cp_rank=0)) == [0, 1, 6, 7]
    assert list(ropekit.cp_positions(8, cp_size=2, cp_rank=1, start=100)) == [102, 103, 104, 105]
    cu = [0, 4, 12]
    assert list(ropekit.cp_indices(cp_size=2, cp_rank=1, cu_seqlens=cu)) == [1, 2, 6, 7, 8, 9]
    assert list(ropekit.cp_positions(cp_size=2, cp_rank=1, cu_seqlens=cu)) == [1, 2, 2, 3, 4, 5]


def test_draft_tree():
    parents = [-1, -1, 0, 2]
    assert list(ropekit.tree_positions(parents, 10)) == [11, 11, 12, 13]
    mask = ropekit.tree_mask(parents)
    assert mask.shape == (4, 4) and mask.dtype == bool
    assert mask[3].tolist() == [True, False, True, True]
    assert ropekit.rejected_slot_ranges(parents, [0, 2], 20) == [(23, 24), (21, 22)]
    assert list(ropekit.verify_positions(41, 3)) == [41, 42, 43]


@pytest.mark.parametrize("call, needle", [
    (lambda: ropekit.packed_positions([1, 3]), "cu_seqlens[0] = 1"),
    (lambda: ropekit.packed_positions([0, 4, 2]), "must not decrease"),
    (lambda: ropekit.cp_indices(10, cp_size=2, cp_rank=0), "multiple of 4"),
    (lambda: ropekit.cp_indices(8, cp_size=2, cp_rank=5), "cp rank = 5"),
    (lambda: ropekit.cp_indices(8, cp_size=2, cp_rank=0, sharding="ring"), 'sharding = "ring"'),
    (lambda: ropekit.tree_positions([-1, 1], 0), "parents[1] = 1"),
    (lambda: ropekit.rejected_slot_ranges([-1, 0], [1], 0), "accepted[0] = 1"),
])
def test_bad_input_is_an_error(call, needle):
    with pytest.raises(ropekit.Error, match=None) as info:
        call()
    assert needle in str(info.value)


def test_mrope_position_ids_equal_transformers():
    import json
    import pathlib
    data = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "mrope"
    for name, rule in (("token_types.json", "token_types"), ("token_scan.json", "token_scan")):
        golden = json.loads((data / name).read_text())
        for case in golden["cases"]:
            positions, deltas = ropekit.mrope_position_ids(
                case["family"], np.array(case["token_types"]), attention_mask=np.array(case["attention_mask"]),
                image_grid_thw=np.array(case["image_grid_thw"]).reshape(-1, 3) if case["image_grid_thw"] else None,
                video_grid_thw=np.array(case["video_grid_thw"]).reshape(-1, 3) if case["video_grid_thw"] else None,
                second_per_grid_ts=case["second_per_grid_ts"] or None, rule=rule)
            assert positions.tolist() == case["positions"], (name, case["family"], case["name"])
            assert deltas.tolist() == case["deltas"]
    assert list(ropekit.mrope_decode_positions(-3, 10, 2)) == [7, 8]
    with pytest.raises(ropekit.Error, match="spatial_merge_size = 2"):
        ropekit.mrope_position_ids("qwen2_vl", np.array([[0, 1, 1, 1, 1, 1, 1]]), image_grid_thw=np.array([[1, 5, 6]]))
    with pytest.raises(ropekit.Error, match='family = "llava"'):
        ropekit.mrope_position_ids("llava", np.array([[0]]))


def test_vision_rope_equals_transformers():
    """Each family's vision rotary against HF's own modules (tests/data/vision/, scripts/golden_vision.py):
    exact coordinates, and cos/sin of the axial Rope in HF's angle mode within table.hpp's 6e-8."""
    import json
    import pathlib
    data = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "vision" / "vision_rope.json"
    for case in json.loads(data.read_text())["cases"]:
        v = ropekit.vision_rope(case["config"])
        assert v["family"] == case["name"]
        if v["family"] == "pixtral":
            pos = ropekit.pixtral_position_ids([(h, w) for _, h, w in case["grids"]], v["patches_per_side"])
        elif v["family"] == "llama4":
            pos = ropekit.llama4_vision_position_ids(v["patches_per_side"])
        else:
            pos = ropekit.vision_position_ids(np.array(case["grids"]), v["spatial_merge_size"])
            if v["family"] == "qwen2_5_vl":
                index, cu = ropekit.vision_window_index(np.array(case["grids"]), v["spatial_merge_size"],
                                                        v["window_size"], v["patch_size"])
                assert index.tolist() == case["window_index"] and cu.tolist() == case["cu_window_seqlens"]
                pos = ropekit.window_order(pos, index, v["spatial_merge_size"] ** 2)
        if "window_index" not in case:
            assert pos.tolist() == case["positions"], case["name"]
        cos, sin = v["rope"].cos_sin(pos, layout="half", angles="hf")
        pairs = v["rope"].spec["rotary_dim"] // 2
        np.testing.assert_allclose(cos, np.array(case["cos"], np.float32).reshape(-1, pairs), rtol=0, atol=6e-8)
        np.testing.assert_allclose(sin, np.array(case["sin"], np.float32).reshape(-1, pairs), rtol=0, atol=6e-8)
    with pytest.raises(ropekit.Error, match="spatial_merge_size = 2"):
        ropekit.vision_position_ids(np.array([[1, 3, 4]]), 2)
    with pytest.raises(ropekit.Error, match='model_type "llama"'):
        ropekit.vision_rope({"model_type": "llama"})
