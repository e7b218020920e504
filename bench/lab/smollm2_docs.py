"""Helpers of bench/lab/smollm2_docs.sh (issue 43 item 4): token ids for ropekit's lab from a real model's own
tokenizer, and a check of ropekit's numbers on that model against transformers'.

  smollm2_docs.py tokens GGUF SOURCES_DIR OUT.i32 DOCS   the DOCS largest reST sources, each as BOS + its tokens
  smollm2_docs.py check GGUF TOKENS.i32 ROPEKIT.csv N    transformers' per-position NLL over the first N tokens
                                                         against ropekit's (a CSV with one bucket per position)
"""
import csv
import pathlib
import sys

import numpy as np


def tokenizer(gguf):
    from transformers import AutoTokenizer

    path = pathlib.Path(gguf)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def tokens(gguf, sources, out, docs):
    tok = tokenizer(gguf)
    files = sorted(pathlib.Path(sources).rglob("*.rst.txt"), key=lambda p: (-p.stat().st_size, str(p)))[: int(docs)]
    ids = []
    for f in files:
        doc = tok(f.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
        # The lab starts a window at a BOS (the file's tokenizer.ggml.bos_token_id): one per document.
        ids += [tok.bos_token_id] + doc
        print(f"{f.relative_to(sources)}: {f.stat().st_size} bytes, {len(doc)} tokens")
    np.asarray(ids, dtype=np.int32).tofile(out)
    print(f"{out}: {len(ids)} tokens from {len(files)} documents")


def check(gguf, token_file, ropekit_csv, n):
    import torch
    from transformers import AutoModelForCausalLM

    n = int(n)
    path = pathlib.Path(gguf)
    # transformers dequantizes the GGUF's blocks with the gguf package to float32; eager attention, float32.
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    ids = np.fromfile(token_file, dtype=np.int32)[:n].astype(np.int64)
    with torch.no_grad():
        logits = model(torch.tensor(ids[None])).logits[0].double()
    hf = -torch.log_softmax(logits, -1)[torch.arange(n - 1), torch.tensor(ids[1:])].numpy()
    ours = {int(r["bucket_lo"]): float(r["mean_nll"]) for r in csv.DictReader(open(ropekit_csv))}
    diff = np.array([abs(ours[p] - hf[p - 1]) for p in range(1, n)])
    print(
        f"{n - 1} positions: max |NLL(ropekit) - NLL(transformers)| = {diff.max():.3g}, mean {diff.mean():.3g}; "
        f"mean NLL {hf.mean():.6f}"
    )
    # Both read the same float32 weights; what differs is float32 summation order over 30 layers. A gap of 1e-3
    # nats would mean a different model (a wrong RoPE pairing, norm or dequantization moves it by > 0.1).
    if diff.max() > 1e-3:
        sys.exit("ropekit and transformers disagree on this model")


if __name__ == "__main__":
    {"tokens": tokens, "check": check}[sys.argv[1]](*sys.argv[2:])
