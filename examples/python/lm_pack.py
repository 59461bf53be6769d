#!/usr/bin/python3
"""A language-model feed from Python: documents of a token file packed into rows, with document
ids and positions, training a small next-token model in PyTorch.

The script writes its corpus first, as a tokenizer's output usually is: one flat uint16 token file
(``numpy.ndarray.tofile``) and the documents' offsets (n_docs + 1 uint64). Each document follows a
rule a model can learn (t[i+1] = (5 * t[i] + 3) mod 64) from a random first token, 5 to 300 tokens
long. Then:

    src = sluice.documents("corpus.bin", offsets="offsets.bin", collate="pack", length=128,
                           output="int64")
    for batch in sluice.Loader(src, batch_size=16, workers=2):      # 16 documents a batch
        tokens = torch.from_dlpack(batch["tokens"])                 # int64 (rows, 128)
        doc = torch.from_dlpack(batch["tokens.doc_ids"])            # int32 (rows, 128), -1 on padding
        # a target only where the next token belongs to the same document
        same = (doc[:, 1:] == doc[:, :-1]) & (doc[:, 1:] >= 0)

The number of rows changes with the batch's documents (16 documents of 5..300 tokens filled 9 to
24 rows of 128 here); "tokens.position_ids" restart at each document and each row, "tokens.cu_seqlens"
mark the segments for variable-length attention kernels.

Checks, exit 0 only if both hold: every token of the corpus arrives exactly once an epoch, each
row's segments being pieces of one document in order; the model's loss falls below 0.5 nats
(from about 4.2, ln 64) within three epochs.

    PYTHONPATH=build/ci/python/module /usr/bin/python3 examples/python/lm_pack.py
"""
import argparse
import os
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - the test reports Skipped
    print(f"skipped: {e}")
    sys.exit(77)

import sluice

VOCAB, LENGTH = 64, 128


def write_corpus(folder, n_docs):
    rng = np.random.default_rng(5)
    docs = []
    for _ in range(n_docs):
        t = [int(rng.integers(0, VOCAB))]
        for _ in range(int(rng.integers(5, 301)) - 1):
            t.append((5 * t[-1] + 3) % VOCAB)
        docs.append(np.array(t, dtype=np.uint16))
    np.concatenate(docs).tofile(os.path.join(folder, "corpus.bin"))
    np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.uint64).tofile(
        os.path.join(folder, "offsets.bin"))
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="sluice-lm-") as d:
        docs = write_corpus(d, args.docs)
        src = sluice.documents(os.path.join(d, "corpus.bin"), offsets=os.path.join(d, "offsets.bin"),
                               collate="pack", length=LENGTH, output="int64")
        loader = sluice.Loader(src, batch_size=16, workers=2, sampler=sluice.sample.shuffle(seed=3))
        model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        whole = True
        rows_seen = set()
        for epoch in range(args.epochs):
            pieces = []  # (document content) of every segment, to rebuild the corpus
            losses = []
            for batch in loader:
                tokens = torch.from_dlpack(batch["tokens"])
                doc = torch.from_dlpack(batch["tokens.doc_ids"]).long()
                rows_seen.add(tokens.shape[0])
                same = (doc[:, 1:] == doc[:, :-1]) & (doc[:, 1:] >= 0)
                logits = model(tokens[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits[same], tokens[:, 1:][same])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                for r in range(tokens.shape[0]):  # each row's segments, in order
                    ids, toks = doc[r].tolist(), tokens[r].tolist()
                    start = 0
                    for i in range(1, LENGTH + 1):
                        if i == LENGTH or ids[i] != ids[start]:
                            if ids[start] >= 0:
                                pieces.append(toks[start:i])
                            start = i
            # Every document once: the pieces, joined where a document continues in the next row,
            # hold exactly the corpus's tokens.
            got = sorted(t for p in pieces for t in p)
            want = sorted(int(t) for doc_tokens in docs for t in doc_tokens)
            ok_epoch = got == want and all(all(b == (5 * a + 3) % VOCAB for a, b in zip(p, p[1:])) for p in pieces)
            whole = whole and ok_epoch
            print(f"epoch {epoch}: {len(losses)} batches, rows per batch {min(rows_seen)}..{max(rows_seen)}, "
                  f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, every token once: {ok_epoch}")
        final = losses[-1]
    return 0 if whole and final < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
