"""Google's Grain on the peers' workloads: one measurement, for run.py.

Run by run.py with the interpreter given as --grain-python (Grain lives in its own venv, e.g.
`/usr/bin/python3 -m venv ENV && ENV/bin/pip install grain numpy pillow`):
    ENV/bin/python bench/peers/grain_peer.py raw  RECORDS LABELS RECORD_BYTES API N SECONDS [BATCH]
    ENV/bin/python bench/peers/grain_peer.py jpeg PACK OFFSETS LABELS        API N SECONDS [BATCH]
    ENV/bin/python bench/peers/grain_peer.py rrc  PACK OFFSETS LABELS        API N SECONDS [BATCH]
prints `samples_per_s <rate>` like the other peer programs; exits with status 3 when grain cannot be
imported (run.py then reports the rows as not measured).

API is how a Grain user runs it, each at the setting N:
    loader   grain.python.DataLoader(data_source, IndexSampler(shuffle, seed 7, num_epochs None),
             operations=[Batch(BATCH, drop_remainder=True)], worker_count=N): N = 0 reads in the
             calling process, N >= 1 in N worker processes (Grain's multiprocessing);
    dataset  grain.python.MapDataset.source(data_source).shuffle(seed=7).repeat().batch(BATCH)
             .to_iter_dataset(ReadOptions(num_threads=N)): N reader threads in this process.
The data source is what a Grain user writes for these files: raw, a record of the file mapped with
np.memmap (opened lazily, so each worker process maps it itself) copied out, and its int64 label;
jpeg, the JPEG's bytes decoded with PIL to an HWC uint8 array (Grain has no decoder of its own;
PIL is what its examples use), and its label; rrc, the same decode followed by the ImageNet training
transform written with PIL as torchvision's PIL path does it (RandomResizedCrop's parameters: up to
10 draws of scale in [0.08, 1] and log-ratio in [3/4, 4/3], else the centre crop; then
`Image.resize((224, 224), BILINEAR, box=crop)` and a flip with probability 1/2). Rate: samples a second over SECONDS after 3 warm-up
batches (worker start-up excluded), each batch checked for its shape.
"""

import io
import sys

from peer_timing import rate_of
from peer_transforms import random_resized_crop_box


class RecordSource:
    def __init__(self, records, labels, record_bytes):
        import numpy as np
        self.records, self.record_bytes = records, record_bytes
        self.labels = np.fromfile(labels, dtype="<i8")
        self.mm = None

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        import numpy as np
        if self.mm is None:
            self.mm = np.memmap(self.records, dtype=np.uint8, mode="r", shape=(len(self.labels), self.record_bytes))
        return np.array(self.mm[i]), self.labels[i]


class JpegSource:
    def __init__(self, pack, offsets, labels, rrc=False):
        import numpy as np
        self.rrc = rrc
        self.rng = np.random.default_rng()
        self.pack = pack
        self.offsets = np.fromfile(offsets, dtype="<u8").astype(np.int64)
        self.labels = np.fromfile(labels, dtype="<i8")
        self.mm = None

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        import numpy as np
        from PIL import Image
        if self.mm is None:
            self.mm = np.memmap(self.pack, dtype=np.uint8, mode="r")
        raw = self.mm[self.offsets[i]:self.offsets[i + 1]].tobytes()
        img = Image.open(io.BytesIO(raw)).convert("RGB")
        if self.rrc:
            box = random_resized_crop_box(self.rng, *img.size)
            img = img.resize((224, 224), Image.BILINEAR, box=box)
            if self.rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return np.asarray(img), self.labels[i]


def main():
    a = sys.argv
    if len(a) not in (8, 9) or a[1] not in ("raw", "jpeg", "rrc") or a[5] not in ("loader", "dataset"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, api, n, seconds = a[1], a[5], int(a[6]), float(a[7])
    batch = int(a[8]) if len(a) == 9 else 256
    try:
        import grain.python as gp
    except ImportError as e:
        print(f"Grain not installed ({e})", file=sys.stderr)
        return 3
    if kind == "raw":
        src = RecordSource(a[2], a[3], int(a[4]))
        shape = (batch, int(a[4]))
    else:
        src = JpegSource(a[2], a[3], a[4], rrc=kind == "rrc")
        shape = (batch, 224, 224, 3) if kind == "rrc" else (batch, 64, 64, 3)
    if api == "loader":
        sampler = gp.IndexSampler(num_records=len(src), shard_options=gp.NoSharding(), shuffle=True, num_epochs=None,
                                  seed=7)
        it = iter(gp.DataLoader(data_source=src, sampler=sampler,
                                operations=[gp.Batch(batch_size=batch, drop_remainder=True)], worker_count=n))
    else:
        ds = gp.MapDataset.source(src).shuffle(seed=7).repeat().batch(batch_size=batch, drop_remainder=True)
        it = iter(ds.to_iter_dataset(gp.ReadOptions(num_threads=n)))
    def check(x, y):
        if x.shape != shape or len(y) != batch:
            raise RuntimeError(f"unexpected batch {x.shape} / {len(y)} labels")

    rate = rate_of(it, seconds, check)
    print(f"samples_per_s {rate:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
