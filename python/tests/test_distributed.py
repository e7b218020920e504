"""ropekit.distributed on real gloo process groups (one process per rank on 127.0.0.1, a fixed timeout in
init_process_group and on the run): world sizes 2, 3 (odd) and 4; every sharding, the three attention modes (all-gather, ring, Ulysses), one sequence and packed documents,
with and without a sliding window. A tiny attention layer's training step (loss and backward) sharded over the ranks
gives the one-process output and parameter gradients, and so does a whole transformers model's under
context_parallel (Llama; Qwen3, QK-norm; Qwen2-VL's text model, M-RoPE streams sharded with the tokens) against its
eager attention in one process; the mutations users hit (rotating at local positions, a
zig-zag shard rotated with the contiguous shard's positions) do not; bad arguments raise ropekit.Error on every rank.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
try:  # the transformers models' cases run where transformers is installed (the torch tier's venv)
    import transformers  # noqa: F401
    HF = True
except ImportError:
    HF = False


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=[2, 3, 4])
def ranks(request, tmp_path_factory):
    """The worker's ranks as processes of their own, torchrun's environment given by hand (env:// rendezvous on
    127.0.0.1; Debian's torch 1.13 launcher fails under Python 3.11, so no launcher), each run bounded."""
    world = request.param
    out = tmp_path_factory.mktemp(f"world{world}")
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(world),
                   RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_worker.py"), str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    failures = []
    for rank, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"world {world}: rank {rank} ran past 240 s")
        if p.returncode != 0:
            failures.append(f"rank {rank}: exit {p.returncode}\n{err[-3000:]}")
    assert not failures, "\n".join(failures)
    return world, [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_a_sharded_training_step_equals_one_process(ranks):
    world, results = ranks
    cases = [k for k in results[0] if k not in ("errors", "traffic")]
    assert len(cases) == 3 * 3 * 2 * 2 + (3 * 3 + 1 if HF else 0)
    for r, res in enumerate(results):
        for case in cases:
            got = res[case]
            assert got["out"] <= 1e-6, (world, r, case, got["out"])
            for name, g in got["grads"].items():
                assert g <= 1e-5, (world, r, case, name, g)


def test_rotating_at_the_wrong_positions_is_caught(ranks):
    world, results = ranks
    for res in results:
        for case, got in res.items():
            if case in ("errors", "traffic"):
                continue
            assert "local positions" in got["mutations"]
            if case.startswith("zigzag/") and "/one/" in case:
                assert "contiguous positions" in got["mutations"]
            for name, diff in got["mutations"].items():
                assert diff > 1e-3, (world, case, name, diff)


def test_bad_arguments_raise_on_every_rank(ranks):
    world, results = ranks
    for r, res in enumerate(results):
        e = res["errors"]
        assert "multiple of" in e["zigzag length"] and "seq_len" in e["zigzag length"], e["zigzag length"]
        assert "document" in e["packed document"] and "multiple of" in e["packed document"], e["packed document"]
        assert f"cp_size = {world + 1}" in e["cp_size"] and f"{world} ranks" in e["cp_size"], e["cp_size"]
        assert "disagree" in e["disagree"], e["disagree"]
        assert "ring" in e["sharding"], e["sharding"]
        assert "mode = 'ulysses-typo'" in e["mode"], e["mode"]
        assert "tensor 0" in e["shard length"] and str(4 * world + 1) in e["shard length"], e["shard length"]
        assert "5 query tokens" in e["query tokens"], e["query tokens"]
        if HF:
            assert "mode = 'flash'" in e["hf mode"], e["hf mode"]
        assert "only inside context_parallel" in e["hf outside"], e["hf outside"]
        assert "heads (5)" in e["ulysses heads"] and f"world size ({world})" in e["ulysses heads"], e["ulysses heads"]


def test_bytes_sent_are_each_modes_theory_and_zigzag_balances_the_work(ranks):
    world, results = ranks
    for mode in ("allgather", "ring", "ulysses"):
        for res in results:
            t = res["traffic"][mode]
            assert t["bytes"] == t["theory"], (world, mode, t)
        scores = [res["traffic"][mode]["scores"] for res in results]
        assert max(scores) <= 1.05 * sum(scores) / world, (world, mode, scores)
