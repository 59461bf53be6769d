#!/usr/bin/python3
"""Long-tailed Fashion-MNIST in PyTorch, fed by sluice: uniform vs class-balanced sampling.

The Python twin of the C++ demo (examples/demo): a subset of the training set where class c keeps
round(5900 * 100^(-c/9)) images (14,643 in all; the C++ demo holds out 500 validation images a
class first and keeps round(5500 * 100^(-c/9))), a small MLP (the C++ demo's: 128 hidden units, batch 64, SGD with momentum 0.9, weight decay
1e-4, learning rate 0.05 cosine-decayed to 0, 6 epochs; no shift augmentation) trained twice through the same sluice
pipeline, once with sampler="shuffle" and once with sampler="class_balanced" (inverse-frequency
weights, as the C++ demo uses), and evaluated on the balanced 10,000-image test set. The epoch
reported for each run is chosen on a balanced validation split — 100 images per class taken from
training images the long-tailed subset does not use — never on the test set.

    PYTHONPATH=build/ci/python/module /usr/bin/python3 examples/python/train_fashion.py [--epochs 6]

Needs Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist; exit 77 without it),
python3-torch and python3-numpy. Exit 0 when class-balanced sampling beats uniform sampling on
balanced test accuracy by at least --min-gap points (default 2).
"""
import argparse
import gzip
import os
import sys
import tempfile
import time

import numpy as np
import torch

import sluice

FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = 10


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def split(labels, seed):
    """Indices of the long-tailed subset and of a balanced validation set outside it."""
    rng = np.random.default_rng(seed)
    keep = [int(round(5900 * 100 ** (-c / (CLASSES - 1)))) for c in range(CLASSES)]
    subset, val = [], []
    for c in range(CLASSES):
        members = rng.permutation(np.flatnonzero(labels == c))
        subset.append(members[:keep[c]])
        val.append(members[keep[c]:keep[c] + 100])
    return np.sort(np.concatenate(subset)), np.concatenate(val)


def balanced_accuracy(model, x, y):
    with torch.no_grad():
        pred = model(x).argmax(1)
    return float(np.mean([(pred[y == c] == c).float().mean().item() for c in range(CLASSES)]))


def train(run, records, labels, n, val, test, args):
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    sampler = (sluice.sample.shuffle(args.seed) if run == "shuffle"
               else sluice.sample.class_balanced("inverse_frequency", args.seed))
    loader = sluice.Loader(sluice.records(records, labels=labels, record_bytes=784, output="float32", mean=[0.286],
                                          std=[0.353], shape=[784]),
                           batch_size=64, sampler=sampler, seed=args.seed, workers=args.workers)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(loader))  # to 0, per step
    best = (-1.0, 0, 0.0)
    t0 = time.time()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        model.train()
        for batch in loader:
            x, y = torch.from_dlpack(batch["data"]), torch.from_dlpack(batch["label"])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        v = balanced_accuracy(model, *val)
        t = balanced_accuracy(model, *test)
        if v > best[0]:
            best = (v, epoch, t)
        print(f"{run:15s} epoch {epoch:2d}  val balanced acc {v:.3f}  test balanced acc {t:.3f}", flush=True)
    stats = loader.stats()
    print(f"{run:15s} {time.time() - t0:.1f} s, {stats['samples']} samples, stall {stats['stall_fraction']:.1%}")
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--min-gap", type=float, default=2.0, help="points of balanced test accuracy")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")):
        print(f"skipped: {FMNIST} is missing (Debian: dataset-fashion-mnist)")
        return 77
    torch.set_num_threads(1)  # one core for the model, the other for sluice's workers
    xs = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    ys = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    xt = read_idx(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784)
    yt = read_idx(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    subset, val_ids = split(ys, args.seed)

    def tensors(x, y):
        return (torch.from_numpy((x.astype(np.float32) / 255 - 0.286) / 0.353), torch.from_numpy(y))

    val, test = tensors(xs[val_ids], ys[val_ids]), tensors(xt, yt)
    with tempfile.TemporaryDirectory() as d:
        records, labels = os.path.join(d, "train.u8"), os.path.join(d, "train.labels")
        xs[subset].tofile(records)                  # the subset as fixed-size records
        ys[subset].astype("<i8").tofile(labels)
        print(f"long-tailed subset: {len(subset)} images, per class {np.bincount(ys[subset]).tolist()}; "
              f"validation {len(val_ids)} (balanced, outside the subset); test {len(yt)}")
        res = {run: train(run, records, labels, len(subset), val, test, args) for run in ("shuffle", "class_balanced")}
    print()
    print(f"{'sampler':15s} {'best val epoch':>14s} {'val bal acc':>11s} {'test bal acc':>12s}")
    for run, (v, e, t) in res.items():
        print(f"{run:15s} {e:14d} {v:11.3f} {t:12.3f}")
    gap = 100 * (res["class_balanced"][2] - res["shuffle"][2])
    print(f"class-balanced vs uniform: {gap:+.1f} points of balanced test accuracy (epoch chosen on validation)")
    return 0 if gap >= args.min_gap else 1


if __name__ == "__main__":
    sys.exit(main())
