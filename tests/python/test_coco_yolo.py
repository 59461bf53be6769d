"""COCO and YOLO from Python: sluice.coco(images, annotations) reads an image folder and its
instances JSON as written by the tools people use (PIL images, a json.dump'ed annotation file with
COCO's xywh boxes, category ids with gaps, crowd regions, images without annotations), and
sluice.yolo(images) Ultralytics' images/ beside labels/ layout (cx cy w h fractions, background
images without a label file), with the boxes and classes following random_resized_crop + flip;
every kept box is checked on the pixels."""
import json

import numpy as np
import pytest

import sluice

Image = pytest.importorskip("PIL.Image")

# Category ids as COCO has them (with gaps), each drawn in its own colour.
CATEGORIES = [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
COLOUR = {1: (220, 30, 30), 3: (30, 200, 40), 18: (40, 60, 220)}
CLASS_OF = {1: 0, 3: 1, 18: 2}  # contiguous: ids in order
PALETTE = np.array([COLOUR[1], COLOUR[3], COLOUR[18]], dtype=np.int32)


def scene(rng, colours, empty):
    """A grey picture of 160..240 x 120..180 with 1 to 3 filled rectangles side by side (none when
    `empty`), each in a colour drawn from `colours`: (pixels, [(x0, y0, w, h, colour index), ...])."""
    w, h = int(rng.integers(160, 241)), int(rng.integers(120, 181))
    px = np.full((h, w, 3), 118, np.uint8)
    rects = []
    if not empty:
        m = int(rng.integers(1, 4))
        band = w // m
        for j in range(m):
            bw, bh = int(rng.integers(20, band - 4)), int(rng.integers(20, h - 4))
            x0, y0 = j * band + int(rng.integers(0, band - bw + 1)), int(rng.integers(0, h - bh + 1))
            c = int(rng.integers(0, len(colours)))
            px[y0:y0 + bh, x0:x0 + bw] = colours[c]
            rects.append((x0, y0, bw, bh, c))
    return px, rects


def write_coco(root, n=24):
    """n images (every 5th without annotations), 1-3 rectangles each; returns the annotation path."""
    rng = np.random.default_rng(5)
    (root / "train").mkdir()
    images, anns = [], []
    for k in range(n):
        px, rects = scene(rng, [COLOUR[1], COLOUR[3], COLOUR[18]], k % 5 == 4)
        h, w = px.shape[:2]
        image_id = 1000 + 7 * k
        for j, (x0, y0, bw, bh, c) in enumerate(rects):
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": [1, 3, 18][c], "area": float(bw * bh),
                         "bbox": [float(x0), float(y0), float(bw), float(bh)], "iscrowd": int(j == 2),
                         "segmentation": [[x0, y0, x0 + bw, y0, x0 + bw, y0 + bh]]})
        name = f"{image_id:012d}.jpg"
        Image.fromarray(px).save(root / "train" / name, format="JPEG", quality=92)
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
    rng.shuffle(anns)  # annotations in no particular order, as in COCO's files
    path = root / "instances_train.json"
    path.write_text(json.dumps({"info": {}, "licenses": [], "images": images, "annotations": anns,
                                "categories": CATEGORIES}))
    return path, images, anns


def class_at(p):
    d = np.abs(PALETTE - p.astype(np.int32)).sum(axis=1)
    return int(d.argmin()) if d.min() < 90 else -1


def epoch(src, workers, size=96, fractions=False):
    tally = dict(samples=0, kept=0, checked=0, wrong=0, outside=0, crowd=0)
    parts = []
    with sluice.Loader(src, batch_size=5, workers=workers, sampler=sluice.sample.shuffle(seed=3),
                       drop_last=False) as loader:
        for b in loader:
            img, boxes = np.from_dlpack(b["image"]), np.from_dlpack(b["boxes"])
            cls, off = np.from_dlpack(b["classes"]), np.from_dlpack(b["boxes.offsets"])
            crowd = np.from_dlpack(b["iscrowd"]) if "iscrowd" in b else np.zeros(len(cls), np.uint8)
            assert boxes.dtype == np.float32 and boxes.shape[1:] == (4,) and cls.dtype == np.int64
            assert crowd.dtype == np.uint8 and len(crowd) == len(cls)
            if fractions:
                assert ((boxes >= 0) & (boxes <= 1)).all()
                boxes = boxes * size
            parts += [a.tobytes() for a in (img, boxes, cls, crowd, off)]
            tally["samples"] += img.shape[0]
            tally["kept"] += boxes.shape[0]
            tally["crowd"] += int(crowd.sum())
            for i in range(img.shape[0]):
                for r, c in zip(boxes[off[i]:off[i + 1]], cls[off[i]:off[i + 1]]):
                    if not (0 <= r[0] < r[2] <= size and 0 <= r[1] < r[3] <= size):
                        tally["outside"] += 1
                        continue
                    if r[2] - r[0] < 8 or r[3] - r[1] < 8:
                        continue
                    tally["checked"] += 1
                    pts = [img[i, int(r[1] + fy * (r[3] - r[1])), int(r[0] + fx * (r[2] - r[0]))]
                           for fx in (0.25, 0.75) for fy in (0.25, 0.75)]
                    tally["wrong"] += any(class_at(p) != c for p in pts)
    return tally, b"".join(parts)


def test_coco_boxes_follow_the_crop_and_flip(tmp_path):
    path, images, anns = write_coco(tmp_path)
    src = sluice.coco(tmp_path / "train", path, decode=sluice.image((96, 96), crop="random_resized", flip=True),
                      min_size=2)
    t, two = epoch(src, 2)
    assert t["samples"] == len(images)
    assert t["outside"] == 0 and t["wrong"] == 0
    assert t["checked"] >= len(anns) // 3
    _, zero = epoch(src, 0)
    assert zero == two

    # A centre crop: an annotation wholly inside the window arrives, converted to xyxy output pixels,
    # with its class and flag; one wholly outside does not; none arrives that the image lacks.
    plain = sluice.coco(tmp_path / "train", path, decode=sluice.image((96, 96)))
    with sluice.Loader(plain, batch_size=len(images), sampler=sluice.sample.sequential(), workers=1) as ld:
        b = next(iter(ld))
    boxes, cls, off = np.from_dlpack(b["boxes"]), np.from_dlpack(b["classes"]), np.from_dlpack(b["boxes.offsets"])
    crowd = np.from_dlpack(b["iscrowd"])
    inside = 0
    for i, im in enumerate(images):
        s = max(96 / im["width"], 96 / im["height"])
        wx, wy = (im["width"] - 96 / s) / 2, (im["height"] - 96 / s) / 2
        got = {(int(c), int(f), tuple(np.round(r, 2))) for r, c, f in
               zip(boxes[off[i]:off[i + 1]], cls[off[i]:off[i + 1]], crowd[off[i]:off[i + 1]])}
        mine = [a for a in anns if a["image_id"] == im["id"]]
        assert len(got) <= len(mine)
        for a in mine:
            x, y, w, h = a["bbox"]
            want = (CLASS_OF[a["category_id"]], a["iscrowd"],
                    tuple(np.round(np.array([(x - wx) * s, (y - wy) * s, (x + w - wx) * s, (y + h - wy) * s],
                                            np.float32), 2)))
            if x >= wx and x + w <= wx + 96 / s and y >= wy and y + h <= wy + 96 / s:
                inside += 1
                assert any(g[:2] == want[:2] and np.allclose(g[2], want[2], atol=0.02) for g in got), (a, got)
            elif x + w <= wx or x >= wx + 96 / s:
                assert not any(g[:2] == want[:2] and np.allclose(g[2], want[2], atol=0.02) for g in got)
    assert inside >= len(anns) // 4
    assert sum(off[i + 1] == off[i] for i in range(len(images))) >= len(images) // 5  # kept, with no boxes

    assert sluice.coco_categories(path) == [(1, "person"), (3, "car"), (18, "dog")]


def test_coco_options(tmp_path):
    path, images, anns = write_coco(tmp_path)
    img = sluice.image((64, 64))

    def first_batch(**kw):
        with sluice.Loader(sluice.coco(tmp_path / "train", path, decode=img, **kw), batch_size=64,
                           sampler=sluice.sample.sequential(), drop_last=False, workers=1) as ld:
            return next(iter(ld))

    b = first_batch(keep_empty=False, crowd=False)
    assert np.from_dlpack(b["image"]).shape[0] == len({a["image_id"] for a in anns if not a["iscrowd"]})
    assert np.from_dlpack(b["iscrowd"]).sum() == 0
    b = first_batch(contiguous=False)
    assert set(np.from_dlpack(b["classes"]).tolist()) <= {1, 3, 18}
    xywh = np.from_dlpack(first_batch(format="xywh")["boxes"])
    xyxy = np.from_dlpack(first_batch()["boxes"])
    np.testing.assert_allclose(xywh[:, 2:], xyxy[:, 2:] - xyxy[:, :2], rtol=1e-5, atol=1e-4)


def test_coco_bad_input_is_named(tmp_path):
    path, images, anns = write_coco(tmp_path, n=6)
    img = sluice.image((64, 64))
    doc = json.loads(path.read_text())
    doc["annotations"][2]["bbox"][2] = -4.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(sluice.FormatError, match=r"bad.json.*annotations\[2\]\.bbox: a negative width"):
        sluice.Loader(sluice.coco(tmp_path / "train", bad, decode=img), batch_size=2)
    doc = json.loads(path.read_text())
    doc["annotations"][0]["category_id"] = 2
    bad.write_text(json.dumps(doc))
    with pytest.raises(sluice.FormatError, match=r"annotations\[0\]: category_id 2 is not an id of"):
        sluice.Loader(sluice.coco(tmp_path / "train", bad, decode=img), batch_size=2)
    (tmp_path / "train" / images[1]["file_name"]).unlink()
    with pytest.raises(sluice.FormatError, match=r"1 of its 6 images are not files in .*" + images[1]["file_name"]):
        sluice.Loader(sluice.coco(tmp_path / "train", path, decode=img), batch_size=2)
    with pytest.raises(sluice.UsageError, match=r"format='cxwh' is not accepted; use 'xyxy' \(corners\), 'xywh' \(the "
                       r"top-left corner and the size, COCO's\) or 'cxcywh'"):
        sluice.coco(tmp_path / "train", path, decode=img, format="cxwh")
    with pytest.raises(TypeError, match="boxes"):
        sluice.coco(tmp_path / "train", path, decode=img, boxes=sluice.boxes())
    with pytest.raises(sluice.UsageError, match="class_balanced"):
        sluice.Loader(sluice.coco(tmp_path / "train", path, decode=img), batch_size=2,
                      sampler=sluice.sample.class_balanced())


def write_yolo(root, n=20):
    """Ultralytics' layout: images/train/*.jpg, labels/train/*.txt (cx cy w h fractions); every 4th
    image is background (no label file, or an empty one)."""
    rng = np.random.default_rng(9)
    (root / "images" / "train").mkdir(parents=True)
    (root / "labels" / "train").mkdir(parents=True)
    boxes = 0
    for k in range(n):
        px, rects = scene(rng, PALETTE, k % 4 == 3)
        h, w = px.shape[:2]
        lines = [f"{c} {(x0 + bw / 2) / w:.6f} {(y0 + bh / 2) / h:.6f} {bw / w:.6f} {bh / h:.6f}"
                 for x0, y0, bw, bh, c in rects]
        boxes += len(lines)
        Image.fromarray(px).save(root / "images" / "train" / f"{k:06d}.jpg", format="JPEG", quality=92)
        if lines or k % 8 == 3:
            (root / "labels" / "train" / f"{k:06d}.txt").write_text("\n".join(lines) + ("\n" if lines else ""))
    return boxes


def test_yolo_boxes_follow_the_crop_and_flip_as_fractions(tmp_path):
    n_boxes = write_yolo(tmp_path)
    src = sluice.yolo(tmp_path / "images" / "train", decode=sluice.image((96, 96), crop="random_resized", flip=True),
                      classes=3)
    t, two = epoch(src, 2, fractions=True)
    assert t["samples"] == 20 and t["outside"] == 0 and t["wrong"] == 0
    assert t["checked"] >= n_boxes // 3
    _, zero = epoch(src, 0, fractions=True)
    assert zero == two
    # Background images kept (5 of 20), or dropped.
    with sluice.Loader(sluice.yolo(tmp_path / "images" / "train", decode=sluice.image((64, 64)), keep_empty=False),
                       batch_size=32, drop_last=False) as ld:
        assert sum(np.from_dlpack(b["image"]).shape[0] for b in ld) == 15
    # The same dataset with its labels folder named.
    named = sluice.yolo(tmp_path / "images" / "train", labels=tmp_path / "labels" / "train",
                        decode=sluice.image((96, 96), crop="random_resized", flip=True), classes=3)
    assert epoch(named, 2, fractions=True)[1] == two


def test_box_formats_are_one_box_in_three_forms(tmp_path):
    # The same crops and flips: xywh is the top-left corner and the size, cxcywh (YOLO's own, what
    # Ultralytics' losses take) the centre and the size, of the same corners.
    write_yolo(tmp_path)
    def boxes(fmt):
        src = sluice.yolo(tmp_path / "images" / "train", format=fmt,
                          decode=sluice.image((96, 96), crop="random_resized", flip=True))
        with sluice.Loader(src, batch_size=8, sampler=sluice.sample.sequential(), workers=0) as ld:
            return np.concatenate([np.from_dlpack(b["boxes"]) for b in ld])
    xyxy, xywh, cxcywh = boxes("xyxy"), boxes("xywh"), boxes("cxcywh")
    assert len(xyxy) > 10
    size = xyxy[:, 2:] - xyxy[:, :2]
    np.testing.assert_allclose(xywh, np.hstack([xyxy[:, :2], size]), atol=1e-6)
    np.testing.assert_allclose(cxcywh, np.hstack([xyxy[:, :2] + size / 2, size]), atol=1e-6)


def test_yolo_bad_input_is_named(tmp_path):
    write_yolo(tmp_path, n=6)
    img = sluice.image((64, 64))
    images = tmp_path / "images" / "train"
    (tmp_path / "labels" / "train" / "000000.txt").write_text("1 0.5 0.5 0.1 0.1\n2 0.5 0.5 0.1 0.1\n")
    for f in (tmp_path / "labels" / "train").glob("00000[1-9].txt"):
        f.unlink()
    with pytest.raises(sluice.FormatError, match=r"000000.txt.*line 2: class 2 is not below the class count 2"):
        sluice.Loader(sluice.yolo(images, decode=img, classes=2), batch_size=2)
    (tmp_path / "labels" / "train" / "000000.txt").write_text("0 0.5 0.5 0.1\n")
    with pytest.raises(sluice.FormatError, match=r"000000.txt.*line 1: 3 numbers after the class"):
        sluice.Loader(sluice.yolo(images, decode=img), batch_size=2)
    (tmp_path / "labels" / "train" / "000000.txt").write_text("0 0.1 0.1 0.5 0.1 0.3 0.6\n")
    with pytest.raises(sluice.FormatError, match=r"polygons = true"):
        sluice.Loader(sluice.yolo(images, decode=img), batch_size=2)
    sluice.Loader(sluice.yolo(images, decode=img, polygons=True), batch_size=2)
    (images / "x.webp").write_bytes(b"RIFF")
    with pytest.raises(sluice.UsageError, match=r"not JPEG or PNG .*x.webp"):
        sluice.Loader(sluice.yolo(images, decode=img), batch_size=2)
    with pytest.raises(sluice.UsageError, match="format='yolo' is not accepted.* or 'cxcywh' \\(the centre and the size, YOLO's\\)"):
        sluice.yolo(images, decode=img, format="yolo")


def test_a_photo_turned_by_its_exif_orientation_is_refused_where_boxes_follow_it(tmp_path):
    # A phone's photo is stored sideways with EXIF Orientation 6; Ultralytics (and every labelling
    # tool) reads and labels it upright, sluice decodes the stored pixels as PIL and torchvision
    # do: its boxes would mark other pixels. It is a FormatError naming the file, skipped and
    # counted with errors="skip"; the same file without followers decodes as stored.
    write_yolo(tmp_path, n=4)
    images = tmp_path / "images" / "train"
    im = Image.open(images / "000001.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6
    im.save(images / "000001.jpg", format="JPEG", quality=92, exif=exif.tobytes())
    src = sluice.yolo(images, decode=sluice.image((64, 64)))
    with pytest.raises(sluice.FormatError, match=r"000001.jpg.*EXIF Orientation 6 \(shown rotated 90 degrees "
                                                 r"clockwise\).*exif_transpose"):
        for _ in sluice.Loader(src, batch_size=4, sampler=sluice.sample.sequential()):
            pass
    with sluice.Loader(src, batch_size=4, errors="skip") as ld:
        assert sum(np.from_dlpack(b["image"]).shape[0] for b in ld) == 3
        assert ld.stats()["skipped"] == 1
        assert "000001.jpg" in ld.stats()["skip_causes"][0] and "EXIF Orientation 6" in ld.stats()["skip_causes"][0]


def test_yolo_labels_found_nowhere_are_an_error_not_background(tmp_path):
    write_yolo(tmp_path, n=4)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "labels" / "train").rename(tmp_path / "elsewhere" / "train")
    with pytest.raises(sluice.UsageError, match=r"none of the 4 images .* has a label file .*labels="):
        sluice.Loader(sluice.yolo(tmp_path / "images" / "train", decode=sluice.image((32, 32))), batch_size=2)
    ld = sluice.Loader(sluice.yolo(tmp_path / "images" / "train", labels=tmp_path / "elsewhere" / "train",
                                   decode=sluice.image((32, 32))), batch_size=4)
    assert np.from_dlpack(next(iter(ld))["classes"]).size > 0
