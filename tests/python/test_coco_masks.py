"""COCO instance masks from Python: sluice.coco(..., segmentation=True) draws each kept box's
instance from its polygons or run-length mask (a list, or COCO's compressed string) through the
image's crop and flip. The images are drawn by PIL (its polygon fill is the "truth" a trainer sees),
the annotations json.dump'ed as COCO's tools write them; every kept mask is checked against the
picture's colours, masks go with their boxes, any worker count gives the same bytes, and (where
pycocotools is installed) the masks agree with pycocotools' own decoding."""
import json

import numpy as np
import pytest

import sluice

Image = pytest.importorskip("PIL.Image")
ImageDraw = pytest.importorskip("PIL.ImageDraw")

COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 220)]  # category ids 1, 2, 3 -> classes 0, 1, 2


def rle_string(counts):
    """COCO's compressed run-length string (pycocotools' encoding) of column-major counts."""
    out = []
    for i, c in enumerate(counts):
        x = int(c) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            g = x & 0x1F
            x >>= 5
            more = x != -1 if g & 0x10 else x != 0
            out.append(chr(48 + (g | 0x20 if more else g)))
    return "".join(out)


def runs(mask):
    """Column-major run lengths of a 0/1 array, starting with 0s."""
    flat = mask.T.reshape(-1)
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    counts = np.diff(bounds).tolist()
    return counts if flat[0] == 0 else [0] + counts


def star(rng, cx, cy, rx, ry):
    m = int(rng.integers(5, 11))
    a = 2 * np.pi * np.arange(m) / m
    r = np.where(np.arange(m) % 2 == 0, 1.0, 0.5)
    return [float(v) for p in zip(cx + r * rx * np.cos(a), cy + r * ry * np.sin(a)) for v in p]


def write_coco(root, n=16, size=None, seed=7):
    """n images with 1-3 objects side by side, each a star polygon or an ellipse stored as runs
    (compressed for the 2nd object of an image, a list for a crowd 3rd), drawn by PIL in its class's
    colour; returns the annotation file, the images, the annotations in the file's order and each
    annotation's mask at the source size by its id."""
    rng = np.random.default_rng(seed)
    (root / "train").mkdir()
    images, anns, truth = [], [], {}
    for k in range(n):
        w, h = size or (int(rng.integers(140, 220)), int(rng.integers(110, 170)))
        canvas = Image.new("RGB", (w, h), (118, 118, 118))
        draw = ImageDraw.Draw(canvas)
        m = int(rng.integers(1, 4))
        band = w // m
        for j in range(m):
            rx, ry = rng.uniform(10, band / 2 - 4), rng.uniform(14, h / 2 - 4)
            cx, cy = j * band + band / 2 + rng.uniform(-3, 3), h / 2 + rng.uniform(-h / 4 + ry / 2, h / 4 - ry / 2)
            c = int(rng.integers(0, 3))
            one = Image.new("L", (w, h), 0)
            if j == 0:  # polygon
                poly = star(rng, cx, cy, rx, ry)
                ImageDraw.Draw(one).polygon(poly, fill=1)
                seg = [poly]
            else:  # ellipse as run lengths
                ImageDraw.Draw(one).ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=1)
                counts = runs(np.asarray(one))
                seg = {"size": [h, w], "counts": rle_string(counts) if j == 1 else counts}
            mask = np.asarray(one).astype(np.uint8)
            draw.bitmap((0, 0), one.point(lambda v: 255 * v), fill=COLOURS[c])
            ys, xs = np.nonzero(mask)
            x0, y0 = float(xs.min()), float(ys.min())
            anns.append({"id": len(anns) + 1, "image_id": k + 1, "category_id": c + 1, "iscrowd": int(j == 2),
                         "bbox": [x0, y0, float(xs.max() + 1) - x0, float(ys.max() + 1) - y0],
                         "area": float(mask.sum()), "segmentation": seg})
            truth[anns[-1]["id"]] = mask
        name = f"{k + 1:012d}.png"  # PNG: the colours stay exact, so the check is on every pixel
        canvas.save(root / "train" / name)
        images.append({"id": k + 1, "file_name": name, "width": w, "height": h})
    rng.shuffle(anns)
    path = root / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": anns,
                                "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]}))
    return path, images, anns, truth


def epoch(src, workers, out=(80, 96)):
    tally = dict(samples=0, masks=0, wrong=0, pixels=0, empty=0)
    parts = []
    with sluice.Loader(src, batch_size=4, workers=workers, sampler=sluice.sample.shuffle(seed=2),
                       drop_last=False) as loader:
        for b in loader:
            img, seg = np.from_dlpack(b["image"]), np.from_dlpack(b["segmentation"])
            off, soff = np.from_dlpack(b["boxes.offsets"]), np.from_dlpack(b["segmentation.offsets"])
            cls, boxes = np.from_dlpack(b["classes"]), np.from_dlpack(b["boxes"])
            assert seg.dtype == np.uint8 and seg.shape[1:] == out and seg.shape[0] == boxes.shape[0]
            assert (off == soff).all() and set(np.unique(seg)) <= {0, 1}
            parts += [a.tobytes() for a in (img, seg, boxes, off)]
            tally["samples"] += img.shape[0]
            for i in range(img.shape[0]):
                pic = img[i].astype(np.int32)  # uint8 images arrive hwc
                for r in range(off[i], off[i + 1]):
                    m = seg[r].astype(bool)
                    tally["masks"] += 1
                    if not m.any():
                        tally["empty"] += 1
                        continue
                    # the mask lies in its box (the box is the object's extent)
                    ys, xs = np.nonzero(m)
                    x0, y0, x1, y1 = boxes[r]
                    assert xs.min() >= np.floor(x0) - 1 and xs.max() <= np.ceil(x1) and ys.min() >= np.floor(y0) - 1 \
                        and ys.max() <= np.ceil(y1), (boxes[r], xs.min(), xs.max(), ys.min(), ys.max())
                    # every mask pixel has its class's colour: a flip or a crop that disagreed with the
                    # image's would put masks on grey or on another object
                    # (inside the object: on its outline the bilinear image blends with the grey)
                    inner = m.copy()
                    inner[1:, :] &= m[:-1, :]
                    inner[:-1, :] &= m[1:, :]
                    inner[:, 1:] &= m[:, :-1]
                    inner[:, :-1] &= m[:, 1:]
                    colour = np.array(COLOURS[cls[r]])
                    on = np.abs(pic[inner] - colour).sum(axis=1) < 30
                    tally["pixels"] += int(inner.sum())
                    tally["wrong"] += int((~on).sum())
    return tally, b"".join(parts)


def test_coco_instance_masks_follow_the_crop_and_flip(tmp_path):
    path, images, anns, _ = write_coco(tmp_path)
    src = sluice.coco(tmp_path / "train", path, decode=sluice.image((80, 96), crop="random_resized", flip=True),
                      segmentation=True, min_visible=0.2)
    t, two = epoch(src, 2)
    assert t["samples"] == len(images)
    assert t["masks"] >= len(anns) // 2 and t["pixels"] > 10000
    # Pixels where PIL's fill and the centre rule differ lie on an object's outline, and the crop's
    # nearest-neighbour sampling picks them rarely: all but a sliver agree.
    assert t["wrong"] <= t["pixels"] * 0.005, t
    _, zero = epoch(src, 0)
    assert zero == two


def identity_masks(tmp_path, seed):
    """Images of the output size with a centre crop, so the transform is the identity: each mask,
    with its annotation and image, comes out as (annotation, image, mask), masks in box order."""
    path, images, anns, truth = write_coco(tmp_path, n=6, size=(96, 80), seed=seed)
    src = sluice.coco(tmp_path / "train", path, decode=sluice.image((80, 96)), segmentation=True)
    with sluice.Loader(src, batch_size=len(images), sampler=sluice.sample.sequential(), workers=1) as ld:
        b = next(iter(ld))
    seg, off = np.from_dlpack(b["segmentation"]), np.from_dlpack(b["segmentation.offsets"])
    by_image = {}
    for a in anns:  # the file's order within an image is the boxes' order
        by_image.setdefault(a["image_id"], []).append(a)
    out = []
    for i, im in enumerate(images):
        mine = by_image.get(im["id"], [])
        assert off[i + 1] - off[i] == len(mine)
        out += [(a, im, seg[off[i] + j]) for j, a in enumerate(mine)]
    return out, truth


def test_coco_instance_masks_are_exact_for_run_lengths_and_close_for_polygons(tmp_path):
    # each mask against the object PIL drew, pixel for pixel
    masks, truth = identity_masks(tmp_path, seed=7)
    disagree = total = 0
    for a, _, got in masks:
        want = truth[a["id"]]
        if isinstance(a["segmentation"], dict):
            assert (got == want).all()  # run lengths: exact
        else:
            disagree += int((got != want).sum())
            total += int(want.sum())
    assert total > 0 and disagree <= 0.1 * total  # polygons: PIL and the centre rule differ on the outline


def test_coco_instance_masks_agree_with_pycocotools(tmp_path):
    mask_api = pytest.importorskip("pycocotools.mask")
    masks, _ = identity_masks(tmp_path, seed=11)
    disagree = total = 0
    for a, im, got in masks:
        s = a["segmentation"]
        if isinstance(s, list):  # polygons: pycocotools' rasterisation, merged
            rle = mask_api.merge(mask_api.frPyObjects(s, im["height"], im["width"]))
        elif isinstance(s["counts"], list):  # uncompressed run lengths
            rle = mask_api.frPyObjects(s, im["height"], im["width"])
        else:  # compressed: pycocotools reads the string the test wrote
            rle = {"size": s["size"], "counts": s["counts"].encode()}
        want = mask_api.decode(rle)
        if isinstance(s, dict):
            assert (got == want).all()
        else:
            disagree += int((got != want).sum())
            total += int(want.sum())
    # pycocotools draws a polygon along its outline, sluice by pixel centres: about 1 % of the area
    # differs (0.94 % on 40 images), all of it on the outline
    assert total > 0 and disagree <= 0.03 * total


def test_coco_instance_masks_bad_input_is_named(tmp_path):
    path, images, anns, _ = write_coco(tmp_path, n=4, size=(96, 80))
    img = sluice.image((80, 96))
    doc = json.loads(path.read_text())
    odd = next(k for k, a in enumerate(doc["annotations"]) if isinstance(a["segmentation"], list))
    doc["annotations"][odd]["segmentation"][0].append(3.0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(sluice.FormatError, match=rf"annotations\[{odd}\]\.segmentation\[0\]: \d+ numbers; a polygon"):
        sluice.Loader(sluice.coco(tmp_path / "train", bad, decode=img, segmentation=True), batch_size=2)
    # without segmentation=True the polygons are not read, so the file opens
    sluice.Loader(sluice.coco(tmp_path / "train", bad, decode=img), batch_size=2).close()

    doc = json.loads(path.read_text())
    rle = next(k for k, a in enumerate(doc["annotations"]) if isinstance(a["segmentation"], dict))
    a = doc["annotations"][rle]
    a["segmentation"] = {"size": [81, 96], "counts": [81 * 96]}  # one row taller than its image
    bad.write_text(json.dumps(doc))
    with sluice.Loader(sluice.coco(tmp_path / "train", bad, decode=img, segmentation=True), batch_size=4,
                       sampler=sluice.sample.sequential(), workers=1) as ld:
        with pytest.raises(sluice.Error, match=r"run-length mask of 96x81 but the image is 96x80"):
            for _ in ld:
                pass
    with pytest.raises(sluice.UsageError, match="segmentation=1 is not accepted"):
        sluice.coco(tmp_path / "train", path, decode=img, segmentation=1)
