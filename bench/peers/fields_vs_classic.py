#!/usr/bin/env python3
"""A pipeline composed at run time from Python (sluice.wds(fields=...): the C++ core's run-time
samples, one compiled loader for every combination) against the same pipeline compiled
(sluice.wds(decode=..., output="float32"): a loader type made for it), side by side in one process.

WebDataset shards of JPEG images (128x128, quality 90, smooth content) and an ASCII class, decoded
with RandomResizedCrop + flip to 64x64 CHW and normalised per channel, batches of 128, the label
beside. Rounds interleave the two; each round is one epoch of each (after one warm-up epoch).
Prints samples/s per round and the run-time / compiled ratio (the issue's target: >= 0.9).

Run: PYTHONPATH=build/ci/python/module /usr/bin/python3 bench/peers/fields_vs_classic.py \
         [--samples 3000] [--workers 2] [--rounds 5]
"""
import argparse
import io
import os
import statistics
import tarfile
import tempfile
import time

import numpy as np
from PIL import Image

import sluice

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def write_shards(d, n, shards=4):
    y, x = np.mgrid[0:128, 0:128]
    for s in range(shards):
        with tarfile.open(os.path.join(d, f"jpeg-{s}.tar"), "w") as tar:
            for i in range(s * n // shards, (s + 1) * n // shards):
                px = np.stack([(x * (c + 1) + y * 2 + i) & 255 for c in range(3)], axis=-1).astype(np.uint8)
                buf = io.BytesIO()
                Image.fromarray(px).save(buf, format="JPEG", quality=90)
                for name, data in ((f"s{i:07d}.jpg", buf.getvalue()), (f"s{i:07d}.cls", str(i % 1000).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return os.path.join(d, "jpeg-{0..%d}.tar" % (shards - 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        pattern = write_shards(d, a.samples)
        img = sluice.image((64, 64), crop="random_resized", flip=True, layout="chw")
        compiled = sluice.wds(pattern, decode=img, output="float32", mean=MEAN, std=STD)
        run_time = sluice.wds(pattern, fields={
            "image": sluice.field("jpg;jpeg;png", decode=img, collate=sluice.normalized(mean=MEAN, std=STD)),
            "label": sluice.field("cls", dtype="int64")})
        loaders = {name: sluice.Loader(src, batch_size=128, sampler=sluice.sample.shuffle(seed=1), workers=a.workers)
                   for name, src in (("compiled", compiled), ("run_time", run_time))}

        def epoch(loader):
            t, n = time.perf_counter(), 0
            for b in loader:
                n += b["label"].shape[0]
            assert n == a.samples, n
            return n / (time.perf_counter() - t)

        for ld in loaders.values():
            epoch(ld)  # warm-up: shard scans, page cache
        rates = {k: [] for k in loaders}
        for r in range(a.rounds):
            for name, ld in loaders.items():
                rates[name].append(epoch(ld))
            print(f"round {r + 1}: compiled {rates['compiled'][-1]:,.0f}/s  run_time {rates['run_time'][-1]:,.0f}/s  "
                  f"ratio {rates['run_time'][-1] / rates['compiled'][-1]:.3f}", flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"median: compiled {med['compiled']:,.0f}/s  run_time {med['run_time']:,.0f}/s  "
              f"ratio {med['run_time'] / med['compiled']:.3f}  (workers={a.workers}, {a.samples} samples, "
              f"load {os.getloadavg()[0]:.2f})")
        for ld in loaders.values():
            ld.close()


if __name__ == "__main__":
    main()
