"""Detection from Python: WebDataset boxes and classes that follow RandomResizedCrop + flip
(examples/python/detection.py writes the shards and checks every box against the pixels), and
the mistakes a user makes with them: boxes of another dtype, a missing member, a label or a
class-balanced sampler where each box has its own class."""
import io
import os
import sys
import tarfile

import numpy as np
import pytest

import sluice

pytest.importorskip("PIL")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
import detection  # noqa: E402


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("det")
    return detection.write_shards(str(d), 120, 3)


def test_boxes_follow_the_crop_and_flip_for_any_worker_count(shards):
    pattern, written = shards
    t, digest = detection.run_epoch(pattern, 96, 2)
    assert t["samples"] == 120 and t["checked"] > 100
    assert t["wrong"] == 0 and t["outside"] == 0
    assert 0 < t["kept"] < sum(written.values())          # random_resized_crop drops some
    assert detection.run_epoch(pattern, 96, 0)[1] == digest
    assert detection.run_epoch(pattern, 96, 2, epoch=1)[1] != digest  # another epoch, other crops


def test_batch_layout_and_centre_crop_keeps_every_box_of_a_square_image(tmp_path):
    img = np.full((64, 64, 3), 118, np.uint8)
    img[8:24, 8:40] = detection.PALETTE[2]
    jpg = io.BytesIO()
    detection.Image.fromarray(img).save(jpg, format="JPEG", quality=95)
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        for k in range(3):
            detection.add_member(tar, f"s{k}.jpg", jpg.getvalue())
            detection.add_member(tar, f"s{k}.boxes.npy", detection.npy_bytes(np.array([[8, 8, 40, 24]], np.float32)))
            detection.add_member(tar, f"s{k}.classes.npy", detection.npy_bytes(np.array([2], np.int64)))
    src = sluice.wds(str(tmp_path / "a.tar"), decode=sluice.image((32, 32), layout="chw"), boxes=sluice.boxes(),
                     output="float32")
    b = next(iter(sluice.Loader(src, batch_size=3, sampler=sluice.sample.sequential())))
    assert set(b) == {"image", "boxes", "boxes.offsets", "classes", "classes.offsets"}
    assert b["image"].shape == (3, 3, 32, 32) and b["image"].dtype == "float32"
    assert np.from_dlpack(b["boxes"]).tolist() == [[4, 4, 20, 12]] * 3  # halved with the image
    assert np.from_dlpack(b["boxes.offsets"]).tolist() == [0, 1, 2, 3]
    assert np.from_dlpack(b["classes"]).tolist() == [2, 2, 2]


def write_one(path, boxes, classes=np.array([1], np.int64)):
    img = io.BytesIO()
    detection.Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(img, format="JPEG")
    with tarfile.open(path, "w") as tar:
        detection.add_member(tar, "k0.jpg", img.getvalue())
        if boxes is not None:
            detection.add_member(tar, "k0.boxes.npy", detection.npy_bytes(boxes))
        if classes is not None:
            detection.add_member(tar, "k0.classes.npy", detection.npy_bytes(classes))
    return str(path)


def first_batch(path, **kw):
    src = sluice.wds(path, decode=sluice.image((8, 8)), boxes=sluice.boxes(**kw))
    return next(iter(sluice.Loader(src, batch_size=1, sampler=sluice.sample.sequential())))


def test_boxes_of_another_dtype_are_a_format_error_naming_the_member(tmp_path):
    path = write_one(tmp_path / "f8.tar", np.array([[1, 1, 4, 4]], np.float64))  # numpy's default float
    with pytest.raises(sluice.FormatError, match=r"f8\.tar.*(<f8|float64)") as e:
        first_batch(path)
    assert "boxes" in str(e.value)
    path = write_one(tmp_path / "nocls.tar", np.array([[1, 1, 4, 4]], np.float32), classes=None)
    with pytest.raises(sluice.FormatError, match="classes"):
        first_batch(path)


def test_detection_mistakes_are_usage_errors_or_type_errors(tmp_path):
    path = write_one(tmp_path / "ok.tar", np.array([[1, 1, 4, 4]], np.float32))
    img = sluice.image((8, 8))
    with pytest.raises(sluice.UsageError, match="label_field= names a classification label"):
        sluice.wds(path, decode=img, boxes=sluice.boxes(), label_field="cls")
    with pytest.raises(sluice.UsageError, match="class_balanced needs labels"):
        sluice.Loader(sluice.wds(path, decode=img, boxes=sluice.boxes()), sampler=sluice.sample.class_balanced())
    with pytest.raises(sluice.UsageError, match="format='ccwh'"):
        sluice.boxes(format="ccwh")
    for bad in (dict(min_size=float("nan")), dict(min_size=float("inf")), dict(min_size=-1), dict(min_visible=1.5),
                dict(normalized="false")):
        with pytest.raises(sluice.UsageError, match="sluice.boxes"):
            sluice.boxes(**bad)
    with pytest.raises(sluice.UsageError, match="min_size"):
        sluice.Boxes("boxes.npy", "classes.npy", "xyxy", False, -3, 0)  # the class checks too
    with pytest.raises(sluice.UsageError, match="boxes=.*not accepted"):
        sluice.wds(path, decode=img, boxes="boxes.npy")
    with pytest.raises(TypeError, match=r"'boxes' applies to sluice.wds\(\)"):
        sluice.npy(path, boxes=sluice.boxes())
    assert len(first_batch(path)["boxes"]) == 1


def test_json_boxes_follow_the_crop_exactly_as_the_same_boxes_as_npy(shards, tmp_path):
    # The module's shards again, each sample's boxes also as COCO-style JSON (xywh, "category_id").
    pattern, written = shards
    import json as _json
    copies = []
    for src in sorted(os.listdir(os.path.dirname(pattern))):
        if not src.endswith(".tar"):
            continue
        out = tmp_path / src
        with tarfile.open(os.path.join(os.path.dirname(pattern), src)) as tin, tarfile.open(out, "w") as tout:
            members = {m.name: tin.extractfile(m).read() for m in tin.getmembers()}
            for name, data in members.items():
                detection.add_member(tout, name, data)
                if name.endswith(".boxes.npy"):
                    key = name[:-len(".boxes.npy")]
                    bx = np.load(io.BytesIO(data))
                    cl = np.load(io.BytesIO(members[key + ".classes.npy"]))
                    ann = [{"bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])],
                            "category_id": int(c)} for b, c in zip(bx, cl)]
                    detection.add_member(tout, key + ".json", _json.dumps({"annotations": ann}).encode())
        copies.append(str(out))
    img = sluice.image((96, 96), crop="random_resized", flip=True)

    def epoch(boxes):
        with sluice.Loader(sluice.wds(copies, decode=img, boxes=boxes), batch_size=16, workers=2,
                           sampler=sluice.sample.shuffle(seed=7)) as ld:
            return [(np.from_dlpack(b["boxes"]).copy(), np.from_dlpack(b["classes"]).tolist(),
                     np.from_dlpack(b["boxes.offsets"]).tolist()) for b in ld]

    a, b = epoch(sluice.json_boxes(min_size=4)), epoch(sluice.boxes(min_size=4))
    assert len(a) == len(b) > 0
    for (ba, ca, oa), (bb, cb, ob) in zip(a, b):
        assert ca == cb and oa == ob
        np.testing.assert_array_equal(ba, bb)  # integer pixel boxes: xywh -> xyxy is exact

    # Bad JSON names the shard, the sample, the member and the path; skip drops and counts it.
    bad = tmp_path / "bad.tar"
    with tarfile.open(copies[0]) as tin, tarfile.open(bad, "w") as tout:
        broken = False
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name.endswith(".json") and not broken:
                broken = True
                data = b'{"annotations": [{"bbox": [1, 2, 3], "category_id": 1}]}'
            detection.add_member(tout, m.name, data)
    with pytest.raises(sluice.FormatError, match=r"bad\.tar.*field 'json', path 'annotations\[\*\]\.bbox'.*not rows of 4"):
        list(sluice.Loader(sluice.wds(str(bad), decode=img, boxes=sluice.json_boxes()), batch_size=8,
                           sampler=sluice.sample.sequential()))
    ld = sluice.Loader(sluice.wds(str(bad), decode=img, boxes=sluice.json_boxes()), batch_size=8, errors="skip",
                       drop_last=False)
    assert sum(np.from_dlpack(b["image"]).shape[0] for b in ld) == 39 and ld.stats()["skipped"] == 1
    with pytest.raises(sluice.UsageError, match="format='ltrb' is not accepted"):
        sluice.json_boxes(format="ltrb")


def _pb_varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb_len(num, payload):
    return _pb_varint(num << 3 | 2) + _pb_varint(len(payload)) + payload


def _write_od_tfrecord(path, samples):
    """A TFRecord as the TF Object Detection API writes it: image/encoded, the four packed float
    lists image/object/bbox/{xmin,ymin,xmax,ymax} and image/object/class/label."""
    def crc(data):
        c = 0xFFFFFFFF
        for byte in data:
            c ^= byte
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        c ^= 0xFFFFFFFF
        return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

    with open(path, "wb") as f:
        for jpg, bx, cl in samples:
            feats = {"image/encoded": _pb_len(1, _pb_len(1, jpg)),
                     "image/object/class/label": _pb_len(3, _pb_len(1, b"".join(_pb_varint(int(c)) for c in cl)))}
            for j, n in enumerate(("xmin", "ymin", "xmax", "ymax")):
                feats["image/object/bbox/" + n] = _pb_len(2, _pb_len(1, np.asarray(bx[:, j], "<f4").tobytes()))
            entries = b"".join(_pb_len(1, _pb_len(1, k.encode()) + _pb_len(2, v)) for k, v in feats.items())
            r = _pb_len(1, entries)
            n8 = len(r).to_bytes(8, "little")
            f.write(n8 + crc(n8).to_bytes(4, "little") + r + crc(r).to_bytes(4, "little"))


def test_fields_follow_the_crop_as_the_compiled_boxes_do_as_rows_or_tf_columns(shards, tmp_path):
    pattern, written = shards
    img = sluice.image((96, 96), crop="random_resized", flip=True)

    def epoch(src, workers=2):
        with sluice.Loader(src, batch_size=16, workers=workers, sampler=sluice.sample.shuffle(seed=7)) as ld:
            return [{k: np.from_dlpack(v).copy() for k, v in b.items()} for b in ld]

    want = epoch(sluice.wds(pattern, decode=img, boxes=sluice.boxes(min_size=4)))
    kept = sum(len(b["classes"]) for b in want)
    assert 0 < kept < sum(written.values())  # the crops drop some boxes
    fields = {"image": sluice.field("jpg", decode=img),
              "boxes": sluice.field("boxes.npy", follow=sluice.boxes_of("image", min_size=4)),
              "classes": sluice.field("classes.npy", follow=sluice.rows_of("boxes"))}
    for workers in (0, 2):
        got = epoch(sluice.wds(pattern, fields=fields), workers)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert set(g) == set(w)
            for k in w:
                np.testing.assert_array_equal(g[k], w[k], err_msg=k)

    # The same samples as the TF Object Detection API stores them: four coordinate lists.
    samples = []
    for s in range(3):
        with tarfile.open(pattern.replace("{0000..0002}", "%04d" % s)) as tar:
            m = {x.name: tar.extractfile(x).read() for x in tar.getmembers()}
        for name in sorted(m):
            if name.endswith(".jpg"):
                key = name[:-4]
                samples.append((m[name], np.load(io.BytesIO(m[key + ".boxes.npy"])).reshape(-1, 4),
                                np.load(io.BytesIO(m[key + ".classes.npy"]))))
    assert len(samples) == 120
    _write_od_tfrecord(tmp_path / "od.tfrecord", samples)
    bbox = "image/object/bbox/"
    cols = {"image": sluice.field("image/encoded", decode=img),
            **{c: sluice.field(bbox + c, follow=sluice.boxes_of("image", min_size=4, coordinate=k))
               for c, k in (("xmin", "x0"), ("ymin", "y0"), ("xmax", "x1"), ("ymax", "y1"))},
            "classes": sluice.field("image/object/class/label", follow=sluice.rows_of("xmin"))}
    got = epoch(sluice.tfrecord(tmp_path / "od.tfrecord", fields=cols))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g["image"], w["image"])
        np.testing.assert_array_equal(g["classes"], w["classes"])
        np.testing.assert_array_equal(np.stack([g["xmin"], g["ymin"], g["xmax"], g["ymax"]], -1), w["boxes"])
        np.testing.assert_array_equal(g["xmin.offsets"], w["boxes.offsets"])


def test_follow_mistakes_are_usage_errors_naming_the_field(shards):
    pattern, _ = shards
    img = sluice.field("jpg", decode=sluice.image((32, 32)))
    box = sluice.field("boxes.npy", follow=sluice.boxes_of("image"))
    with pytest.raises(sluice.UsageError, match=r"fields\['boxes'\] follows boxes_of\('image'\), which is not a decoded image"):
        sluice.wds(pattern, fields={"image": sluice.field("jpg"), "boxes": box})
    with pytest.raises(sluice.UsageError, match=r"fields\['c'\] follows rows_of\('image'\), which is not a field with boxes_of"):
        sluice.wds(pattern, fields={"image": img, "boxes": box,
                                    "c": sluice.field("classes.npy", follow=sluice.rows_of("image"))})
    with pytest.raises(sluice.UsageError, match=r"the boxes of 'image' have 3 coordinate fields .*give all 4"):
        sluice.wds(pattern, fields={"image": img, **{c: sluice.field(c + ".npy", follow=sluice.boxes_of("image", coordinate=c))
                                                     for c in ("x0", "y0", "x1")}})
    with pytest.raises(sluice.UsageError, match=r"ragged\(\) \(the default\) or sluice.pad\(\), not sluice.stack\(\)"):
        sluice.field("boxes.npy", follow=sluice.boxes_of("image"), collate=sluice.stack())
    with pytest.raises(sluice.UsageError, match=r"coordinate='z' is not accepted; use one of 'x0', 'y0', 'x1', 'y1'"):
        sluice.boxes_of("image", coordinate="z")
    with pytest.raises(sluice.UsageError, match="coordinates are float32 or float64"):
        sluice.field("boxes.npy", dtype="int64", follow=sluice.boxes_of("image"))
    # Boxes stored as int64: the reader's dtype, refused by the engine naming the field and type.
    with pytest.raises(sluice.UsageError, match=r"field 'c' of i64; they must be f32 or f64"):
        sluice.Loader(sluice.wds(pattern, fields={"image": img, "c": sluice.field("classes.npy", follow=sluice.boxes_of("image"))}))
    with pytest.raises(TypeError, match=r"sluice.boxes_of\(\) got an unexpected keyword argument 'min_sise'; did you mean 'min_size'"):
        sluice.boxes_of("image", min_sise=2)
    with pytest.raises(TypeError, match=r"'ignore_index' applies to sluice.wds\(\), sluice.mask_of\(\)"):
        sluice.image((8, 8), ignore_index=3)
