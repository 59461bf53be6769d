#!/usr/bin/python3
"""DistributedDataParallel under torchrun, fed by sluice: each rank reads its share of the data,
the ranks take equal batch counts, and a checkpoint taken mid-epoch resumes exactly.

    torchrun --standalone --nproc_per_node=2 examples/python/torchrun_ddp.py [--dir DIR]

(with PYTHONPATH naming the built module, e.g. build/ci/python/module; Debian's torchrun 1.13
under Python 3.11 also needs `--redirects 1 --tee 1`: its parser loses the default 0). Rank 0
writes the data
first (an .npy of 3,000 float32 rows of 16 features and their int64 labels, two separable
classes) unless --dir already has it; every rank then builds

    sluice.Loader(sluice.npy(x, labels=y), batch_size=64, distributed=True,
                  sampler=sluice.sample.shuffle(seed=1), workers=2)

which reads RANK and WORLD_SIZE from torchrun's environment (Open MPI, Slurm and PMI work the
same way, or rank=/world_size= given), and trains a logistic regression with DDP (gloo, CPU) for
three epochs: each `for batch in loader` is the next epoch, reshuffled, as DataLoader with
DistributedSampler would be after set_epoch.

Checks, exit 0 only if all hold: the ranks' samples of an epoch are disjoint and together the
whole dataset (gathered with all_gather_object); every rank has the same number of batches (a
collective would hang otherwise); the loss falls; a loader restored from a state_dict taken after
batch 5 of epoch 1, in the usual resume loop (load_state_dict, then set_epoch), yields exactly
the batches the first loader yielded after it.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import sluice

N, D, BATCH = 3000, 16, 64


def write_data(folder):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N).astype(np.int64)
    x = rng.normal(size=(N, D)).astype(np.float32)
    x[:, 0] += np.where(y == 1, 2.0, -2.0)  # separable along the first feature
    x[:, 1] = np.arange(N, dtype=np.float32)  # the sample's own index: what the checks read back
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "y.npy"), y)


def make_loader(folder):
    src = sluice.npy(os.path.join(folder, "x.npy"), labels=os.path.join(folder, "y.npy"))
    return sluice.Loader(src, batch_size=BATCH, distributed=True, sampler=sluice.sample.shuffle(seed=1), workers=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    folder = args.dir or os.environ.get("SLUICE_DDP_DIR", "/tmp/sluice-ddp-example")
    if rank == 0:
        os.makedirs(folder, exist_ok=True)
        write_data(folder)
    dist.barrier()

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(D, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = make_loader(folder)
    ok = True
    losses = []
    for epoch in range(3):
        ids, batches, total = [], 0, 0.0
        for batch in loader:
            x = torch.from_dlpack(batch["data"])
            y = torch.from_dlpack(batch["label"])
            ids += x[:, 1].long().tolist()
            xin = x.clone()
            xin[:, 1] = 0  # the index is not a feature
            loss = torch.nn.functional.cross_entropy(model(xin), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches += 1
            total += loss.item()
        losses.append(total / max(batches, 1))
        everyone = [None] * world
        dist.all_gather_object(everyone, (batches, ids))
        counts = [b for b, _ in everyone]
        seen = [i for _, part in everyone for i in part]
        disjoint = len(seen) == len(set(seen))
        whole = set(seen) == set(range(N))
        if rank == 0:
            print(f"epoch {epoch}: batches per rank {counts}, samples {len(seen)} "
                  f"(disjoint: {disjoint}, the whole dataset: {whole}), mean loss {losses[-1]:.4f}")
        ok = ok and len(set(counts)) == 1 and disjoint and whole

    # Resume: a state after batch 5 of epoch 1, restored in a fresh loader with the usual loop.
    first = make_loader(folder)
    first.set_epoch(1)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    after = [torch.from_dlpack(b["data"])[:, 1].long().tolist() for b in it]
    resumed = make_loader(folder)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    again = [torch.from_dlpack(b["data"])[:, 1].long().tolist() for b in resumed]
    exact = after == again and len(after) > 0
    ok = ok and exact and losses[-1] < losses[0]
    flags = [None] * world
    dist.all_gather_object(flags, ok)
    if rank == 0:
        print(f"resume after batch 5 of epoch 1: {len(again)} batches, {'exact' if exact else 'NOT exact'}; "
              f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; ranks ok: {flags}")
    dist.destroy_process_group()
    return 0 if all(flags) else 1


if __name__ == "__main__":
    sys.exit(main())
