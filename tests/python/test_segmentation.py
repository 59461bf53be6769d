"""Segmentation from Python: a WebDataset mask (PNG of class ids, grey or palette) that follows the
image through RandomResizedCrop + flip, nearest-neighbour (ids never blended), checked pixel by
pixel against the image's colours; and the mistakes: a mask of another size, an RGB mask."""
import io
import tarfile

import numpy as np
import pytest

import sluice

Image = pytest.importorskip("PIL.Image")

COLOURS = {1: (220, 30, 30), 2: (30, 200, 40), 3: (40, 60, 230)}  # class id -> the image's colour


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def png(array, mode):
    out = io.BytesIO()
    img = Image.fromarray(array, mode="L") if mode == "L" else Image.fromarray(array, mode="P")
    if mode == "P":
        img.putpalette([0, 0, 0] + [c for k in (1, 2, 3) for c in COLOURS[k]] + [0, 0, 0] * 252)
    img.save(out, format="PNG")
    return out.getvalue()


def regions(h, w, k):
    """Class ids in three off-centre vertical bands (so a flip shows), shifted per sample."""
    ids = np.ones((h, w), np.uint8)
    ids[:, (w * (3 + k % 3)) // 10:] = 2
    ids[:, (w * 7) // 10:] = 3
    return ids


def write_shard(path, n, mode="P", mask_size=None):
    with tarfile.open(path, "w") as tar:
        for k in range(n):
            h, w = 96 + 8 * (k % 4), 128 - 8 * (k % 3)
            ids = regions(h, w, k)
            img = np.zeros((h, w, 3), np.uint8)
            for c, rgb in COLOURS.items():
                img[ids == c] = rgb
            jpg = io.BytesIO()
            Image.fromarray(img).save(jpg, format="JPEG", quality=98)
            add(tar, f"s{k:04d}.jpg", jpg.getvalue())
            m = ids if mask_size is None else regions(*mask_size, k)
            add(tar, f"s{k:04d}.seg.png", png(m, mode))


@pytest.mark.parametrize("mode", ["P", "L"])
def test_the_mask_follows_the_crop_and_flip_never_blended(tmp_path, mode):
    write_shard(tmp_path / "a.tar", 24, mode)
    src = sluice.wds(tmp_path / "a.tar", decode=sluice.image((48, 64), crop="random_resized", flip=True, layout="hwc"),
                     mask="seg.png")

    def epoch(workers):
        out = []
        with sluice.Loader(src, batch_size=8, sampler=sluice.sample.sequential(), workers=workers, seed=5) as ld:
            for b in ld:
                assert set(b) == {"image", "mask"}
                img, m = np.from_dlpack(b["image"]), np.from_dlpack(b["mask"])
                assert img.shape[1:] == (48, 64, 3) and m.shape[1:] == (48, 64) and m.dtype == np.uint8
                out.append((img.copy(), m.copy()))
        return out

    two = epoch(2)
    seen_flip = False
    for img, m in two:
        assert set(np.unique(m)) <= {1, 2, 3}                     # only source ids: never blended
        for c, rgb in COLOURS.items():
            # Away from band edges the image's colour says the class: pixels whose 3x3
            # neighbourhood has one id must show that id's colour.
            same = m == c
            inner = same.copy()
            inner[:, 1:-1, 1:-1] &= same[:, :-2, 1:-1] & same[:, 2:, 1:-1] & same[:, 1:-1, :-2] & same[:, 1:-1, 2:]
            inner[:, [0, -1], :] = False
            inner[:, :, [0, -1]] = False
            colour = np.abs(img[inner].astype(int) - rgb).max(axis=1)
            assert (colour < 60).mean() > 0.99
        # Class 3's band is on the right of the source; a flipped sample has it on the left.
        seen_flip |= bool(((m[:, :, :8] == 3).mean(axis=(1, 2)) > 0.5).any())
    assert seen_flip
    zero = epoch(0)
    assert all(np.array_equal(a[1], b[1]) and np.array_equal(a[0], b[0]) for a, b in zip(two, zero))


def test_a_mask_of_another_size_or_kind_is_a_format_error_naming_both(tmp_path):
    write_shard(tmp_path / "s.tar", 2, "L", mask_size=(50, 60))
    src = sluice.wds(tmp_path / "s.tar", decode=sluice.image((32, 32)), mask="seg.png")
    with pytest.raises(sluice.FormatError, match="s.tar") as e:
        for _ in sluice.Loader(src, batch_size=2, workers=0):
            pass
    assert "50" in str(e.value) and "60" in str(e.value)
    with tarfile.open(tmp_path / "rgb.tar", "w") as tar:
        jpg = io.BytesIO()
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(jpg, format="JPEG")
        add(tar, "k.jpg", jpg.getvalue())
        rgb = io.BytesIO()
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(rgb, format="PNG")
        add(tar, "k.seg.png", rgb.getvalue())
    bad = sluice.wds(tmp_path / "rgb.tar", decode=sluice.image((8, 8)), mask="seg.png")
    with pytest.raises(sluice.FormatError, match="field 'mask'.*RGB"):
        for _ in sluice.Loader(bad, batch_size=1, workers=0):
            pass
    for kw, words in [(dict(mask=""), "mask=''"), (dict(mask="seg.png", ignore_index=300), "ignore_index=300"),
                      (dict(mask="seg.png", label_field="cls"), "does not take")]:
        with pytest.raises(sluice.UsageError, match=words):
            sluice.wds(tmp_path / "s.tar", decode=sluice.image((8, 8)), **kw)


def test_fields_mask_and_boxes_follow_one_crop_as_the_compiled_mask_does(tmp_path):
    # The shard again, each sample also with its bands' boxes and classes (rows of 4 pixels, int64).
    write_shard(tmp_path / "a.tar", 24, "P")
    with tarfile.open(tmp_path / "a.tar") as tin, tarfile.open(tmp_path / "b.tar", "w") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            add(tout, m.name, data)
            if m.name.endswith(".seg.png"):
                ids = np.asarray(Image.open(io.BytesIO(data)))
                boxes, classes = [], []
                for c in (1, 2, 3):
                    ys, xs = np.nonzero(ids == c)
                    boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
                    classes.append(c)
                for name, a in (("boxes.npy", np.asarray(boxes, np.float32)), ("classes.npy", np.asarray(classes, np.int64))):
                    buf = io.BytesIO()
                    np.save(buf, a)
                    add(tout, m.name[:-len("seg.png")] + name, buf.getvalue())
    img = sluice.image((48, 64), crop="random_resized", flip=True)

    def epoch(src, workers=2):
        with sluice.Loader(src, batch_size=8, sampler=sluice.sample.shuffle(seed=3), workers=workers, seed=5) as ld:
            return [{k: np.from_dlpack(v).copy() for k, v in b.items()} for b in ld]

    masks = epoch(sluice.wds(tmp_path / "b.tar", decode=img, mask="seg.png", ignore_index=9))
    boxes = epoch(sluice.wds(tmp_path / "b.tar", decode=img, boxes=sluice.boxes(min_size=2)))
    fields = {"image": sluice.field("jpg", decode=img),
              "mask": sluice.field("seg.png", follow=sluice.mask_of("image", ignore_index=9)),
              "boxes": sluice.field("boxes.npy", follow=sluice.boxes_of("image", min_size=2)),
              "classes": sluice.field("classes.npy", follow=sluice.rows_of("boxes"))}
    for workers in (0, 2):
        got = epoch(sluice.wds(tmp_path / "b.tar", fields=fields), workers)
        assert len(got) == len(masks) == len(boxes) == 3
        for g, m, b in zip(got, masks, boxes):
            assert g["mask"].shape == (8, 48, 64) and g["mask"].dtype == np.uint8
            np.testing.assert_array_equal(g["image"], m["image"])
            np.testing.assert_array_equal(g["mask"], m["mask"])
            for k in ("boxes", "boxes.offsets", "classes", "classes.offsets"):
                np.testing.assert_array_equal(g[k], b[k], err_msg=k)
    # Each kept box holds its class in the mask at its centre (one transform for both).
    hits = 0
    for g in got:
        off = g["boxes.offsets"]
        for i in range(8):
            for r in range(off[i], off[i + 1]):
                x0, y0, x1, y1 = g["boxes"][r]
                if x1 - x0 >= 4 and y1 - y0 >= 4:
                    assert g["mask"][i, int((y0 + y1) / 2), int((x0 + x1) / 2)] == g["classes"][r]
                    hits += 1
    assert hits > 20
    # A mask of another size names the field and the image it follows; mistakes are UsageErrors.
    write_shard(tmp_path / "s.tar", 2, "L", mask_size=(50, 60))
    bad = sluice.wds(tmp_path / "s.tar", fields={"image": sluice.field("jpg", decode=sluice.image((32, 32))),
                                                 "mask": sluice.field("seg.png", follow=sluice.mask_of("image"))})
    with pytest.raises(sluice.FormatError, match=r"s\.tar.*field 'mask' \(following 'image'\).*50.*60|s\.tar.*field 'mask' \(following 'image'\).*60.*50"):
        list(sluice.Loader(bad, batch_size=2, workers=0))
    with pytest.raises(sluice.UsageError, match=r"ignore_index=300 is not accepted"):
        sluice.mask_of("image", ignore_index=300)
    with pytest.raises(sluice.UsageError, match=r"collate with sluice.stack\(\) \(the default\), not sluice.ragged\(\)"):
        sluice.field("seg.png", follow=sluice.mask_of("image"), collate=sluice.ragged())
    with pytest.raises(sluice.UsageError, match=r"fields\['c'\] follows rows_of\('mask'\)"):
        sluice.wds(tmp_path / "b.tar", fields={**fields, "c": sluice.field("classes.npy", follow=sluice.rows_of("mask"))})
