"""The Python module: batches as DLPack tensors without a copy, slots that return when the last
tensor dies, the same batches as the C++ pipeline, resume through state_dict, errors as typed
exceptions with the C++ text, a disjoint two-process split, nothing left in /dev/shm."""
import gc
import os
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import sluice

N = 1000           # records
RB = 48            # bytes per record: the record's index as 12 little-endian uint32s
CLASSES = 7


def fnv(*arrays):
    h = 1469598103934665603
    for a in arrays:
        for byte in a.tobytes():
            h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    data = np.repeat(np.arange(N, dtype="<u4")[:, None], RB // 4, axis=1)
    labels = (np.arange(N) % CLASSES).astype("<i8")
    (d / "data.bin").write_bytes(data.tobytes())
    (d / "labels.bin").write_bytes(labels.tobytes())
    return str(d / "data.bin"), str(d / "labels.bin")


def make(records, **kw):
    path, labels = records
    args = dict(path=path, labels=labels, record_bytes=RB, batch_size=64, seed=3, workers=2)
    args.update(kw)
    return sluice.loader("records", **args)


def ids_of(batch):
    return np.from_dlpack(batch["data"]).view("<u4")[:, 0].tolist()


def test_zero_copy_and_contents(records):
    ld = make(records)
    assert len(ld) == (N + 63) // 64
    seen = []
    for b in ld:
        data, label = b["data"], b["label"]
        t = torch.from_dlpack(data)
        assert t.data_ptr() == data.data_ptr          # the batch's own memory, not a copy
        assert np.from_dlpack(data).ctypes.data == data.data_ptr
        assert data.shape == (t.shape[0], RB) and data.dtype == "uint8" and label.dtype == "int64"
        assert data.__dlpack_device__() == (1, 0)     # kDLCPU
        rows = t.view(torch.uint8).numpy().view("<u4")
        ids = rows[:, 0]
        assert (rows == ids[:, None]).all()           # every record intact
        assert (torch.from_dlpack(label).numpy() == ids % CLASSES).all()
        seen += ids.tolist()
    assert sorted(seen) == list(range(N))             # each record exactly once


def test_epochs_differ_and_repeat(records):
    ld = make(records)
    ld.set_epoch(1)
    a = [i for b in ld for i in ids_of(b)]
    ld.set_epoch(2)
    b = [i for bt in ld for i in ids_of(bt)]
    ld.set_epoch(1)
    c = [i for bt in ld for i in ids_of(bt)]
    assert a == c and a != b


def test_slot_returns_when_the_last_tensor_dies(records):
    # depth 1 + 1 worker: 2 slots, and no budget to grow by. Holding a tensor of each keeps both
    # out of the ring.
    ld = make(records, workers=1, prefetch=1, hold_budget=0)
    it = iter(ld)
    first = torch.from_dlpack(next(it)["data"])
    second = next(it)["label"]
    with pytest.raises(sluice.UsageError, match="keeps 2 batches"):
        next(it)
    # The held batch is intact after the refusal: each row is its record's index, repeated.
    rows = first.numpy().view("<u4")
    assert (rows == rows[:, :1]).all() and len(set(rows[:, 0].tolist())) == rows.shape[0]
    del first, second, rows
    gc.collect()
    b = next(it)                                          # a slot came back
    assert b["data"].shape[0] == 64


def test_same_batches_as_the_cxx_pipeline(records):
    exe = os.environ.get("SLUICE_PY_CXX_REFERENCE")
    if not exe:
        pytest.skip("SLUICE_PY_CXX_REFERENCE not set (run through ctest)")
    path, labels = records
    for workers in (1, 2):
        out = subprocess.run([exe, path, labels, str(RB), "64", "3", str(workers), "4"], check=True,
                             capture_output=True, text=True).stdout.split()
        ld = make(records, workers=workers)
        ld.set_epoch(4)
        mine = [fnv(np.from_dlpack(b["data"]), np.from_dlpack(b["label"])) for b in ld]
        assert [int(x) for x in out] == mine


def test_resume_from_state_dict(records):
    ld = make(records)
    ld.set_epoch(5)
    full = [ids_of(b) for b in ld]
    ld2 = make(records)
    ld2.set_epoch(5)
    it = iter(ld2)
    first = [ids_of(next(it)) for _ in range(3)]
    sd = ld2.state_dict()
    assert isinstance(sd["sluice_state"], bytes)
    ld3 = make(records)
    ld3.load_state_dict(sd)
    rest = [ids_of(b) for b in ld3]
    assert first + rest == full
    other = make(records, seed=4)                     # another pipeline refuses the state, at once
    with pytest.raises(sluice.UsageError, match="resume"):
        other.load_state_dict(sd)


def test_errors_are_typed_and_carry_the_cxx_text(records, tmp_path):
    with pytest.raises(TypeError):
        sluice.loader("records", pth="x")
    with pytest.raises(ValueError, match="sampler='spiral'"):
        make(records, sampler="spiral")
    with pytest.raises(ValueError, match="output"):
        make(records, output="float64")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\0" * (RB * 3 + 5))             # a truncated last record
    with pytest.raises(sluice.FormatError) as e:
        sluice.loader("records", path=str(bad), record_bytes=RB)
    assert str(bad) in str(e.value) and "record 3" in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, sluice.Error)
    with pytest.raises(sluice.IOError):
        sluice.loader("records", path=str(tmp_path / "missing.bin"), record_bytes=RB)


def test_stats_epoch_stats_and_advice_are_dicts(records):
    ld = make(records)
    for e in range(3):
        ld.set_epoch(e)
        for _ in ld:
            pass
    s = ld.stats()
    assert s["samples"] == 3 * N and s["batches"] == 3 * len(ld)
    e1 = ld.epoch_stats(1)
    assert e1["epoch"] == 1 and e1["complete"] and e1["samples"] == N
    assert {st["name"] for st in e1["stages"]} >= {"read", "collate"}
    assert e1["bottleneck"]["stage"] in {st["name"] for st in e1["stages"]}
    assert ld.epoch_stats(99) is None
    recs = ld.advise(validation_loss={0: 1.0, 1: 0.9, 2: 0.95})
    assert isinstance(recs, list)
    for r in recs:
        assert set(r) == {"rule", "severity", "message", "value"} and r["message"]



def test_an_epoch_taken_by_count_ends_with_its_last_batch_and_a_rerun_is_reported(records):
    # for _ in range(len(loader)): next(it), then validation: the epoch is complete with its last
    # batch and its time stops there. An epoch run again (load_state_dict back to its start) is
    # reported as its latest run, with its own step spread.
    import time
    ld = make(records, workers=1)
    start = ld.state_dict()
    it = iter(ld)
    for _ in range(len(ld)):
        next(it)
    first = ld.epoch_stats(0)
    assert first["complete"] and first["batches"] == len(ld) and first["steps"] == len(ld) - 1
    time.sleep(0.05)
    assert ld.epoch_stats(0)["wall_ns"] == first["wall_ns"]
    iter(ld)
    assert ld.epoch_stats(0)["wall_ns"] == first["wall_ns"]
    ld.load_state_dict(start)
    for _ in ld:
        time.sleep(0.003)
    again = ld.epoch_stats(0)
    assert again["consumer_busy_ns"] >= (len(ld) - 1) * 3_000_000 > first["consumer_busy_ns"]
    assert again["step_std_ns"] >= 0 and again["steps"] == len(ld) - 1



def test_prefetch_advice_names_the_depth_the_loader_runs_at(records):
    # A loader far faster than its trainer: R2 advises depth 1; given prefetch=16 it says "(now 16)"
    # as a suggestion, as C++'s advisor does when it knows the depth.
    import time
    for prefetch, level, now in ((16, "suggestion", "(now 16)"), (1, "info", None)):
        ld = sluice.Loader(sluice.records(records[0], record_bytes=RB), batch_size=100, workers=1,
                           prefetch=prefetch)
        for _ in ld:
            time.sleep(0.004)
        r2 = [r for r in ld.advise() if r["rule"].startswith("R2")]
        assert len(r2) == 1 and r2[0]["value"] == 1, ld.advise()
        assert r2[0]["severity"] == level and (now is None or now in r2[0]["message"]), r2


CHILD = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import sluice
ld = sluice.loader("records", path=sys.argv[2], labels=sys.argv[3], record_bytes=48, batch_size=50,
                   distributed=True, seed=9)
ids = [int(i) for b in ld for i in np.from_dlpack(b["data"]).view("<u4")[:, 0]]
print(" ".join(map(str, ids)))
"""


def module_dir():
    return os.path.dirname(sluice.__file__)


def test_two_ranks_split_the_data_disjointly(records):
    path, labels = records
    outs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2")
        env.pop("OMPI_COMM_WORLD_RANK", None)
        env.pop("OMPI_COMM_WORLD_SIZE", None)
        r = subprocess.run([sys.executable, "-c", CHILD, module_dir(), path, labels], env=env, check=True,
                           capture_output=True, text=True)
        outs.append([int(x) for x in r.stdout.split()])
    assert len(outs[0]) == len(outs[1]) == N // 2
    assert not set(outs[0]) & set(outs[1])
    assert sorted(outs[0] + outs[1]) == list(range(N))


KILLED = r"""
import sys
sys.path.insert(0, sys.argv[1])
import sluice
ld = sluice.loader("records", path=sys.argv[2], labels=sys.argv[3], record_bytes=48, batch_size=8, workers=2)
for i, b in enumerate(ld):
    if i == 2:
        print("running", flush=True)
        sys.stdin.read()        # wait here, mid-epoch, until killed
"""


def test_killed_mid_epoch_leaves_nothing_in_dev_shm(records):
    path, labels = records
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    p = subprocess.Popen([sys.executable, "-c", KILLED, module_dir(), path, labels], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "running"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    time.sleep(0.1)
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert after <= before


def test_idx_pipeline_float_output(tmp_path):
    # A tiny IDX pair written here: 10 images of 4x4, labels 0..9.
    imgs = tmp_path / "img.idx"
    labs = tmp_path / "lab.idx"
    imgs.write_bytes(struct.pack(">IIII", 0x803, 10, 4, 4) + bytes(range(160)))
    labs.write_bytes(struct.pack(">II", 0x801, 10) + bytes(range(10)))
    ld = sluice.loader("idx", images=str(imgs), labels=str(labs), batch_size=4, sampler="sequential",
                       output="float32", shape=[1, 4, 4], workers=1)
    xs = [torch.from_dlpack(b["data"]).clone() for b in ld]
    x = torch.cat(xs)
    assert x.shape == (10, 1, 4, 4) and x.dtype == torch.float32
    assert torch.allclose(x.flatten(), torch.arange(160, dtype=torch.float32) / 255)


def write_wds(path, first, count, missing_cls=None, img_ext="jpg", cls_ext="cls"):
    """A WebDataset shard of solid-colour JPEGs: sample g is grey level 10 * (g % 20), label g % 5."""
    import io
    import tarfile
    PIL = pytest.importorskip("PIL.Image")
    with tarfile.open(path, "w") as tar:
        for g in range(first, first + count):
            img = PIL.new("RGB", (40, 30), (10 * (g % 20),) * 3)
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=95)
            members = [(f"s/{g:06d}.{img_ext}", buf.getvalue())]
            if g != missing_cls:
                members.append((f"s/{g:06d}.{cls_ext}", str(g % 5).encode()))
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_webdataset_images_and_labels(tmp_path):
    write_wds(tmp_path / "train-0.tar", 0, 12)
    write_wds(tmp_path / "train-1.tar", 12, 12)
    ld = sluice.loader("wds", path=str(tmp_path / "train-{0..1}.tar"), batch_size=5, size=[16, 16], layout="chw",
                       output="float32", sampler="shuffle", seed=1, workers=2)
    assert len(ld) == 5
    greys, labels = [], []
    for b in ld:
        assert set(b) == {"image", "label"}
        x = torch.from_dlpack(b["image"])
        assert x.shape[1:] == (3, 16, 16) and x.dtype == torch.float32  # CHW
        greys += (x.mean(dim=(1, 2, 3)) * 255 / 10).round().long().tolist()
        labels += torch.from_dlpack(b["label"]).tolist()
    assert sorted(zip(greys, labels)) == sorted((g % 20, g % 5) for g in range(24))
    u8 = sluice.loader("wds", path=str(tmp_path / "train-0.tar"), batch_size=4, size=[8, 12], layout="hwc",
                       sampler="class_balanced", workers=1)
    b = next(iter(u8))
    assert b["image"].shape == (4, 8, 12, 3) and b["image"].dtype == "uint8"


def error_and_skipped(path):
    """What a sequential wds loader over `path` raises, and with errors="skip" (samples delivered, skipped)."""
    ld = sluice.loader("wds", path=str(path), batch_size=2, size=[8, 8], sampler="sequential")
    with pytest.raises(sluice.FormatError) as e:
        for _ in ld:
            pass
    skip = sluice.loader("wds", path=str(path), batch_size=2, size=[8, 8], sampler="sequential", errors="skip")
    delivered = sum(b["label"].shape[0] for b in skip)
    return str(e.value), delivered, skip.stats()["skipped"]


def test_webdataset_missing_member_names_shard_key_and_field(tmp_path):
    write_wds(tmp_path / "bad.tar", 0, 6, missing_cls=3)
    text, delivered, skipped = error_and_skipped(tmp_path / "bad.tar")
    assert "bad.tar" in text and "000003" in text and "cls" in text
    assert (delivered, skipped) == (5, 1)


def test_webdataset_members_apart_in_the_tar_name_the_fix(tmp_path):
    # `tar -cf shard.tar *.jpg *.cls` (or GNU tar over a directory, unsorted) puts a sample's
    # members apart; WebDataset groups only adjacent members. The error names the sample and the fix.
    import shutil
    import subprocess
    import tarfile
    if shutil.which("tar") is None:
        pytest.skip("no tar")
    write_wds(tmp_path / "sorted.tar", 0, 4)
    src = tmp_path / "files"
    src.mkdir()
    with tarfile.open(tmp_path / "sorted.tar") as t:
        t.extractall(src)
    names = [f"s/{g:06d}.jpg" for g in range(4)] + [f"s/{g:06d}.cls" for g in range(4)]
    subprocess.run(["tar", "-cf", str(tmp_path / "apart.tar"), "-C", str(src), *names], check=True)
    text, delivered, skipped = error_and_skipped(tmp_path / "apart.tar")
    assert "apart.tar" in text and "s/000000" in text and "has members apart in the tar" in text
    assert "tar --sort=name" in text
    assert (delivered, skipped) == (0, 8)        # every part of every sample, counted


def test_the_gil_is_released_while_waiting_for_a_batch(tmp_path):
    import threading
    write_wds(tmp_path / "big.tar", 0, 12)
    # 512 x 512 float32 CHW images from 40 x 30 JPEGs: the worker's resize and normalise take a
    # while per batch, during which the trainer's thread waits in next().
    ld = sluice.loader("wds", path=str(tmp_path / "big.tar"), batch_size=6, size=[512, 512], output="float32",
                       sampler="sequential", workers=1, prefetch=1)
    state = {"in_next": False, "during": 0, "stop": False}

    def count():
        while not state["stop"]:
            if state["in_next"]:
                state["during"] += 1

    t = threading.Thread(target=count)
    t.start()
    waited = 0.0
    try:
        for _ in range(3):
            it = iter(ld)
            while True:
                state["in_next"] = True
                t0 = time.perf_counter()
                try:
                    next(it)
                except StopIteration:
                    break
                finally:
                    waited += time.perf_counter() - t0
                    state["in_next"] = False
    finally:
        state["stop"] = True
        t.join()
    assert waited > 0.01
    # Another Python thread ran while next() waited: it could not if the GIL were held there.
    assert state["during"] > 1000


def test_token_windows_and_packed_documents(tmp_path):
    toks = (np.arange(10_001) % 50_000).astype("<u2")
    toks.tofile(tmp_path / "train.bin")
    ld = sluice.loader("tokens", path=str(tmp_path / "train.bin"), length=100, batch_size=8, sampler="shuffle",
                       seed=2, vocab=50_000)
    assert len(ld) == (10_000 // 100 + 7) // 8
    starts = []
    for b in ld:
        # uint16 tensors: numpy takes them; torch before 2.3 has no uint16 and refuses them.
        assert b["input"].dtype == "uint16" and b["input"].shape[1] == 100
        xi, yi = np.from_dlpack(b["input"]).astype(np.int64), np.from_dlpack(b["target"]).astype(np.int64)
        assert (yi[:, :-1] == xi[:, 1:]).all() and (yi[:, -1] == xi[:, -1] + 1).all()
        starts += xi[:, 0].tolist()
    assert sorted(starts) == list(range(0, 10_000, 100))

    docs = [list(range(1, 1 + k)) for k in (5, 12, 3, 40, 7)]
    flat = np.array([t for d in docs for t in d], dtype="<u4")
    off = np.cumsum([0] + [len(d) for d in docs]).astype("<u8")
    flat.tofile(tmp_path / "docs.bin")
    off.tofile(tmp_path / "docs.idx")
    packed = sluice.loader("documents", path=str(tmp_path / "docs.bin"), offsets=str(tmp_path / "docs.idx"),
                           dtype="uint32", collate="pack", length=16, batch_size=5, sampler="sequential")
    b = next(iter(packed))
    rows = np.from_dlpack(b["tokens"])
    assert rows.shape[1] == 16 and rows.dtype == np.uint32
    assert rows.flatten()[:67].tolist() == flat.tolist()   # 67 tokens, split across rows in order
    assert {"tokens.doc_ids", "tokens.position_ids", "tokens.cu_seqlens"} <= set(b)
    padded = sluice.loader("documents", path=str(tmp_path / "docs.bin"), offsets=str(tmp_path / "docs.idx"),
                           dtype="uint32", collate="pad", length=0, batch_size=5, sampler="sequential", pad_value=0)
    b = next(iter(padded))
    assert b["tokens"].shape == (5, 40)
    assert np.from_dlpack(b["tokens.lengths"]).tolist() == [5, 12, 3, 40, 7]
    with pytest.raises(ValueError, match="sampler"):
        sluice.loader("tokens", path=str(tmp_path / "train.bin"), length=100, sampler="class_balanced")
    bad = tmp_path / "odd.bin"
    bad.write_bytes(b"\1\0\2")                               # not a whole number of uint16 tokens
    with pytest.raises(sluice.FormatError, match="odd.bin"):
        sluice.loader("tokens", path=str(bad), length=1)


def test_weighted_sampler_follows_the_weights(records):
    w = np.zeros(N)
    w[:10] = 1.0
    w[10] = 9.0                                          # record 10 carries half the mass
    ld = make(records, sampler="weighted", sample_weights=w.tolist(), batch_size=100)
    ids = np.array([i for b in ld for i in ids_of(b)])
    assert len(ids) == N and set(ids.tolist()) <= set(range(11))
    assert 0.4 < np.mean(ids == 10) < 0.6
    with pytest.raises(ValueError, match="one weight per sample"):
        make(records, sampler="weighted", sample_weights=[1.0, 2.0])


def test_npy_rows_and_labels(tmp_path):
    x = np.arange(10 * 2 * 3, dtype=np.float32).reshape(10, 2, 3)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(10, dtype=np.int64) % 3)
    ld = sluice.loader("npy", path=str(tmp_path / "x.npy"), labels=str(tmp_path / "y.npy"), batch_size=4,
                       sampler="sequential", workers=1)
    rows = np.concatenate([np.from_dlpack(b["data"]).copy() for b in ld])
    assert rows.dtype == np.float32 and rows.shape == (10, 2, 3)   # the array's dtype and shape
    assert (rows == x).all()                                 # each row, in order
    labels = np.concatenate([np.from_dlpack(b["label"]).copy() for b in ld])
    assert labels.tolist() == [i % 3 for i in range(10)]


def _read_all(src, batch_size=4):
    """Every batch of src in order, each key's batches concatenated (numpy copies)."""
    out = {}
    with sluice.Loader(src, batch_size=batch_size, sampler=sluice.sample.sequential(), workers=1) as ld:
        for b in ld:
            for k, v in b.items():
                out.setdefault(k, []).append(np.from_dlpack(v).copy())
    return {k: np.concatenate(v) for k, v in out.items()}


def _same_rows(got, a):
    """got holds exactly a's values, dtype and shape (bool arrives as uint8 where DLPack is older than 0.8)."""
    want = np.uint8 if a.dtype == bool and got.dtype == np.uint8 else a.dtype
    return got.dtype == want and got.shape == a.shape and got.tobytes() == a.astype(want).tobytes()


def test_npy_one_dimensional_array_gives_one_element_samples(tmp_path):
    # A sample is row i with the array's shape: a (N,) array's rows are single elements, (B,) a batch.
    for a in (np.arange(10, dtype=np.int64) * -3, np.linspace(0, 1, 10, dtype=np.float32), np.arange(10, dtype=np.uint8),
              np.arange(10) % 3 == 0):
        np.save(tmp_path / "y.npy", a)
        got = _read_all(sluice.npy(tmp_path / "y.npy"))["data"]
        assert _same_rows(got, a), (a.dtype, got.dtype, got.shape)
        fields = _read_all(sluice.npy(tmp_path, fields={"y": sluice.field("y.npy")}))["y"]
        assert fields.shape == got.shape and (fields == got).all()      # the fields= form agrees
    np.save(tmp_path / "u.npy", np.arange(10, dtype=np.uint8) * 20)
    scaled = _read_all(sluice.npy(tmp_path / "u.npy", output="float32"))["data"]
    assert scaled.dtype == np.float32 and scaled.shape == (10,)
    assert np.allclose(scaled, np.arange(10) * 20 / 255.0)
    np.save(tmp_path / "l.npy", np.arange(10, dtype=np.int64) % 4)
    both = _read_all(sluice.npy(tmp_path / "u.npy", labels=tmp_path / "l.npy"))
    assert both["data"].shape == (10,) and both["label"].tolist() == [i % 4 for i in range(10)]
    shaped = _read_all(sluice.npy(tmp_path / "u.npy", shape=(1,)))["data"]      # shape= still says otherwise
    assert shaped.shape == (10, 1)


def test_npy_rows_of_no_elements_refused_naming_the_file(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((10, 0), np.float32))
    for src in (lambda: sluice.npy(tmp_path / "x.npy"), lambda: sluice.npy(tmp_path, fields={"x": sluice.field("x.npy")})):
        with pytest.raises(sluice.FormatError) as e:
            next(iter(sluice.Loader(src(), batch_size=4, workers=0)))
        msg = str(e.value)
        assert str(tmp_path / "x.npy") in msg and "shape (10, 0)" in msg and "hold no elements" in msg
        assert "collate" not in msg                                     # refused at open, not at the first batch


def _pack(*args):
    pack = os.environ.get("SLUICE_PACK", "")
    if not pack or not os.path.exists(pack):
        pytest.skip("sluice-pack was not built (SLUICE_PACK)")
    return subprocess.run([pack, *map(str, args), "-q"], capture_output=True, text=True)


def test_sluice_pack_npy_round_trip_keeps_every_value_dtype_and_row_shape(tmp_path):
    rng = np.random.default_rng(5)
    n = 11
    made = {"float32": lambda s: rng.standard_normal(s).astype(np.float32),
            "float16": lambda s: rng.standard_normal(s).astype(np.float16),
            "int64": lambda s: rng.integers(-2**62, 2**62, s, dtype=np.int64),
            "bool": lambda s: rng.integers(0, 2, s).astype(bool),
            "uint8": lambda s: rng.integers(0, 256, s, dtype=np.uint8)}
    for dtype, make in made.items():
        for row in ((), (3,), (2, 3)):
            a = make((n, *row))
            x, out = tmp_path / f"{dtype}{len(row)}.npy", tmp_path / f"{dtype}{len(row)}.sluice"
            np.save(x, a)
            r = _pack("npy", x, "-o", out)
            assert r.returncode == 0, r.stderr
            if dtype == "uint8" and row:
                # A uint8 array's rows are single records of bytes, as sluice-pack always packed them
                # (pixels for output="float32"): flat, shape= gives the row shape back.
                got = _read_all(sluice.shard(out))["data"]
                assert got.dtype == np.uint8 and got.shape == (n, int(np.prod(row)))
                got = _read_all(sluice.shard(out, shape=row))["data"]
            else:
                got = _read_all(sluice.shard(out))["data"]
            assert _same_rows(got, a), (dtype, row, got.dtype, got.shape)  # value for value, bit for bit
    # --labels: the labels come back beside the rows, and class_balanced draws from them.
    a = rng.standard_normal((12, 3)).astype(np.float32)
    y = (np.arange(12) % 3).astype(np.int64)
    np.save(tmp_path / "f.npy", a)
    np.save(tmp_path / "y.npy", y)
    assert _pack("npy", tmp_path / "f.npy", "--labels", tmp_path / "y.npy", "-o", tmp_path / "f.sluice").returncode == 0
    got = _read_all(sluice.shard(tmp_path / "f.sluice"))
    assert set(got) == {"data", "label"} and (got["data"] == a).all() and got["label"].tolist() == y.tolist()
    with sluice.Loader(sluice.shard(tmp_path / "f.sluice"), batch_size=6, sampler=sluice.sample.class_balanced(),
                       workers=0) as ld:
        assert sum(np.from_dlpack(b["label"]).shape[0] for b in ld) == 12
    # output= never reads a field's bytes as other values: its own dtype is accepted, a conversion refused.
    same = _read_all(sluice.shard(tmp_path / "f.sluice", output="float32"))["data"]
    assert same.dtype == np.float32 and (same == a).all()
    with pytest.raises(sluice.UsageError) as e:
        sluice.Loader(sluice.shard(tmp_path / "int641.sluice", output="float32"), batch_size=4)
    assert "int641.sluice" in str(e.value) and "output='float32' for field 'data' of dtype int64" in str(e.value)
    with pytest.raises(sluice.UsageError, match="shape= is for a shard of single records"):
        sluice.Loader(sluice.shard(tmp_path / "f.sluice", shape=(3, 1)), batch_size=4)
    # A uint8 array packed as before: output="float32" scales its bytes as pixels.
    px = _read_all(sluice.shard(tmp_path / "uint81.sluice", output="float32"))["data"]
    assert px.dtype == np.float32 and np.allclose(px * 255, np.load(tmp_path / "uint81.npy").astype(np.float32), atol=1e-3)


def test_sluice_pack_npy_refuses_what_it_cannot_pack_naming_the_file(tmp_path):
    np.save(tmp_path / "c.npy", np.zeros((3, 2), np.complex64))
    r = _pack("npy", tmp_path / "c.npy", "-o", tmp_path / "c.sluice")
    assert r.returncode == 1 and "c.npy" in r.stderr and "'<c8'" in r.stderr and not (tmp_path / "c.sluice").exists()
    np.save(tmp_path / "z.npy", np.zeros((10, 0), np.float32))
    r = _pack("npy", tmp_path / "z.npy", "-o", tmp_path / "z.sluice")
    assert r.returncode == 1 and "z.npy" in r.stderr and "shape (10, 0)" in r.stderr


def _crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(data):
    c = _crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, payload):                                   # a length-delimited protobuf field
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _example(image, label, image_key=b"image/encoded", label_key=b"image/class/label"):
    feature_img = _field(1, _field(1, image))               # Feature.bytes_list{value}
    feature_lbl = _field(3, _field(1, _varint(label)))      # Feature.int64_list{packed value}
    entries = _field(1, _field(1, image_key) + _field(2, feature_img)) + \
        _field(1, _field(1, label_key) + _field(2, feature_lbl))
    return _field(1, entries)                               # Example.features


def test_tfrecord_examples_imagenet_convention(tmp_path):
    import io
    PIL = pytest.importorskip("PIL.Image")
    path = tmp_path / "train.tfrecord"
    with open(path, "wb") as f:
        for g in range(10):
            buf = io.BytesIO()
            PIL.new("RGB", (20, 10), (20 * g,) * 3).save(buf, format="PNG" if g % 2 else "JPEG", quality=95)
            rec = _example(buf.getvalue(), g % 4)
            hdr = struct.pack("<Q", len(rec))
            f.write(hdr + struct.pack("<I", _masked(hdr)) + rec + struct.pack("<I", _masked(rec)))
    ld = sluice.loader("tfrecord", path=str(path), batch_size=5, size=[8, 8], layout="chw", output="float32",
                       sampler="sequential", workers=1)
    got = []
    for b in ld:
        x = torch.from_dlpack(b["image"])
        assert x.shape[1:] == (3, 8, 8)
        got += list(zip((x.mean(dim=(1, 2, 3)) * 255 / 20).round().long().tolist(),
                        torch.from_dlpack(b["label"]).tolist()))
    assert got == [(g, g % 4) for g in range(10)]
    cb = sluice.loader("tfrecord", path=str(path), batch_size=5, size=[8, 8], sampler="class_balanced", workers=1)
    assert sum(b["label"].shape[0] for b in cb) == 10


def test_tfrecord_several_encoded_images_in_one_feature_are_refused(tmp_path):
    # TF's BytesList(value=[jpeg_a, jpeg_b]): decoding their bytes joined would give the first
    # image and drop the second without a word.
    import io
    PIL = pytest.importorskip("PIL.Image")
    path = tmp_path / "two.tfrecord"
    jpegs = []
    for g in (10, 200):
        buf = io.BytesIO()
        PIL.new("RGB", (8, 8), (g,) * 3).save(buf, format="JPEG")
        jpegs.append(buf.getvalue())
    with open(path, "wb") as f:
        for images in ([jpegs[0]], jpegs):
            feature_img = _field(1, b"".join(_field(1, j) for j in images))   # bytes_list{value, value}
            feature_lbl = _field(3, _field(1, _varint(1)))
            rec = _field(1, _field(1, _field(1, b"image/encoded") + _field(2, feature_img)) +
                         _field(1, _field(1, b"image/class/label") + _field(2, feature_lbl)))
            hdr = struct.pack("<Q", len(rec))
            f.write(hdr + struct.pack("<I", _masked(hdr)) + rec + struct.pack("<I", _masked(rec)))
    src = sluice.tfrecord(str(path), decode=sluice.image(size=(8, 8)))
    with pytest.raises(sluice.FormatError, match=r"record 1.*feature 'image/encoded': a bytes_list of 2 values; "
                                                 r"a byte field reads one"):
        for _ in sluice.Loader(src, batch_size=2, workers=1, sampler=sluice.sample.sequential()):
            pass


def test_two_python_threads_share_one_loader(records):
    import threading
    ld = make(records, batch_size=16, prefetch=4)    # 6 slots: each thread holds at most one batch
    it = iter(ld)
    seen, errors = [], []

    def pull():
        try:
            while True:
                try:
                    b = next(it)
                except StopIteration:
                    return
                seen.extend(ids_of(b))
                del b                               # not held while waiting for the next one
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=pull) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(seen) == list(range(N))      # every record once, whichever thread took it


def epoch_ids(ld, epochs=3):
    out = []
    for e in range(epochs):
        ld.set_epoch(e)
        out.append([ids_of(b) for b in ld])
    return out


def test_adaptive_depth_and_worker_tuning_keep_the_batches(records):
    want = epoch_ids(make(records, workers=1))
    ld = make(records, workers=1, depth="adaptive", max_workers=3, ram_budget=1 << 20)
    assert epoch_ids(ld) == want
    s = ld.stats()
    assert s["capacity"] == 16 + 3                    # max depth + max workers
    assert 1 <= s["workers"] <= 3 and 1 <= s["depth"] <= 16
    with pytest.raises(ValueError, match="depth='deep' is not accepted"):
        make(records, depth="deep")
    with pytest.raises(ValueError, match="max_workers=1 is below workers=2"):
        make(records, workers=2, max_workers=1)
    with pytest.raises(sluice.UsageError, match="prefetch=0 is not accepted"):
        make(records, prefetch=0)


def test_mds_dataset_written_by_streaming(tmp_path):
    # tests/data/mds/plain: written by MosaicML Streaming's MDSWriter (make_fixtures.py there):
    # image i is a JPEG whose red channel is i * 20, label i * 7 % 10.
    plain = os.path.join(os.environ.get("SLUICE_TEST_DATA_DIR", ""), "mds", "plain")
    if not os.path.isdir(plain):
        pytest.skip("SLUICE_TEST_DATA_DIR/mds/plain not found")
    ld = sluice.loader("mds", path=plain, batch_size=5, size=[6, 8], layout="hwc", sampler="sequential", workers=2)
    assert len(ld) == 2
    ids = 0
    for b in ld:
        img = np.from_dlpack(b["image"])
        assert img.shape == (5, 6, 8, 3)
        labels = np.from_dlpack(b["label"]).tolist()
        for k in range(5):
            i = ids + k
            assert labels[k] == i * 7 % 10
            assert abs(int(img[k, 3, 4, 0]) - i * 20) <= 12
        ids += 5
    # Columns chosen at run time; a column that is not there names what is.
    with pytest.raises(sluice.FormatError) as e:
        sluice.loader("mds", path=plain, image_field="picture", size=[6, 8])
    assert "no column of that name" in str(e.value) and "picture" in str(e.value)
    with pytest.raises(sluice.FormatError) as e:
        sluice.loader("mds", path=plain, label_field="name", size=[6, 8])  # a str column for an int64 label
    assert "'str'" in str(e.value)
    balanced = sluice.loader("mds", path=plain, batch_size=4, size=[6, 8], sampler="class_balanced", seed=2)
    got = [label for b in balanced for label in np.from_dlpack(b["label"]).tolist()]
    assert len(got) == 10 and set(got) <= set(range(10))  # drawn by class weight, with replacement


def _write_tfrecord(path, count, **keys):
    """Examples of solid-colour images (grey 20 * g; PNG for odd g), label g % 4."""
    import io
    PIL = pytest.importorskip("PIL.Image")
    with open(path, "wb") as f:
        for g in range(count):
            buf = io.BytesIO()
            PIL.new("RGB", (20, 10), (20 * g,) * 3).save(buf, format="PNG" if g % 2 else "JPEG", quality=95)
            rec = _example(buf.getvalue(), g % 4, **keys)
            hdr = struct.pack("<Q", len(rec))
            f.write(hdr + struct.pack("<I", _masked(hdr)) + rec + struct.pack("<I", _masked(rec)))


def _greys_and_labels(ld, step):
    got = []
    for b in ld:
        x = np.from_dlpack(b["image"]).astype(np.float64)
        got += list(zip(np.round(x.mean(axis=(1, 2, 3)) / step).astype(int).tolist(), np.from_dlpack(b["label"]).tolist()))
    return got


def test_image_and_label_fields_named_at_run_time(tmp_path):
    # WebDataset members of other extensions than the convention's.
    write_wds(tmp_path / "odd.tar", 0, 10, img_ext="picture", cls_ext="target")
    ld = sluice.loader("wds", path=str(tmp_path / "odd.tar"), image_field="picture", label_field="target",
                       batch_size=5, size=[8, 8], sampler="sequential", workers=1)
    assert _greys_and_labels(ld, 10) == [(g % 20, g % 5) for g in range(10)]
    with pytest.raises(sluice.FormatError) as e:                   # the convention's names are not there
        next(iter(sluice.loader("wds", path=str(tmp_path / "odd.tar"), batch_size=5, size=[8, 8], sampler="sequential")))
    assert "odd.tar" in str(e.value) and "000000.jpg" in str(e.value)

    # tf.train.Example features of other names than ImageNet's.
    _write_tfrecord(tmp_path / "k.tfrecord", 8, image_key=b"jpeg", label_key=b"class")
    ld = sluice.loader("tfrecord", path=str(tmp_path / "k.tfrecord"), image_field="jpeg", label_field="class",
                       batch_size=4, size=[8, 8], sampler="sequential", workers=1)
    assert _greys_and_labels(ld, 20) == [(g, g % 4) for g in range(8)]
    cb = sluice.loader("tfrecord", path=str(tmp_path / "k.tfrecord"), image_field="jpeg", label_field="class",
                       batch_size=4, size=[8, 8], sampler="class_balanced", workers=1)
    assert sum(b["label"].shape[0] for b in cb) == 8
    with pytest.raises(sluice.FormatError) as e:
        next(iter(sluice.loader("tfrecord", path=str(tmp_path / "k.tfrecord"), size=[8, 8])))  # no image/encoded
    assert "k.tfrecord" in str(e.value) and "record " in str(e.value) and "image/encoded" in str(e.value)


def test_shard_with_fields_from_sluice_pack(tmp_path):
    pack = os.environ.get("SLUICE_PACK", "")
    if not pack or not os.path.exists(pack):
        pytest.skip("sluice-pack was not built (SLUICE_PACK)")
    # wds --fields jpg: the image a field, the label the shard's own (from .cls).
    write_wds(tmp_path / "w.tar", 0, 12)
    subprocess.run([pack, "wds", str(tmp_path / "w.tar"), "--fields", "jpg", "-o", str(tmp_path / "w.sluice"), "--quiet"],
                   check=True)
    ld = sluice.loader("shard", path=str(tmp_path / "w.sluice"), size=[8, 8], batch_size=5,
                       sampler="sequential", workers=2)
    assert _greys_and_labels(ld, 10) == [(g % 20, g % 5) for g in range(12)]
    with pytest.raises(sluice.UsageError) as e:              # without decode=: never the records' bytes as uint8
        sluice.loader("shard", path=str(tmp_path / "w.sluice"), batch_size=4)
    assert "w.sluice is a shard with fields (jpg (u8 variable [n]))" in str(e.value)
    assert "field 'jpg' is variable" in str(e.value)
    # tfrecord --features: the label a field of its own, named with label_field=.
    _write_tfrecord(tmp_path / "t.tfrecord", 8)
    subprocess.run([pack, "tfrecord", str(tmp_path / "t.tfrecord"), "--features",
                    "image/encoded:bytes,image/class/label:int64:1", "-o", str(tmp_path / "t.sluice"), "--quiet"],
                   check=True)
    ld = sluice.loader("shard", path=str(tmp_path / "t.sluice"), size=[8, 8], batch_size=4,
                       image_field="image/encoded", label_field="image/class/label", sampler="sequential", workers=1)
    assert _greys_and_labels(ld, 20) == [(g, g % 4) for g in range(8)]
    with pytest.raises(sluice.FormatError) as e:                   # no field "jpg" in this shard: its fields named
        sluice.loader("shard", path=str(tmp_path / "t.sluice"), size=[8, 8])
    assert "t.sluice" in str(e.value) and "image/encoded" in str(e.value)
    # Packed without labels: every record's label is -1, refused unless label_field= names them.
    write_wds(tmp_path / "nolabel.tar", 0, 4, missing_cls=-1, cls_ext="other")
    subprocess.run([pack, "wds", str(tmp_path / "nolabel.tar"), "--fields", "jpg", "--label", "", "-o",
                    str(tmp_path / "n.sluice"), "--quiet"], check=True)
    with pytest.raises(ValueError, match="holds no labels"):
        sluice.loader("shard", path=str(tmp_path / "n.sluice"), size=[8, 8])
    # A shard of single records takes no field names.
    subprocess.run([pack, "wds", str(tmp_path / "w.tar"), "-o", str(tmp_path / "r.sluice"), "--quiet"], check=True)
    with pytest.raises(ValueError, match="shard of single records"):
        sluice.loader("shard", path=str(tmp_path / "r.sluice"), size=[8, 8], image_field="jpg")
    with pytest.raises(sluice.UsageError, match="label_field= name the fields an image decode reads"):
        sluice.loader("shard", path=str(tmp_path / "r.sluice"), label_field="cls")       # records as stored
    with pytest.raises(TypeError, match="'image_field' applies to"):
        sluice.loader("tokens", path=str(tmp_path / "r.sluice"), length=4, image_field="x")


def test_token_ids_widened_to_int64_for_torch(tmp_path):
    toks = (np.arange(5_001) * 13 % 65_536).astype("<u2")    # up to 65535: stays positive once widened
    toks.tofile(tmp_path / "t.bin")
    kw = dict(path=str(tmp_path / "t.bin"), length=50, batch_size=8, sampler="shuffle", seed=3, workers=2)
    stored, wide = sluice.loader("tokens", **kw), sluice.loader("tokens", output="int64", **kw)
    n = 0
    for a, b in zip(stored, wide):
        assert b["input"].dtype == "int64" and b["target"].dtype == "int64"
        x = torch.from_dlpack(b["input"])                        # torch takes int64 (it has no uint16 before 2.3)
        assert x.dtype == torch.int64 and x.data_ptr() == b["input"].data_ptr
        assert (x.numpy() == np.from_dlpack(a["input"]).astype(np.int64)).all()
        assert (torch.from_dlpack(b["target"]).numpy() == np.from_dlpack(a["target"]).astype(np.int64)).all()
        emb = torch.nn.Embedding(65_536, 4)(x)                   # what a language model does with them
        assert emb.shape == (x.shape[0], 50, 4)
        n += 1
    assert n == len(wide)
    docs = [list(range(60_000, 60_000 + k)) for k in (5, 12, 3, 40, 7)]
    flat = np.array([t for d in docs for t in d], dtype="<u2")
    flat.tofile(tmp_path / "d.bin")
    np.cumsum([0] + [len(d) for d in docs]).astype("<u8").tofile(tmp_path / "d.idx")
    for collate in ("pack", "pad"):
        ld = sluice.loader("documents", path=str(tmp_path / "d.bin"), offsets=str(tmp_path / "d.idx"), collate=collate,
                           length=16 if collate == "pack" else 0, batch_size=5, sampler="sequential", output="int64")
        t = torch.from_dlpack(next(iter(ld))["tokens"])
        assert t.dtype == torch.int64
        if collate == "pack":
            assert t.flatten()[:67].tolist() == flat.astype(np.int64).tolist()
        else:
            assert t[3].tolist() == docs[3]
    with pytest.raises(ValueError, match="output='int32'"):
        sluice.loader("tokens", path=str(tmp_path / "t.bin"), length=50, output="int32")


def test_documents_as_fixed_rows_every_token_once_static_shapes_resumable(tmp_path):
    rng = np.random.default_rng(4)
    docs = [(np.arange(n) + 1000 * d + 1).astype("<u2") for d, n in enumerate(rng.integers(0, 90, 60))]
    np.concatenate(docs).tofile(tmp_path / "d.bin")
    np.cumsum([0] + [len(x) for x in docs]).astype("<u8").tofile(tmp_path / "d.idx")
    src = sluice.documents(tmp_path / "d.bin", offsets=tmp_path / "d.idx", collate="rows", length=32)
    total = sum(len(x) for x in docs)

    def epoch(loader):
        out = []
        for b in loader:
            t, d, p = (np.from_dlpack(b[k]) for k in ("tokens", "doc_ids", "position_ids"))
            assert t.shape == d.shape == p.shape and t.shape[1] == 32
            out.append((t.copy(), d.copy(), p.copy()))
        return out

    with sluice.Loader(src, batch_size=4, sampler=sluice.sample.shuffle(seed=3), workers=2) as ld:
        e0 = epoch(ld)
        assert all(t.shape[0] == 4 for t, _, _ in e0[:-1])       # a fixed token budget a step
        t = np.concatenate([x[0] for x in e0]).ravel()
        d = np.concatenate([x[1] for x in e0]).ravel()
        p = np.concatenate([x[2] for x in e0]).ravel()
        assert t.size == -(-total // 32) * 32
        real = d >= 0
        assert real.sum() == total and (t[~real] == 0).all()
        # Every token is its document's token at its position, each (document, position) once.
        assert all(t[k] == docs[d[k]][p[k]] for k in np.flatnonzero(real))
        assert len(set(zip(d[real].tolist(), p[real].tolist()))) == total
        e1 = epoch(ld)                                            # the next epoch: another order
        assert not np.array_equal(np.concatenate([x[1] for x in e1]).ravel(), d)
        # Resume mid-epoch in a new loader: the rest of epoch 1 exactly.
        ld.set_epoch(1)
        it = iter(ld)
        first = [next(it) for _ in range(2)]
        state = ld.state_dict()
        del first, it
    with sluice.Loader(src, batch_size=4, sampler=sluice.sample.shuffle(seed=3), workers=1) as again:
        again.load_state_dict(state)
        again.set_epoch(1)
        rest = epoch(again)
    assert len(rest) == len(e1) - 2
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(rest, e1[2:]))


def test_documents_as_rows_cu_seqlens_per_row_and_joined_for_varlen_attention(tmp_path):
    rng = np.random.default_rng(11)
    docs = [(np.arange(n) + 1000 * d + 1).astype("<u2") for d, n in enumerate(rng.integers(0, 30, 80))]
    np.concatenate(docs).tofile(tmp_path / "d.bin")
    np.cumsum([0] + [len(x) for x in docs]).astype("<u8").tofile(tmp_path / "d.idx")
    for split in (True, False):
        src = sluice.documents(tmp_path / "d.bin", offsets=tmp_path / "d.idx", collate="rows", length=32, split=split)
        with sluice.Loader(src, batch_size=3, sampler=sluice.sample.shuffle(seed=5), workers=2) as ld:
            segments = rows = 0
            for b in ld:
                d, p, c = (np.from_dlpack(b[k]) for k in ("doc_ids", "position_ids", "cu_seqlens"))
                rows += d.shape[0]
                assert c.dtype == np.int32 and c.shape == (d.shape[0], 33)
                # A segment starts at each row's start, where the document changes, and where one starts.
                fd, fp = d.ravel(), p.ravel()
                k = np.arange(1, fd.size)
                starts = k[(k % 32 == 0) | (fd[1:] != fd[:-1]) | ((fd[1:] >= 0) & (fp[1:] == 0))]
                want = np.concatenate([[0], starts, [fd.size]]).astype(np.int32)
                cu, longest = sluice.cu_seqlens(b["cu_seqlens"])
                assert isinstance(cu, np.ndarray) and cu.dtype == np.int32
                assert cu.tolist() == want.tolist()
                assert longest == int(np.diff(want).max())
                # Per row: the row's own boundaries, then 32 repeated.
                for r in range(d.shape[0]):
                    own = [x - 32 * r for x in want.tolist() if 32 * r <= x <= 32 * (r + 1)]
                    assert c[r].tolist() == own + [32] * (33 - len(own))
                # The same from a torch tensor, as a torch tensor.
                tcu, tlong = sluice.cu_seqlens(torch.from_dlpack(b["cu_seqlens"]))
                assert isinstance(tcu, torch.Tensor) and tcu.dtype == torch.int32
                assert tcu.tolist() == want.tolist() and tlong == longest
                segments += want.size - 1
            assert segments > rows  # rows of several segments: the checks above have teeth
    # The picture of the docstring; and what is not rows of length + 1 int32.
    cu, longest = sluice.cu_seqlens(np.array([[0, 5, 8, 8, 8, 8, 8, 8, 8], [0, 3, 6, 8, 8, 8, 8, 8, 8]], dtype=np.int32))
    assert cu.tolist() == [0, 5, 8, 11, 14, 16] and longest == 5
    with pytest.raises(sluice.UsageError, match="int32"):
        sluice.cu_seqlens(np.zeros((2, 9), dtype=np.int64))
    with pytest.raises(sluice.UsageError, match="shape"):
        sluice.cu_seqlens(np.zeros(9, dtype=np.int32))


def test_documents_as_whole_rows_best_fit_pads_less_and_keeps_every_document_once(tmp_path):
    rng = np.random.default_rng(8)
    docs = [(np.arange(n) + 1000 * d + 1).astype("<u2") for d, n in enumerate(rng.integers(1, 30, 200))]
    np.concatenate(docs).tofile(tmp_path / "d.bin")
    np.cumsum([0] + [len(x) for x in docs]).astype("<u8").tofile(tmp_path / "d.idx")

    def rows(**kw):
        src = sluice.documents(tmp_path / "d.bin", offsets=tmp_path / "d.idx", collate="rows", length=32, **kw)
        with sluice.Loader(src, batch_size=8, sampler=sluice.sample.shuffle(seed=5), workers=2) as ld:
            out = [tuple(np.from_dlpack(b[k]).copy() for k in ("tokens", "doc_ids", "position_ids")) for b in ld]
        t, d, p = (np.concatenate([x[i] for x in out]) for i in range(3))
        for r in range(t.shape[0]):          # whole documents: each starts in the row that holds it
            real = d[r] >= 0
            assert all(t[r, k] == docs[d[r, k]][p[r, k]] for k in np.flatnonzero(real))
            assert (p[r][real] <= np.flatnonzero(real)).all()
        starts = [(int(d[r, k])) for r in range(t.shape[0]) for k in range(32) if d[r, k] >= 0 and p[r, k] == 0]
        assert sorted(starts) == list(range(len(docs)))   # every document once
        return (d < 0).sum()

    next_fit, best_fit = rows(split=False), rows(split=False, bins=8)
    assert best_fit < next_fit
    with pytest.raises(sluice.UsageError, match="give split=False"):
        sluice.documents(tmp_path / "d.bin", offsets=tmp_path / "d.idx", collate="rows", bins=4)
    with pytest.raises(sluice.UsageError, match="takes neither"):
        sluice.documents(tmp_path / "d.bin", offsets=tmp_path / "d.idx", collate="pack", split=False)
