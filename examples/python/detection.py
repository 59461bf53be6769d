#!/usr/bin/python3
"""Detection from Python: WebDataset shards of JPEGs + boxes + classes, RandomResizedCrop + flip,
boxes that follow the image, and a check that every box the trainer receives lands on its object.

The script writes its own shards first, with Python's tarfile, PIL and numpy, as a user's
converter would: sample k holds
    <key>.jpg          a 320..480 x 240..360 grey picture with 1 to 4 filled rectangles, not
                       overlapping, object class c drawn in colour c (red, green, blue, yellow);
    <key>.boxes.npy    float32 (n, 4): x0 y0 x1 y1 of each rectangle, in pixels;
    <key>.classes.npy  int64 (n,): each rectangle's class.
Then it reads them as a trainer would:

    src = sluice.wds("train-{0000..0003}.tar",
                     decode=sluice.image((224, 224), crop="random_resized", flip=True),
                     boxes=sluice.boxes("boxes.npy", classes="classes.npy", min_size=4))
    for batch in sluice.Loader(src, batch_size=32, workers=2):
        images = torch.from_dlpack(batch["image"])                  # uint8 (B, 224, 224, 3)
        boxes, classes = torch.from_dlpack(batch["boxes"]), torch.from_dlpack(batch["classes"])
        offsets = torch.from_dlpack(batch["boxes.offsets"])          # sample i: rows offsets[i]:offsets[i+1]
        targets = [{"boxes": boxes[a:b], "labels": classes[a:b]}     # what torchvision's detectors take
                   for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]

The check: each kept box lies inside the image and the pixels at 25 % and 75 % of its width and
height show its class's colour (boxes under 8 px a side are counted, not checked). The epoch is
read again with workers=1 and workers=0: the batches must be the same bytes.

    PYTHONPATH=build/ci/python/module /usr/bin/python3 examples/python/detection.py [--samples 400]

Needs python3-numpy and python3-pil (exit 77 without them). Exit 0 only if no box is wrong.
"""
import argparse
import hashlib
import io
import os
import sys
import tarfile
import tempfile

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover - the test reports Skipped
    print(f"skipped: {e}")
    sys.exit(77)

import sluice

PALETTE = np.array([[220, 30, 30], [30, 200, 40], [40, 60, 220], [230, 210, 30]], dtype=np.int32)


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(folder, samples, shards):
    """Writes the shards; returns the brace pattern naming them and the boxes written per sample."""
    rng = np.random.default_rng(2024)
    written = {}
    per_shard = (samples + shards - 1) // shards
    for s in range(shards):
        with tarfile.open(os.path.join(folder, f"train-{s:04d}.tar"), "w") as tar:
            for k in range(s * per_shard, min(samples, (s + 1) * per_shard)):
                w, h = int(rng.integers(320, 481)), int(rng.integers(240, 361))
                px = np.full((h, w, 3), 118, dtype=np.uint8)
                n = int(rng.integers(1, 5))
                band = w // n
                boxes, classes = [], []
                for j in range(n):
                    bw = int(rng.integers(24, band - 6))
                    bh = int(rng.integers(24, h - 6))
                    x0 = j * band + int(rng.integers(0, band - bw + 1))
                    y0 = int(rng.integers(0, h - bh + 1))
                    c = int(rng.integers(0, 4))
                    px[y0:y0 + bh, x0:x0 + bw] = PALETTE[c]
                    boxes.append([x0, y0, x0 + bw, y0 + bh])
                    classes.append(c)
                jpg = io.BytesIO()
                Image.fromarray(px).save(jpg, format="JPEG", quality=92)
                key = f"scene/{1000000 + k}"
                add_member(tar, key + ".jpg", jpg.getvalue())
                add_member(tar, key + ".boxes.npy", npy_bytes(np.array(boxes, dtype=np.float32)))
                add_member(tar, key + ".classes.npy", npy_bytes(np.array(classes, dtype=np.int64)))
                written[k] = n
    return os.path.join(folder, "train-{0000..%04d}.tar" % (shards - 1)), written


def class_at(p):
    d = np.abs(PALETTE - p.astype(np.int32)).sum(axis=1)
    return int(d.argmin()) if d.min() < 90 else -1


def run_epoch(pattern, size, workers, epoch=0):
    """One epoch: (tally, digest of every batch's bytes)."""
    src = sluice.wds(pattern, decode=sluice.image((size, size), crop="random_resized", flip=True),
                     boxes=sluice.boxes("boxes.npy", classes="classes.npy", min_size=4))
    loader = sluice.Loader(src, batch_size=32, workers=workers, sampler=sluice.sample.shuffle(seed=7))
    loader.set_epoch(epoch)
    t = dict(samples=0, kept=0, checked=0, small=0, wrong=0, outside=0)
    digest = hashlib.sha256()
    for batch in loader:
        images = np.from_dlpack(batch["image"])         # uint8 (B, size, size, 3)
        boxes = np.from_dlpack(batch["boxes"])          # float32 (n, 4)
        classes = np.from_dlpack(batch["classes"])      # int64 (n,)
        offsets = np.from_dlpack(batch["boxes.offsets"])
        assert (np.from_dlpack(batch["classes.offsets"]) == offsets).all()
        for a in (images, boxes, classes, offsets):
            digest.update(np.ascontiguousarray(a).tobytes())
        t["samples"] += images.shape[0]
        t["kept"] += boxes.shape[0]
        for i in range(images.shape[0]):
            for r, c in zip(boxes[offsets[i]:offsets[i + 1]], classes[offsets[i]:offsets[i + 1]]):
                if not (0 <= r[0] < r[2] <= size and 0 <= r[1] < r[3] <= size):
                    t["outside"] += 1
                    continue
                if r[2] - r[0] < 8 or r[3] - r[1] < 8:
                    t["small"] += 1
                    continue
                t["checked"] += 1
                inside = [images[i, int(r[1] + fy * (r[3] - r[1])), int(r[0] + fx * (r[2] - r[0]))]
                          for fx in (0.25, 0.75) for fy in (0.25, 0.75)]
                t["wrong"] += any(class_at(p) != c for p in inside)
    return t, digest.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-detection-") as d:
        pattern, written = write_shards(d, args.samples, args.shards)
        t, digest = run_epoch(pattern, args.size, args.workers)
        boxes_in = sum(written.values())
        print(f"epoch 0, {args.workers} workers: {t['samples']} samples, {boxes_in} boxes in the shards, "
              f"{t['kept']} kept after random_resized_crop + flip, {boxes_in - t['kept']} dropped (left the crop)")
        print(f"checked {t['checked']} boxes ({t['small']} under 8 px not checked): {t['wrong']} land on an object "
              f"of another class or on none, {t['outside']} outside the image")
        same = all(run_epoch(pattern, args.size, w)[1] == digest for w in (1, 0))
        print(f"workers=1 and workers=0 give the same batches: {'yes' if same else 'NO'}")
        ok = t["samples"] == args.samples and t["checked"] > 0 and t["wrong"] == 0 and t["outside"] == 0 and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
