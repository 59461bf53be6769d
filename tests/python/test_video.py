"""Video clips from Python (sluice.videos): videos encoded here by the ffmpeg tool from frames that
carry their own number in their pixels, so each delivered frame is checked to be the one asked
for; every clip once an epoch; random clips a new start an epoch, the same for any worker count and
after load_state_dict; layouts and float output; the mistakes. Skipped without the ffmpeg tool or
in a module built without FFmpeg (the prebuilt wheel)."""
import shutil
import subprocess

import numpy as np
import pytest

import sluice

W, H, BLOCK, BITS = 96, 48, 8, 12

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the ffmpeg tool is not installed")


def frame(n):
    f = np.full((H, W, 3), 90, np.uint8)
    for b in range(BITS):
        f[:BLOCK, b * BLOCK:(b + 1) * BLOCK] = 255 if (n >> b) & 1 else 0
    return f


def number(rgb):
    return sum(1 << b for b in range(BITS) if rgb[BLOCK // 2, b * BLOCK + BLOCK // 2, 0] > 127)


def encode(path, n):
    raw = np.stack([frame(i) for i in range(n)]).tobytes()
    subprocess.run(["ffmpeg", "-y", "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
                    "-s", f"{W}x{H}", "-r", "25", "-i", "-", "-c:v", "libx264", "-bf", "2", "-g", "8", "-qp", "0",
                    "-pix_fmt", "yuv420p", str(path)], input=raw, check=True)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    return [encode(d / f"v{k}.mp4", n) for k, n in enumerate((30, 20, 41))]


def make(files, **kw):
    try:
        return sluice.Loader(sluice.videos(files, **kw.pop("src")), **kw)
    except sluice.UsageError as e:
        if "without FFmpeg" in str(e):
            pytest.skip("this sluice module was built without FFmpeg")
        raise


def as_np(t):
    return np.from_dlpack(t)


def test_every_clip_once_with_the_frames_asked_for(files):
    src = dict(labels=[5, 6, 7], decode=sluice.image((H, W)), frames=4, stride=2, clips="every", step=3)
    loader = make(files, src=src, batch_size=4, seed=1)
    seen = []
    for b in loader:
        v, y = as_np(b["video"]), as_np(b["label"])
        assert v.shape[1:] == (4, H, W, 3) and v.dtype == np.uint8
        for i in range(v.shape[0]):
            n = [number(v[i, j]) for j in range(4)]
            assert n == [n[0] + 2 * j for j in range(4)]
            seen.append((int(y[i]), n[0]))
    want = sorted((5 + k, f) for k, length in enumerate((30, 20, 41)) for f in range(0, length - 6, 3))
    assert sorted(seen) == want
    assert len(loader) == (len(want) + 3) // 4


def test_random_clips_new_each_epoch_same_for_any_workers_and_resumed(files):
    src = dict(decode=sluice.image((24, 32), crop="random_resized", flip=True, layout="chw"), frames=3, stride=1,
               per_video=2)
    def epoch(loader, e=None):
        if e is not None:
            loader.set_epoch(e)
        return [as_np(b["video"]).copy() for b in loader]
    a = make(files, src=src, batch_size=2, workers=1, seed=3)
    b = make(files, src=src, batch_size=2, workers=2, seed=3)
    e0 = epoch(a, 0)
    assert e0[0].shape == (2, 3, 3, 24, 32)
    assert all(np.array_equal(x, y) for x, y in zip(e0, epoch(b, 0)))
    e1 = epoch(a, 1)
    assert not all(np.array_equal(x, y) for x, y in zip(e0, e1))
    # Resumed after the first batch of epoch 1: the rest of that epoch, byte for byte.
    c = make(files, src=src, batch_size=2, workers=2, seed=3)
    c.set_epoch(1)
    it = iter(c)
    next(it)
    state = c.state_dict()
    d = make(files, src=src, batch_size=2, workers=1, seed=3)
    d.load_state_dict(state)
    rest = [as_np(x["video"]).copy() for x in d]
    assert len(rest) == len(e1) - 1
    assert all(np.array_equal(x, y) for x, y in zip(rest, e1[1:]))


def test_float_output_normalised_per_channel(files):
    src = dict(decode=sluice.image((16, 16)), frames=2, clips="every", output="float32", mean=[0.5, 0.4, 0.3],
               std=[0.2, 0.25, 0.5])
    u8 = make(files, src={k: v for k, v in src.items() if k not in ("output", "mean", "std")}, batch_size=3,
              sampler=sluice.sample.sequential())
    f32 = make(files, src=src, batch_size=3, sampler=sluice.sample.sequential())
    for bu, bf in zip(u8, f32):
        x, y = as_np(bu["video"]).astype(np.float32) / 255, as_np(bf["video"])
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, (x - np.array([0.5, 0.4, 0.3])) / np.array([0.2, 0.25, 0.5]), rtol=1e-5, atol=1e-5)


def test_mistakes_are_named(files, tmp_path):
    with pytest.raises(sluice.UsageError, match="labels= has 2 labels for 3 videos"):
        sluice.videos(files, labels=[1, 2], decode=sluice.image((8, 8)))
    with pytest.raises(sluice.UsageError, match="clips='all'"):
        sluice.videos(files, clips="all", decode=sluice.image((8, 8)))
    with pytest.raises(sluice.UsageError, match="decode= is required"):
        sluice.videos(files)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 1000)
    loader = make([files[0], str(bad)], src=dict(decode=sluice.image((8, 8)), frames=2), batch_size=2,
                  sampler=sluice.sample.sequential())
    with pytest.raises(sluice.Error, match="bad.mp4"):
        for _ in loader:
            pass
    skipping = make([files[0], str(bad)], src=dict(decode=sluice.image((8, 8)), frames=2), batch_size=2,
                    sampler=sluice.sample.sequential(), errors="skip")
    assert sum(as_np(b["video"]).shape[0] for b in skipping) == 1
    assert skipping.stats()["skipped"] == 1
    causes = skipping.stats()["skip_causes"]       # why, for the first 16 skipped
    assert len(causes) == 1 and "bad.mp4" in causes[0], causes


def test_videos_shorter_than_a_clip_are_named_in_a_warning_and_a_truncated_one_is_an_error(files, tmp_path):
    # clips="every": a video with fewer frames than a clip has no clips. That is said when the
    # loader is made (pointing at that line), naming the videos; a file cut short is an error
    # naming it, also when its index was written first (-movflags +faststart).
    import warnings
    short = encode(tmp_path / "short.mp4", 5)
    src = dict(decode=sluice.image((H, W)), frames=8, clips="every")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loader = make([files[1], short], src=src, batch_size=4, sampler=sluice.sample.sequential())
    said = [w for w in seen if "shorter than a clip" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__, [(str(w.message), w.filename) for w in seen]
    said = [str(said[0].message)]
    assert "1 of 2 videos are shorter than a clip (8 frames every 1 frame)" in said[0] and "short.mp4' (5 frames)" in said[0]
    assert sum(as_np(b["video"]).shape[0] for b in loader) == 20 // 8
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make([files[1]], src=src, batch_size=4)
    assert not [w for w in seen if "shorter than a clip" in str(w.message)]

    raw = np.stack([frame(i) for i in range(30)]).tobytes()
    whole = tmp_path / "fast.mp4"
    subprocess.run(["ffmpeg", "-y", "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
                    "-s", f"{W}x{H}", "-r", "25", "-i", "-", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags",
                    "+faststart", str(whole)], input=raw, check=True)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[:whole.stat().st_size * 6 // 10])
    with pytest.raises(sluice.FormatError, match=r"cut\.mp4.*truncated: the container's index places frame data"):
        make([files[0], str(cut)], src=src, batch_size=4)
