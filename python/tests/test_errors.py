"""Every class of bad input raises ropekit.Error (a ValueError) naming the problem — never a crash, never a
silent copy that would break inplace=True."""
import numpy as np
import pytest
import torch

import ropekit


@pytest.fixture
def rope():
    return ropekit.Rope(64)


def test_error_is_a_value_error():
    assert issubclass(ropekit.Error, ValueError)


@pytest.mark.parametrize("make,match", [
    (lambda: np.zeros((1, 2, 1, 64), np.float64), "dtype float64"),
    (lambda: np.zeros((1, 2, 1, 64), np.int32), "dtype"),
    (lambda: np.zeros((1, 2, 1, 64), np.uint16), 'dtype="bf16"'),
    (lambda: torch.zeros(1, 2, 1, 64, dtype=torch.float64), "torch.float64"),
    (lambda: [[[[0.0] * 64]]], "NumPy arrays and PyTorch CPU tensors"),
])
def test_wrong_dtype_or_type(rope, make, match):
    with pytest.raises(ropekit.Error, match=match):
        rope.apply(make())


@pytest.mark.parametrize("shape,layout,match", [
    ((2, 1, 32), "bshd", "3 dimensions"),
    ((1, 2, 1, 63), "bshd", "head_dim 63"),
    ((1, 2, 1, 64), "thd", "layout \"thd\" needs 3"),
    ((2, 1, 64), "bogus", "layout = \"bogus\""),
])
def test_wrong_shape_or_layout(rope, shape, layout, match):
    with pytest.raises(ropekit.Error, match=match):
        rope.apply(np.zeros(shape, np.float32), layout=layout)


def test_views_ropekit_cannot_express(rope):
    x = np.zeros((1, 2, 1, 128), np.float32)
    with pytest.raises(ropekit.Error, match="stride 2"):
        rope.apply(x[..., ::2])
    with pytest.raises(ropekit.Error, match="negative stride"):
        rope.apply(np.zeros((1, 2, 1, 64), np.float32)[:, ::-1])
    odd = np.ndarray((1, 2, 1, 64), np.float32, np.zeros(600, np.uint8).data, 0, (512, 258, 256, 4))
    with pytest.raises(ropekit.Error, match="not a whole number"):
        rope.apply(odd)


def test_too_few_or_misshapen_positions(rope):
    x = np.zeros((2, 3, 1, 64), np.float32)
    with pytest.raises(ropekit.Error, match="does not fit 6 tokens"):
        rope.apply(x, None, np.arange(2))
    with pytest.raises(ropekit.Error, match="does not fit"):
        rope.apply(x, None, np.zeros((3, 2), np.int64))
    with pytest.raises(ropekit.Error, match="int32 or int64"):
        rope.apply(x, None, np.zeros((2, 3), np.float32))
    with pytest.raises(ropekit.Error, match=r"\[0, 2\^47\)"):
        rope.apply(x, None, np.array([0, 1, -4]))
    with pytest.raises(ropekit.Error, match="three position streams"):
        ropekit.Rope(64, mrope_section=[8, 12, 12]).apply(x, None, np.zeros((2, 3), np.int64))


def test_read_only_array_in_place(rope):
    x = np.zeros((1, 2, 1, 64), np.float32)
    x.setflags(write=False)
    with pytest.raises(ropekit.Error, match="read-only"):
        rope.apply(x)
    y = rope.apply(x, inplace=False)  # out of place is fine
    assert y is not x and y.flags.writeable


def test_q_and_k_must_hold_the_same_tokens(rope):
    with pytest.raises(ropekit.Error, match="different tokens"):
        rope.apply(np.zeros((1, 2, 1, 64), np.float32), np.zeros((1, 3, 1, 64), np.float32))


def test_overlapping_in_place_rows(rope):
    x = np.zeros((1, 64 * 3), np.float32)
    overlapping = np.lib.stride_tricks.as_strided(x, (1, 3, 2, 64), (0, 64 * 4, 32 * 4, 4), writeable=True)
    with pytest.raises(ropekit.Error, match="overlap"):
        rope.apply(overlapping)


@pytest.mark.parametrize("call,match", [
    (lambda: ropekit.Rope.from_preset("no-such-model"), "no-such-model"),
    (lambda: ropekit.Rope(64, rotary_dim=63), "rotary_dim = 63"),
    (lambda: ropekit.Rope(64, pairing="zigzag"), "pairing = \"zigzag\""),
    (lambda: ropekit.Rope(64, base=0.5), "0.5"),
    (lambda: ropekit.Rope(64, rope_scaling={"rope_type": "yarn"}), "original_max_position_embeddings"),
    (lambda: ropekit.Rope(64, rope_scaling={"rope_type": "linear", "factor": "x"}), "factor"),
    (lambda: ropekit.Rope.from_config({"model_type": "llama", "head_dim": 64, "rope_theta": "big"}), "rope_theta"),
    (lambda: ropekit.Rope.from_config("/nonexistent/config.json"), "config.json"),
    (lambda: ropekit.Rope.from_gguf("/nonexistent/model.gguf"), "model.gguf"),
    (lambda: ropekit.Rope(64).apply(np.zeros((1, 1, 1, 64), np.float32), direction="sideways"), "sideways"),
    (lambda: ropekit.Rope(64).apply(np.zeros((1, 1, 1, 64), np.float32), angles="exact"), "angles"),
    (lambda: ropekit.Rope(64).cos_sin([1, 2], layout="full"), "layout"),
    (lambda: ropekit.Rope(64).set_current_length(0), "current"),
    (lambda: ropekit.KvCache(ropekit.Rope(64), 0, 1), "capacity"),
])
def test_bad_arguments_name_the_field(call, match):
    with pytest.raises(ropekit.Error, match=match):
        call()


def test_torch_tensor_off_the_cpu_or_requiring_grad(rope):
    meta = torch.zeros(1, 2, 1, 64, device="meta")
    with pytest.raises(ropekit.Error, match="meta"):
        rope.apply(meta)


OUT_OF_MEMORY = r"""
import resource, sys
import numpy as np
import ropekit

rope = ropekit.Rope(64)
status = [l for l in open("/proc/self/status") if l.startswith("VmSize")][0]
in_use = int(status.split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (in_use + (256 << 20), resource.RLIM_INFINITY))
made = []
for name, make in [
    ("KvCache", lambda: ropekit.KvCache(rope, 1 << 18, 8)),  # 1 GiB of keys and values
    ("PagedKvCache", lambda: ropekit.PagedKvCache(rope, 1 << 12, 64, 8, 4)),
]:
    try:
        made.append(make())
        print(name, "made")
    except MemoryError as e:
        print(name, "MemoryError", e)
    made.clear()
# The interpreter and the module go on: a cache that fits is made and used.
cache = ropekit.KvCache(rope, 64, 2)
k = np.ones((4, 2, 64), np.float32)
cache.append(rope, k, k)
print("after", len(cache))
"""


def test_out_of_memory_is_a_memory_error_and_the_module_goes_on():
    """std::bad_alloc reaches Python as MemoryError (in a child whose address space is capped 256 MiB above what it
    uses), and the module works after it."""
    import os
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "KvCache MemoryError std::bad_alloc" in lines, run.stdout
    assert "PagedKvCache MemoryError std::bad_alloc" in lines, run.stdout
    assert lines[-1] == "after 4", run.stdout
