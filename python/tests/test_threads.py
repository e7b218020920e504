"""Python threads sharing ropekit objects (docs/python.md, "Threads"): each sentence there run by several threads
released together, every result compared with a serial run. The calls release the GIL, so the threads really
overlap in the library; the tsan part of the test command runs this file in a ThreadSanitizer build of the
module (tsan.python_threads), where a missing lock is a reported race, not a lucky pass."""
import os
import threading

import numpy as np
import pytest

import ropekit

from conftest import REPO

THREADS = 4


def together(*workers):
    """Runs each worker on its own thread, all released at once; re-raises the first failure."""
    barrier = threading.Barrier(len(workers))
    failures = []

    def run(work):
        try:
            barrier.wait(timeout=60)
            work()
        except BaseException as e:  # noqa: BLE001 - reported below, on the test's thread
            failures.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
        assert not t.is_alive(), "a worker did not finish in 600 s (a deadlock?)"
    if failures:
        raise failures[0]


def qk(seed, seq=9, heads=4, d=64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, seq, heads, d)).astype(np.float32),
            rng.standard_normal((1, seq, heads // 2, d)).astype(np.float32))


def test_tsan_runtime_is_loaded_when_asked():
    """The tsan part sets ROPEKIT_EXPECT_TSAN: its pass means the module ran under the sanitizer."""
    if not os.environ.get("ROPEKIT_EXPECT_TSAN"):
        pytest.skip("not the ThreadSanitizer run")
    import ctypes

    assert hasattr(ctypes.CDLL(None), "__tsan_init"), "ThreadSanitizer's runtime is not in the process"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_one_rope_shared_by_threads():
    """rope.apply / rope.prepare from many threads on one Rope (the "hf" angles' Rope made on first use by
    whichever thread comes first), while another thread calls set_current_length (a static plan: the same numbers)."""
    config = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    shared = ropekit.Rope(64, base=500000.0, rope_scaling=config)
    serial = ropekit.Rope(64, base=500000.0, rope_scaling=config)
    jobs = [(qk(i), np.arange(9) * (i + 1) * 977 + i, "hf" if i % 2 else "accurate") for i in range(12)]
    want = [serial.apply(q, k, p, inplace=False, angles=a) for (q, k), p, a in jobs]

    def rotate(t):
        def work():
            for _ in range(3):
                for i in range(t, len(jobs), THREADS):
                    (q, k), p, a = jobs[i]
                    if i % 3 == 0:
                        got = shared.prepare(q, k, p, inplace=False, angles=a).run()
                    else:
                        got = shared.apply(q, k, p, inplace=False, angles=a)
                    for g, w in zip(got, want[i]):
                        np.testing.assert_array_equal(g, w, err_msg=f"job {i}")
        return work

    def relength():
        for n in range(20):
            shared.set_current_length(1000 + n)

    together(*[rotate(t) for t in range(THREADS)], relength)


def test_one_rotate_call_shared_by_threads():
    """RotateCall.run and set_positions from several threads: one at a time, so a run never reads positions that
    set_positions is replacing; every thread sets the same positions, so every output is the serial one."""
    rope = ropekit.Rope(64)
    q, k = qk(1, seq=33)
    call = rope.prepare(q, k, np.arange(33), inplace=False)
    positions = [np.arange(33) + 100 * j for j in range(6)]
    want = [rope.apply(q, k, p, inplace=False) for p in positions]
    finals = []

    def work():
        for j, p in enumerate(positions):
            call.set_positions(p)
            call.run()
            finals.append(j)

    together(*[work for _ in range(THREADS)])
    assert len(finals) == THREADS * len(positions)
    # The last writer's positions are the call's; its outputs are that rotation, whole.
    call.set_positions(positions[-1])
    for g, w in zip(call.run(), want[-1]):
        np.testing.assert_array_equal(g, w)


def test_paged_cache_writers_and_attention_readers():
    """One PagedKvCache: two threads append to their own sequences token by token while two run attention over a
    third, filled before, and read its page table; afterwards every sequence attends as in a cache filled serially."""
    rope = ropekit.Rope(64)
    rng = np.random.default_rng(3)
    n = 24
    ks = [rng.standard_normal((n, 2, 64)).astype(np.float32) for _ in range(3)]
    vs = [rng.standard_normal((n, 2, 64)).astype(np.float32) for _ in range(3)]
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    shared = ropekit.PagedKvCache(rope, 32, 4, 2, 3, dtype="bfloat16")
    serial = ropekit.PagedKvCache(rope, 32, 4, 2, 3, dtype="bfloat16")
    shared.append(rope, [2] * n, ks[2], vs[2])
    for s in range(3):
        serial.append(rope, [s] * n, ks[s], vs[s])
    want = [serial.attention(rope, q, [n], [s]) for s in range(3)]

    def writer(s):
        def work():
            for t in range(n):
                shared.append(rope, [s], ks[s][t:t + 1], vs[s][t:t + 1])
        return work

    def reader():
        for _ in range(30):
            np.testing.assert_array_equal(shared.attention(rope, q, [n], [2]), want[2])
            indices, indptr, last = shared.page_table([2])
            assert list(indptr) == [0, 6] and list(last) == [4]
            np.testing.assert_array_equal(shared.positions(2), np.arange(n))

    together(writer(0), writer(1), reader, reader)
    for s in range(3):
        np.testing.assert_array_equal(shared.positions(s), np.arange(n))
        np.testing.assert_array_equal(shared.attention(rope, q, [n], [s]), want[s], err_msg=f"sequence {s}")
    assert shared.free_pages == serial.free_pages == 32 - 18


def test_kv_cache_changed_while_read():
    """One KvCache: a thread appends, K-shifts and erases while others read it; every read sees a whole state
    (positions 0..len-1 after each append-or-shift pair), and the end state is the serial one's."""
    rope = ropekit.Rope(64)
    rng = np.random.default_rng(4)
    k = rng.standard_normal((40, 2, 64)).astype(np.float32)
    v = rng.standard_normal((40, 2, 64)).astype(np.float32)

    def history(cache):
        for t in range(40):
            cache.append(rope, k[t:t + 1], v[t:t + 1], [t + 5])
            cache.shift(len(cache) - 1, len(cache), -5)  # back to position t
            if t % 10 == 9:
                cache.erase(0, 2)
                cache.shift(0, len(cache), -2)

    serial = ropekit.KvCache(rope, 40, 2)
    history(serial)
    shared = ropekit.KvCache(rope, 40, 2)
    seen = []

    def reader():
        for _ in range(60):
            p = shared.positions()
            keys = shared.keys()
            seen.append(len(p))
            assert keys.shape[1:] == (2, 64) and np.isfinite(keys).all()
            assert len(p) <= 40 and (np.diff(p) > 0).all()
            if len(p):
                out = shared.attention(rope, k[:1, :, :].repeat(2, axis=1), [int(p[-1])])
                assert np.isfinite(out).all()

    together(lambda: history(shared), reader, reader)
    np.testing.assert_array_equal(shared.positions(), serial.positions())
    np.testing.assert_array_equal(shared.keys(), serial.keys())
    np.testing.assert_array_equal(shared.values(), serial.values())


def test_rope_set_from_threads():
    """RopeSet.at at changing lengths from several threads (dynamic NTK: a plan per length, evictions past
    max_ropes), each Rope applied: the numbers of a RopeSet used serially."""
    rope = ropekit.Rope(64, rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=256)
    shared = ropekit.RopeSet(rope, max_ropes=4)
    serial = ropekit.RopeSet(rope)
    lengths = [100, 300, 700, 256, 1000, 300, 4000, 512, 2048]
    q, k = qk(5)
    p = np.arange(9) * 37
    want = {n: serial.at(n).apply(q, k, p, inplace=False) for n in lengths}

    def work(t):
        def run():
            for r in range(5):
                for n in lengths[t::2] + lengths[r % 3::3]:
                    for g, w in zip(shared.at(n).apply(q, k, p, inplace=False), want[n]):
                        np.testing.assert_array_equal(g, w, err_msg=f"length {n}")
        return run

    together(*[work(t) for t in range(THREADS)])


class TensorLike:
    """What the PyTorch operators' binding reads of a torch tensor (dtype, shape, stride(), data_ptr()), over a
    NumPy array: the operator path without PyTorch."""

    NAMES = {np.dtype(np.float32): "torch.float32", np.dtype(np.int64): "torch.int64"}

    def __init__(self, a):
        self.a, self.dtype, self.shape = a, self.NAMES[a.dtype], a.shape

    def stride(self):
        return tuple(s // self.a.itemsize for s in self.a.strides)

    def data_ptr(self):
        return self.a.ctypes.data


def test_operator_handles_from_threads():
    """The PyTorch operators' path: rotations by handle without the GIL on several threads while others make
    handles for new Ropes and drop them (the registry sweeps freed ones past 64 entries) and look handles up."""
    from ropekit import _ropekit as native

    rope = ropekit.Rope(64, base=10000.0)
    handle = native._torch_handle(rope)
    jobs = [(qk(10 + i), np.arange(9, dtype=np.int64) * (i + 3)) for i in range(8)]
    angles = ["hf" if i % 2 else "accurate" for i in range(len(jobs))]
    want = [rope.apply(q, k, p, inplace=False, angles=a) for ((q, k), p), a in zip(jobs, angles)]

    def rotator(t):
        def work():
            for _ in range(4):
                for i in range(t, len(jobs), 2):
                    (q, k), p = jobs[i]
                    qo, ko = np.empty_like(q), np.empty_like(k)
                    native._rotate_torch(handle, TensorLike(q), TensorLike(k), TensorLike(qo), TensorLike(ko),
                                         TensorLike(p), "bshd", "forward", angles[i])
                    np.testing.assert_array_equal(qo, want[i][0], err_msg=f"job {i}")
                    np.testing.assert_array_equal(ko, want[i][1], err_msg=f"job {i}")
        return work

    def churn():
        for j in range(150):
            scratch = ropekit.Rope(32, base=1000.0 + j)
            h = native._torch_handle(scratch)
            assert native._torch_handle(scratch) == h
            assert native._torch_rope(handle) is not None
            del scratch

    together(rotator(0), rotator(1), churn, churn)
    assert native._torch_registered() < 200  # swept: not one entry per Rope ever made


def test_one_model_shared_by_threads():
    """One Model's logits from several threads at once (each call its own runner): the serial logits, bit for bit."""
    model = ropekit.Model(str(REPO / "models" / "tinystories-260k.bin"))
    prompts = [[1, 403, 407, 261 + t, 378] for t in range(THREADS)]
    want = [model.logits(p, threads=1) for p in prompts]

    def work(t):
        def run():
            for _ in range(3):
                np.testing.assert_array_equal(model.logits(prompts[t], threads=1), want[t])
        return run

    together(*[work(t) for t in range(THREADS)])
