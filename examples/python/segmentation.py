#!/usr/bin/python3
"""Semantic segmentation from Python: WebDataset shards of a JPEG and a palette PNG of class ids,
RandomResizedCrop + flip, the mask following the image nearest-neighbour (ids never blended), a
check of every mask pixel against the picture, and each class's share of the pixels per batch.

The script writes its own shards first, with Python's tarfile and PIL, as a user's converter would:
sample k holds
    <key>.jpg        a 240..360 x 180..270 picture: background (class 0, grey) and 2 to 5 discs
                     and triangles of classes 1..3, each class in its own colour;
    <key>.seg.png    the same scene as a palette PNG whose pixel values are the class ids
                     (its palette is for viewing; sluice reads the indices, never the colours).
Then it reads them as a trainer would:

    src = sluice.wds("seg-{0000..0003}.tar", mask="seg.png", ignore_index=255,
                     decode=sluice.image((160, 224), crop="random_resized", flip=True))
    for batch in sluice.Loader(src, batch_size=16, workers=2):
        images = torch.from_dlpack(batch["image"])     # uint8 (B, 160, 224, 3)
        target = torch.from_dlpack(batch["mask"])      # uint8 (B, 160, 224): class ids
        loss = F.cross_entropy(model(x), target.long(), ignore_index=255)

The check: each mask pixel inside a region (its 4 neighbours of the same id) shows that class's
colour in the decoded image, every id is one the masks hold (never a blend of two), and the epoch
read again with workers=0 gives the same bytes. It prints each class's share of the pixels, the
balance that decides a segmenter's accuracy more than the loader's speed.

    PYTHONPATH=build/ci/python/module /usr/bin/python3 examples/python/segmentation.py [--samples 200]

Needs python3-numpy and python3-pil (exit 77 without them). Exit 0 only if the checks pass.
"""
import argparse
import io
import os
import sys
import tarfile
import tempfile

try:
    import numpy as np
    from PIL import Image, ImageDraw
except ImportError as e:  # the example's inputs are missing: skipped, not passed
    print(f"segmentation: skipped ({e})")
    sys.exit(77)

import sluice

COLOURS = [(118, 118, 118), (220, 30, 30), (30, 200, 40), (40, 60, 220)]  # class id -> colour


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(root, n, shards=4):
    rng = np.random.default_rng(2)
    paths = [os.path.join(root, f"seg-{s:04d}.tar") for s in range(shards)]
    tars = [tarfile.open(p, "w") for p in paths]
    for k in range(n):
        w, h = int(rng.integers(240, 361)), int(rng.integers(180, 271))
        ids = Image.new("P", (w, h), 0)
        draw = ImageDraw.Draw(ids)
        for _ in range(int(rng.integers(2, 6))):
            c = int(rng.integers(1, 4))
            x, y, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(15, 60)
            if rng.integers(0, 2):
                draw.ellipse([x - r, y - r, x + r, y + r], fill=c)
            else:
                draw.polygon([(x, y - r), (x + r, y + r), (x - r, y + r)], fill=c)
        ids.putpalette([v for rgb in COLOURS for v in rgb] + [0] * (3 * (256 - len(COLOURS))))
        picture = np.array(COLOURS, np.uint8)[np.asarray(ids)]
        jpg, png = io.BytesIO(), io.BytesIO()
        Image.fromarray(picture).save(jpg, format="JPEG", quality=95)
        ids.save(png, format="PNG")
        add(tars[k % shards], f"s{k:06d}.jpg", jpg.getvalue())
        add(tars[k % shards], f"s{k:06d}.seg.png", png.getvalue())
    for t in tars:
        t.close()
    return paths


def epoch(src, workers):
    t = dict(samples=0, checked=0, off_colour=0, pixels=np.zeros(256, np.int64))
    parts = []
    palette = np.array(COLOURS, np.int32)
    with sluice.Loader(src, batch_size=16, workers=workers, sampler=sluice.sample.shuffle(seed=6)) as loader:
        for batch in loader:
            images, masks = np.from_dlpack(batch["image"]), np.from_dlpack(batch["mask"])
            parts += [images.tobytes(), masks.tobytes()]
            t["samples"] += images.shape[0]
            t["pixels"] += np.bincount(masks.reshape(-1), minlength=256)
            for img, m in zip(images.astype(np.int32), masks):
                inner = np.ones(m.shape, bool)
                inner[1:] &= m[1:] == m[:-1]
                inner[:-1] &= m[:-1] == m[1:]
                inner[:, 1:] &= m[:, 1:] == m[:, :-1]
                inner[:, :-1] &= m[:, :-1] == m[:, 1:]
                ids = m[inner]
                t["checked"] += int(ids.size)
                t["off_colour"] += int((np.abs(img[inner] - palette[ids]).sum(axis=1) > 60).sum())
    return t, b"".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        shards = write_shards(root, args.samples)
        src = sluice.wds(shards, mask="seg.png", ignore_index=255,
                         decode=sluice.image((160, 224), crop="random_resized", flip=True))
        t, two = epoch(src, 2)
        _, zero = epoch(src, 0)
    total = int(t["pixels"].sum())
    shares = ", ".join(f"class {c} {t['pixels'][c] / total:.1%}" for c in range(len(COLOURS)))
    foreign = int(t["pixels"][len(COLOURS):].sum())
    share = t["off_colour"] / max(1, t["checked"])
    print(f"segmentation: {t['samples']} samples, {total} mask pixels ({shares}; {foreign} of ids no mask holds), "
          f"{t['checked']} inside a region checked, {share:.3%} off their class's colour; "
          f"workers=0 {'gives the same bytes' if zero == two else 'DIFFERS'}")
    ok = t["samples"] == args.samples and foreign == 0 and share <= 0.005 and zero == two
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
