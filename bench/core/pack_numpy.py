#!/usr/bin/python3
"""NumPy reference for pack<"tokens">{.length = L} (stage/field_collate.hpp), run by
sluice_bench_fields (BM_pack_numpy) on the documents and order it writes.

Per batch of documents (the same batches as sluice's collate): the tokens concatenated into rows
of L (the last row padded with 0), doc_ids (index of the document in the batch, -1 on padding),
position_ids (restarting at 0 at each segment) and cu_seqlens (boundaries of the segments of the
flattened rows: each piece of a document within a row, and the trailing padding, is a segment).
Vectorised as a NumPy user would write it: np.concatenate, np.repeat, np.cumsum, np.unique.

Prints one line: "<tokens> <seconds> <checksum>", where tokens/seconds cover whole epochs repeated
for at least --min-time seconds, and checksum is the sum of every value of every output of the
first epoch (sluice_bench_fields checks it against sluice's).
"""
import argparse
import time

import numpy as np


def pack_batch(tokens, starts, ids, L):
    lens = (starts[ids + 1] - starts[ids]).astype(np.int64)
    toks = np.concatenate([tokens[starts[i]:starts[i + 1]] for i in ids])
    total = toks.size
    rows = (total + L - 1) // L
    n = rows * L
    out = np.zeros(n, dtype=tokens.dtype)
    out[:total] = toks
    doc = np.full(n, -1, dtype=np.int32)
    doc[:total] = np.repeat(np.arange(ids.size, dtype=np.int32), lens)
    ends = np.cumsum(lens)
    # Segment boundaries: every document end and every row end (np.unique also drops the
    # duplicates of empty documents and of a document ending on a row end).
    cu = np.unique(np.concatenate(([0], ends, np.arange(L, n + 1, L)))).astype(np.int32)
    seglen = np.diff(cu)
    pos = (np.arange(n, dtype=np.int32) - np.repeat(cu[:-1], seglen)).astype(np.int32)
    return out.reshape(rows, L), doc.reshape(rows, L), pos.reshape(rows, L), cu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--min-time", type=float, default=2.0)
    a = ap.parse_args()
    tokens = np.fromfile(f"{a.dir}/tokens.u16", dtype=np.uint16)
    starts = np.fromfile(f"{a.dir}/starts.u64", dtype=np.uint64).astype(np.int64)
    order = np.fromfile(f"{a.dir}/order.u64", dtype=np.uint64).astype(np.int64)
    batches = [order[i:i + a.batch] for i in range(0, order.size, a.batch)]

    checksum = 0
    for ids in batches:
        for x in pack_batch(tokens, starts, ids, a.length):
            checksum += int(x.sum(dtype=np.int64))

    done = 0
    t0 = time.perf_counter()
    while True:
        for ids in batches:
            pack_batch(tokens, starts, ids, a.length)
        done += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= a.min_time:
            break
    print(done * tokens.size, elapsed, checksum)


if __name__ == "__main__":
    main()
