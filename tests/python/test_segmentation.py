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
