#!/usr/bin/python3
"""Instance segmentation from Python: a COCO image folder and its instances JSON, read without
conversion, each kept box with its instance mask drawn from COCO's polygons and run-length masks
through the image's RandomResizedCrop + flip, and a check of every mask pixel against the picture.

The script writes its own dataset first, with PIL and json, as COCO's tools lay it out:
    train/<id>.jpg        a 200..320 x 150..240 grey picture with 1 to 3 objects side by side,
                          object class c filled in colour c (red, green, blue);
    instances.json        "images", "categories" (ids 1, 2, 3) and "annotations": the first object
                          of an image a polygon, the others ellipses as run-length masks (COCO's
                          compressed string, or a list for a crowd region), with their bboxes.
Then it reads it as a trainer would:

    src = sluice.coco("train", "instances.json", segmentation=True, min_visible=0.2,
                      decode=sluice.image((192, 256), crop="random_resized", flip=True))
    for batch in sluice.Loader(src, batch_size=8, workers=2):
        images = torch.from_dlpack(batch["image"])                  # uint8 (B, 192, 256, 3)
        boxes, labels = torch.from_dlpack(batch["boxes"]), torch.from_dlpack(batch["classes"])
        masks = torch.from_dlpack(batch["segmentation"])            # uint8 (n, 192, 256): mask k is box k's
        offsets = torch.from_dlpack(batch["boxes.offsets"]).tolist()  # sample i: rows offsets[i]:offsets[i+1]
        targets = [{"boxes": boxes[a:b], "labels": labels[a:b], "masks": masks[a:b]}   # Mask R-CNN's targets
                   for a, b in zip(offsets[:-1], offsets[1:])]

The check: every pixel of every kept mask shows its class's colour in the decoded image (JPEG
blurs an object's outline, so at most 3 % of mask pixels may miss it; a mask flipped, shifted or
given to another box misses by far more), and each mask lies inside its box. The epoch is read
again with workers=0: the batches must be the same bytes.

    PYTHONPATH=build/ci/python/module /usr/bin/python3 examples/python/coco_instances.py [--images 120]

Needs python3-numpy and python3-pil (exit 77 without them). Exit 0 only if the checks pass.
"""
import argparse
import json
import os
import sys
import tempfile

try:
    import numpy as np
    from PIL import Image, ImageDraw
except ImportError as e:  # the example's inputs are missing: skipped, not passed
    print(f"coco_instances: skipped ({e})")
    sys.exit(77)

import sluice

COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 220)]  # category ids 1, 2, 3: classes 0, 1, 2


def rle_string(counts):
    """COCO's compressed run-length string of column-major counts (as pycocotools writes it)."""
    out = []
    for i, c in enumerate(counts):
        x = int(c) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            g, x = x & 0x1F, x >> 5
            more = x != -1 if g & 0x10 else x != 0
            out.append(chr(48 + (g | 0x20 if more else g)))
    return "".join(out)


def runs(mask):
    """Column-major run lengths of a 0/1 array, 0s first."""
    flat = mask.T.reshape(-1)
    counts = np.diff(np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])).tolist()
    return counts if flat[0] == 0 else [0] + counts


def write_coco(root, n):
    rng = np.random.default_rng(1)
    os.mkdir(os.path.join(root, "train"))
    images, anns = [], []
    for k in range(n):
        w, h = int(rng.integers(200, 321)), int(rng.integers(150, 241))
        pic = Image.new("RGB", (w, h), (118, 118, 118))
        m = int(rng.integers(1, 4))
        band = w // m
        for j in range(m):
            rx, ry = rng.uniform(12, band / 2 - 4), rng.uniform(20, h / 2 - 6)
            cx, cy = j * band + band / 2, h / 2 + rng.uniform(-h / 4 + ry / 2, h / 4 - ry / 2)
            c = int(rng.integers(0, 3))
            one = Image.new("L", (w, h), 0)
            if j == 0:  # a star polygon
                p = int(rng.integers(5, 11))
                a = 2 * np.pi * np.arange(p) / p
                r = np.where(np.arange(p) % 2 == 0, 1.0, 0.5)
                poly = [float(v) for xy in zip(cx + r * rx * np.cos(a), cy + r * ry * np.sin(a)) for v in xy]
                ImageDraw.Draw(one).polygon(poly, fill=1)
                seg = [poly]
            else:  # an ellipse stored as run lengths
                ImageDraw.Draw(one).ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=1)
                counts = runs(np.asarray(one))
                seg = {"size": [h, w], "counts": rle_string(counts) if j == 1 else counts}
            ImageDraw.Draw(pic).bitmap((0, 0), one.point(lambda v: 255 * v), fill=COLOURS[c])
            ys, xs = np.nonzero(np.asarray(one))
            anns.append({"id": len(anns) + 1, "image_id": k + 1, "category_id": c + 1, "iscrowd": int(j == 2),
                         "bbox": [float(xs.min()), float(ys.min()), float(xs.max() + 1 - xs.min()),
                                  float(ys.max() + 1 - ys.min())], "segmentation": seg})
        pic.save(os.path.join(root, "train", f"{k + 1:012d}.jpg"), quality=92)
        images.append({"id": k + 1, "file_name": f"{k + 1:012d}.jpg", "width": w, "height": h})
    with open(os.path.join(root, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": anns,
                   "categories": [{"id": i + 1, "name": n} for i, n in enumerate(["red", "green", "blue"])]}, f)
    return len(anns)


def epoch(src, workers):
    t = dict(images=0, masks=0, pixels=0, off_colour=0, outside_box=0)
    parts = []
    with sluice.Loader(src, batch_size=8, workers=workers, sampler=sluice.sample.shuffle(seed=4)) as loader:
        for batch in loader:
            images = np.from_dlpack(batch["image"])
            boxes, labels = np.from_dlpack(batch["boxes"]), np.from_dlpack(batch["classes"])
            masks, offsets = np.from_dlpack(batch["segmentation"]), np.from_dlpack(batch["boxes.offsets"])
            parts += [a.tobytes() for a in (images, boxes, labels, masks, offsets)]
            targets = [{"boxes": boxes[a:b], "labels": labels[a:b], "masks": masks[a:b]}
                       for a, b in zip(offsets[:-1], offsets[1:])]
            for img, target in zip(images, targets):
                t["images"] += 1
                pic = img.astype(np.int32)  # uint8 images arrive (H, W, 3)
                for box, label, mask in zip(target["boxes"], target["labels"], target["masks"]):
                    t["masks"] += 1
                    on = mask.astype(bool)
                    t["pixels"] += int(on.sum())
                    t["off_colour"] += int((np.abs(pic[on] - np.array(COLOURS[label])).sum(axis=1) > 90).sum())
                    ys, xs = np.nonzero(on)
                    if len(xs) and (xs.min() < box[0] - 1 or xs.max() > box[2] or ys.min() < box[1] - 1 or ys.max() > box[3]):
                        t["outside_box"] += 1
    return t, b"".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=120)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        objects = write_coco(root, args.images)
        src = sluice.coco(os.path.join(root, "train"), os.path.join(root, "instances.json"), segmentation=True,
                          min_visible=0.2, decode=sluice.image((192, 256), crop="random_resized", flip=True))
        t, two = epoch(src, 2)
        _, zero = epoch(src, 0)
    share = t["off_colour"] / max(1, t["pixels"])
    print(f"coco_instances: {t['images']} images, {objects} objects, {t['masks']} masks kept after the crop, "
          f"{t['pixels']} mask pixels, {share:.2%} off their class's colour, {t['outside_box']} outside their box; "
          f"workers=0 {'gives the same bytes' if zero == two else 'DIFFERS'}")
    ok = t["images"] == args.images and t["masks"] > objects // 2 and share <= 0.03 and t["outside_box"] == 0 \
        and zero == two
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
