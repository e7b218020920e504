"""scripts/llama2c_to_hf.py: the bundled llama2.c checkpoint as a Hugging Face Llama gives ropekit's runner's logits
(the q/k rows permuted from interleaved to rotate_half pairs; without the permutation they differ), and a malformed
file is an error naming the sizes. Issue 63: the Python lab compares itself with the C++ lab through this model."""
import importlib.util
import struct

import numpy as np
import pytest

import ropekit

from conftest import REPO

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

MODEL = REPO / "models" / "tinystories-260k.bin"


def _script():
    spec = importlib.util.spec_from_file_location("llama2c_to_hf", REPO / "scripts" / "llama2c_to_hf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_permutation_takes_interleaved_pairs_to_rotate_half_pairs():
    conv = _script()
    heads, head, width = 3, 8, 5
    w = np.arange(heads * head * width, dtype=np.float32).reshape(heads * head, width)
    got = conv.half_rows(w, heads)
    for h in range(heads):
        for j in range(head // 2):
            assert np.array_equal(got[h * head + j], w[h * head + 2 * j])
            assert np.array_equal(got[h * head + j + head // 2], w[h * head + 2 * j + 1])


def test_the_hugging_face_model_gives_the_runners_logits():
    conv = _script()
    tok = ropekit.Tokenizer(str(REPO / "models" / "tok512.bin"))
    tokens = tok.encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.")
    tokens = (tokens * 4)[:160]  # positions 0 … len − 1, past the first few dozen
    want = ropekit.Model(str(MODEL)).logits(tokens)
    hf = conv.convert(MODEL)
    with torch.no_grad():
        got = hf(torch.tensor([tokens])).logits[0].numpy()
    scale = np.abs(want).max()
    # float32 both; ropekit rotates with exact angles, HF with its float32 angle expression, and the two sum the
    # projections (at most 172 terms) in different orders: within 1e-5 of the logits' scale.
    err = np.abs(got - want).max() / scale
    assert err < 1e-5, err
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
    # Without the q/k permutation HF rotates the wrong lane pairs: far off.
    header, weights = conv.read_llama2c(MODEL)
    config, sd = conv.to_hf(header, weights)
    for i in range(header["n_layers"]):
        sd[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.from_numpy(weights["wq"][i].copy())
        sd[f"model.layers.{i}.self_attn.k_proj.weight"] = torch.from_numpy(weights["wk"][i].copy())
    hf.load_state_dict(sd, strict=False)
    with torch.no_grad():
        wrong = hf(torch.tensor([tokens])).logits[0].numpy()
    assert np.abs(wrong - want).max() / scale > 100 * err


def test_a_malformed_checkpoint_is_an_error_naming_the_sizes(tmp_path):
    conv = _script()
    data = MODEL.read_bytes()
    short = tmp_path / "short.bin"
    short.write_bytes(data[:-4])
    with pytest.raises(conv.FormatError, match=r"float32 weights after the header; the header's shapes need"):
        conv.read_llama2c(short)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(struct.pack("<7i", 64, 172, 5, 8, 3, 512, 512) + data[28:])
    with pytest.raises(conv.FormatError, match="n_kv_heads 3"):
        conv.read_llama2c(bad)
    with pytest.raises(conv.FormatError, match="28 bytes"):
        (tmp_path / "tiny.bin").write_bytes(b"\0" * 8)
        conv.read_llama2c(tmp_path / "tiny.bin")
