"""Any fields from Python: sluice.wds(path, fields={name: sluice.field(...)}) composes a pipeline at
run time (members, dtype from the files, image decode, a collator per field) and gives exactly
what the files hold; what does not fit is a UsageError at construction naming the field."""
import io
import os
import subprocess
import tarfile

import numpy as np
import pytest

import sluice

Image = pytest.importorskip("PIL.Image")


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def npy(a):
    out = io.BytesIO()
    np.save(out, a)
    return out.getvalue()


def jpeg(level):
    out = io.BytesIO()
    Image.fromarray(np.full((24, 32, 3), level, np.uint8)).save(out, format="JPEG", quality=95)
    return out.getvalue()


def emb(k):
    return np.arange(6, dtype=np.float32).reshape(2, 3) + k


def tokens(k):
    return np.arange(k % 5 + 1, dtype=np.int32) + 100 * k


def write_shards(tmp_path, counts):
    k = 0
    for s, n in enumerate(counts):
        with tarfile.open(tmp_path / f"part-{s}.tar", "w") as tar:
            for _ in range(n):
                key = f"s{k:05d}"
                add(tar, key + ".jpg", jpeg(20 + 9 * k))
                add(tar, key + ".cls", str(3 * k - 7).encode())
                add(tar, key + ".txt", ("caption " * (k % 3 + 1)).strip().encode())
                add(tar, key + ".emb.npy", npy(emb(k)))
                add(tar, key + ".tok.npy", npy(tokens(k)))
                k += 1
    return k


def fields(**over):
    f = {
        "image": sluice.field("jpg;png", decode=sluice.image((16, 16), layout="chw"),
                              collate=sluice.normalized(mean=0.5, std=0.25)),
        "label": sluice.field("cls", dtype="int64"),
        "caption": sluice.field("txt", collate=sluice.ragged()),
        "emb": sluice.field("emb.npy", collate=sluice.stack(shape=(2, 3))),
        "tokens": sluice.field("tok.npy", collate=sluice.pad(value=-1, mask=True)),
    }
    f.update(over)
    return f


def test_every_field_arrives_as_the_files_hold_it(tmp_path):
    n = write_shards(tmp_path, [7, 6])
    src = sluice.wds(str(tmp_path / "part-{0..1}.tar"), fields=fields())

    def run(workers):
        got = {}
        with sluice.Loader(src, batch_size=4, sampler=sluice.sample.shuffle(seed=3), workers=workers) as ld:
            for b in ld:
                assert set(b) == {"image", "label", "caption", "caption.offsets", "emb", "tokens", "tokens.lengths",
                                  "tokens.mask"}
                img, lab = np.from_dlpack(b["image"]), np.from_dlpack(b["label"])
                cap, off = np.from_dlpack(b["caption"]), np.from_dlpack(b["caption.offsets"])
                e, t = np.from_dlpack(b["emb"]), np.from_dlpack(b["tokens"])
                lens, mask = np.from_dlpack(b["tokens.lengths"]), np.from_dlpack(b["tokens.mask"])
                assert img.dtype == np.float32 and img.shape[1:] == (3, 16, 16)
                assert lab.dtype == np.int64 and e.dtype == np.float32 and e.shape[1:] == (2, 3)
                assert t.dtype == np.int32
                assert mask.dtype in (np.bool_, np.uint8)   # uint8 where the DLPack header predates kDLBool (0.8)
                for i in range(len(lab)):
                    k = (int(lab[i]) + 7) // 3
                    level = (20 + 9 * k) / 255
                    assert abs(float(img[i].mean()) - (level - 0.5) / 0.25) < 0.05   # a flat JPEG survives
                    assert bytes(cap[off[i]:off[i + 1]]).decode() == ("caption " * (k % 3 + 1)).strip()
                    np.testing.assert_array_equal(e[i], emb(k))
                    want = tokens(k)
                    assert lens[i] == len(want)
                    np.testing.assert_array_equal(t[i, :len(want)], want)
                    assert (t[i, len(want):] == -1).all() and mask[i].sum() == len(want)
                    got[k] = img[i].copy()
        return got

    one = run(1)
    assert sorted(one) == list(range(n))
    two = run(2)
    assert all(np.array_equal(one[k], two[k]) for k in one)


def test_pack_and_dtypes_from_the_files(tmp_path):
    write_shards(tmp_path, [9])
    src = sluice.wds(tmp_path / "part-0.tar", fields={"tokens": sluice.field("tok.npy", collate=sluice.pack(length=8))})
    seen = []
    with sluice.Loader(src, batch_size=3, sampler=sluice.sample.sequential(), workers=1) as ld:
        for b in ld:
            assert set(b) == {"tokens", "tokens.doc_ids", "tokens.position_ids", "tokens.cu_seqlens"}
            t, d = np.from_dlpack(b["tokens"]), np.from_dlpack(b["tokens.doc_ids"])
            assert t.dtype == np.int32 and t.shape[1] == 8
            flat, docs = t.reshape(-1), d.reshape(-1)
            for j in range(docs.max() + 1):
                seen.append(flat[docs == j].tolist())
    assert seen == [tokens(k).tolist() for k in range(9)]


def test_what_does_not_fit_is_refused_at_construction_naming_the_field(tmp_path):
    write_shards(tmp_path, [3])
    path = tmp_path / "part-0.tar"

    def refused(**kw):
        with pytest.raises(sluice.UsageError) as e:
            sluice.Loader(sluice.wds(path, **kw), batch_size=2)
        return str(e.value)

    # normalized() on float32 data; pack() on float32; a pad value int32 cannot hold.
    assert "normalized<> of field 'emb' (f32)" in refused(fields=fields(emb=sluice.field("emb.npy", collate=sluice.normalized())))
    assert "pack<> packs integer tokens; this field is f32" in refused(fields={"e": sluice.field("emb.npy", collate=sluice.pack())})
    msg = refused(fields={"t": sluice.field("tok.npy", dtype="int32", collate=sluice.pad(value=1e10))})
    assert "the pad value 10000000000" in msg and "of field 't' does not fit its element type i32" in msg
    # A text member as numbers; two fields for one extension; decode of a numeric field.
    assert "field 'c' holds f32 elements, but it takes '.txt' members" in refused(
        fields={"c": sluice.field("txt", dtype="float32", collate=sluice.ragged())})
    assert "both take the extension 'jpg'" in refused(fields={"a": sluice.field("jpg"), "b": sluice.field("jpg;png")})
    # Text stacked as uint8 would be character codes: refused, naming both ways out.
    msg = refused(fields={"label": sluice.field("cls")})
    assert "'.cls' members hold text" in msg and "dtype=" in msg and "ragged()" in msg
    # The keywords of the classic form do not apply with fields=.
    with pytest.raises(sluice.UsageError, match="decode=, label_field= does not apply"):
        sluice.wds(path, fields=fields(), decode=sluice.image((8, 8)), label_field="cls")
    with pytest.raises(sluice.UsageError, match="dtype='f32' is not accepted.*did you mean 'float32'"):
        sluice.field("emb.npy", dtype="f32")
    with pytest.raises(TypeError, match="'lenght'.*length"):               # a misspelt keyword: the nearest
        sluice.pad(lenght=8)
    with pytest.raises(sluice.UsageError, match="decode= reads encoded bytes"):
        sluice.field("jpg", dtype="int64", decode=sluice.image((8, 8)))
    with pytest.raises(sluice.UsageError, match="class_balanced"):
        sluice.Loader(sluice.wds(path, fields=fields()), sampler=sluice.sample.class_balanced())


def test_bad_members_are_format_errors_naming_shard_sample_and_field(tmp_path):
    with tarfile.open(tmp_path / "bad.tar", "w") as tar:
        add(tar, "a.jpg", jpeg(50))
        add(tar, "a.emb.npy", npy(emb(0)))
        add(tar, "b.jpg", jpeg(60))
        add(tar, "b.emb.npy", npy(np.arange(5, dtype=np.float32)))   # 5 floats where the batch has 6
        add(tar, "c.jpg", b"not a jpeg")
        add(tar, "c.emb.npy", npy(emb(2)))
    src = sluice.wds(tmp_path / "bad.tar", fields={
        "image": sluice.field("jpg", decode=sluice.image((8, 8))), "emb": sluice.field("emb.npy")})
    with sluice.Loader(src, batch_size=3, sampler=sluice.sample.sequential(), workers=1) as ld:
        with pytest.raises(sluice.FormatError) as e:
            list(ld)
    assert "bad.tar" in str(e.value) and "record 1" in str(e.value) and "field 'emb'" in str(e.value)
    with sluice.Loader(src, batch_size=3, sampler=sluice.sample.sequential(), workers=1, errors="skip") as ld:
        batches = list(ld)
        assert sum(len(np.from_dlpack(b["emb"])) for b in batches) == 1
        assert ld.stats()["skipped"] == 2


def test_a_sluice_shard_with_fields_gives_its_fields_and_labels(tmp_path):
    pack = os.environ.get("SLUICE_PACK", "")
    if not pack or not os.path.exists(pack):
        pytest.skip("sluice-pack was not built (SLUICE_PACK)")
    n = write_shards(tmp_path, [10])
    subprocess.run([pack, "wds", str(tmp_path / "part-0.tar"), "--fields", "jpg,txt", "-o", str(tmp_path / "f.sluice"),
                    "--quiet"], check=True)
    src = sluice.shard(tmp_path / "f.sluice", fields={
        "image": sluice.field("jpg", decode=sluice.image((8, 8))), "caption": sluice.field("txt", collate=sluice.ragged())})
    # The fields are the shard's bytes; every record once with sequential.
    with sluice.Loader(src, batch_size=5, sampler=sluice.sample.sequential(), workers=1) as ld:
        total = 0
        for b in ld:
            assert set(b) == {"image", "caption", "caption.offsets"}
            img, cap, off = np.from_dlpack(b["image"]), np.from_dlpack(b["caption"]), np.from_dlpack(b["caption.offsets"])
            assert img.shape[1:] == (8, 8, 3) and img.dtype == np.uint8
            for i in range(len(img)):
                words = bytes(cap[off[i]:off[i + 1]]).decode().split()
                assert set(words) == {"caption"} and 1 <= len(words) <= 3
            total += len(img)
        assert total == n
    # The records' labels (from .cls: 3k - 7) serve class_balanced, which draws the labelled ones
    # (k >= 3; a negative .cls is packed as "no label").
    with sluice.Loader(src, batch_size=5, sampler=sluice.sample.class_balanced(seed=1), workers=1) as ld:
        assert sum(len(np.from_dlpack(b["image"])) for b in ld) == n - 3
    with pytest.raises(sluice.FormatError, match="field 'emb': not in the shard .its fields: jpg"):
        sluice.Loader(sluice.shard(tmp_path / "f.sluice", fields={"e": sluice.field("emb")}))
    with pytest.raises(sluice.UsageError, match="stores field 'txt' as u8; leave dtype= out"):
        sluice.Loader(sluice.shard(tmp_path / "f.sluice", fields={"c": sluice.field("txt", dtype="int32",
                                                                                     collate=sluice.ragged())}))


def mds_fixture():
    # Written by MosaicML Streaming's MDSWriter (tests/data/mds/make_fixtures.py says how): sample i
    # has label int i*7%10, f32 float32 i/4, vec ndarray:float32:3 [i, i+.5, -i], arr ndarray
    # (int32 per sample) of (1 + i%3, 2), name str "sample-<i>", image a 6-row JPEG.
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "mds", "plain")
    plain = os.path.join(os.environ.get("SLUICE_TEST_DATA_DIR", ""), "mds", "plain")
    for p in (plain, here):
        if os.path.exists(os.path.join(p, "index.json")):
            return p
    pytest.skip("tests/data/mds/plain not found")


def test_mds_columns_arrive_with_their_own_types(tmp_path):
    plain = mds_fixture()
    src = sluice.mds(plain, fields={
        "label": sluice.field("label"), "f": sluice.field("f32"), "vec": sluice.field("vec"),
        "arr": sluice.field("arr", collate=sluice.ragged(row=(2,))), "name": sluice.field("name", collate=sluice.ragged()),
        "image": sluice.field("image", decode=sluice.image((6, 8)))})

    def run(workers):
        seen = []
        with sluice.Loader(src, batch_size=4, sampler=sluice.sample.shuffle(seed=5), workers=workers, drop_last=False) as ld:
            for b in ld:
                lab, f, vec = np.from_dlpack(b["label"]), np.from_dlpack(b["f"]), np.from_dlpack(b["vec"])
                arr, aoff = np.from_dlpack(b["arr"]), np.from_dlpack(b["arr.offsets"])
                name, noff = np.from_dlpack(b["name"]), np.from_dlpack(b["name.offsets"])
                img = np.from_dlpack(b["image"])
                assert lab.dtype == np.int64 and lab.ndim == 1
                assert f.dtype == np.float32 and f.ndim == 1
                assert vec.dtype == np.float32 and vec.shape[1:] == (3,)
                assert arr.dtype == np.int32 and arr.shape[1:] == (2,)
                assert img.dtype == np.uint8 and img.shape[1:] == (6, 8, 3)
                for k in range(len(lab)):
                    i = int(bytes(name[noff[k]:noff[k + 1]]).decode().split("-")[1])
                    seen.append(i)
                    assert lab[k] == i * 7 % 10 and f[k] == np.float32(i / 4)
                    np.testing.assert_array_equal(vec[k], np.array([i, i + 0.5, -i], np.float32))
                    want = (np.arange((1 + i % 3) * 2, dtype=np.int32) + i * 100).reshape(1 + i % 3, 2)
                    np.testing.assert_array_equal(arr[aoff[k]:aoff[k + 1]], want)
                    assert abs(int(img[k, :, :, 0].mean()) - min(255, i * 20)) <= 4   # the red level survives
        return seen

    one = run(1)
    assert sorted(one) == list(range(10))
    assert run(2) == one

    def refused(error, **f):
        with pytest.raises(error) as e:
            sluice.Loader(sluice.mds(plain, fields=f), batch_size=2)
        return str(e.value)

    assert "column 'lable'" in refused(sluice.FormatError, y=sluice.field("lable")) and "the shard has arr" in refused(
        sluice.FormatError, y=sluice.field("lable"))
    assert "pickled" in refused(sluice.FormatError, o=sluice.field("obj", collate=sluice.ragged()))
    assert "holds i64; leave dtype= out" in refused(sluice.UsageError, y=sluice.field("label", dtype="int32"))
    assert "normalized<> of field 'v' (f32)" in refused(sluice.UsageError, v=sluice.field("vec", collate=sluice.normalized()))
    with pytest.raises(sluice.UsageError, match="image_field= does not apply"):
        sluice.mds(plain, fields={"y": sluice.field("label")}, image_field="image")


def _pb_varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb_len(num, payload):
    return _pb_varint(num << 3 | 2) + _pb_varint(len(payload)) + payload


def _example(features):
    """A tf.train.Example: {name: (kind, values)}, kind 'bytes' / 'float' / 'int64', lists packed."""
    entries = b""
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature = _pb_len(1, b"".join(_pb_len(1, v) for v in values))
        elif kind == "float":
            feature = _pb_len(2, _pb_len(1, np.asarray(values, "<f4").tobytes()))
        else:
            feature = _pb_len(3, _pb_len(1, b"".join(_pb_varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)))
        entries += _pb_len(1, _pb_len(1, name.encode()) + _pb_len(2, feature))
    return _pb_len(1, entries)


def _write_tfrecord(path, records):
    def crc(data):
        c = 0xFFFFFFFF
        for byte in data:
            c ^= byte
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        c ^= 0xFFFFFFFF
        return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    with open(path, "wb") as f:
        for r in records:
            n = len(r).to_bytes(8, "little")
            f.write(n + crc(n).to_bytes(4, "little") + r + crc(r).to_bytes(4, "little"))


def test_tfrecord_features_arrive_with_their_list_types(tmp_path):
    def boxes(k):
        return [k + 0.25 * j for j in range(k % 4)]

    recs = [_example({"image/encoded": ("bytes", [jpeg(20 + 9 * k)]), "image/class/label": ("int64", [k - 3]),
                      "image/object/bbox/xmin": ("float", boxes(k)), "weights": ("float", [k, -k]),
                      "ids": ("int64", list(range(k % 5)))}) for k in range(11)]
    path = tmp_path / "train.tfrecord"
    _write_tfrecord(path, recs)
    src = sluice.tfrecord(path, fields={
        "image": sluice.field("image/encoded", decode=sluice.image((8, 8))),
        "label": sluice.field("image/class/label"),
        "xmin": sluice.field("image/object/bbox/xmin", collate=sluice.ragged()),
        "w": sluice.field("weights"),
        "ids": sluice.field("ids", dtype="int16", collate=sluice.pad(value=-1))})

    def run(workers):
        seen = []
        with sluice.Loader(src, batch_size=4, sampler=sluice.sample.shuffle(seed=2), workers=workers, drop_last=False) as ld:
            for b in ld:
                img, lab = np.from_dlpack(b["image"]), np.from_dlpack(b["label"])
                x, xo = np.from_dlpack(b["xmin"]), np.from_dlpack(b["xmin.offsets"])
                w, ids, n = np.from_dlpack(b["w"]), np.from_dlpack(b["ids"]), np.from_dlpack(b["ids.lengths"])
                assert img.shape[1:] == (8, 8, 3) and lab.dtype == np.int64 and lab.ndim == 1
                assert x.dtype == np.float32 and w.dtype == np.float32 and w.shape[1:] == (2,) and ids.dtype == np.int16
                for i in range(len(lab)):
                    k = int(lab[i]) + 3
                    seen.append(k)
                    np.testing.assert_array_equal(x[xo[i]:xo[i + 1]], np.array(boxes(k), np.float32))
                    np.testing.assert_array_equal(w[i], [k, -k])
                    assert n[i] == k % 5 and ids[i, :n[i]].tolist() == list(range(k % 5)) and (ids[i, n[i]:] == -1).all()
                    assert abs(int(img[i].mean()) - (20 + 9 * k)) <= 3
        return seen

    one = run(1)
    assert sorted(one) == list(range(11))
    assert run(2) == one

    # A type the list cannot be written as; a feature record 0 lacks; a value out of the type's range.
    with pytest.raises(sluice.FormatError, match="is a float_list, but its field is i64"):
        list(sluice.Loader(sluice.tfrecord(path, fields={"w": sluice.field("weights", dtype="int64")}), batch_size=4))
    with pytest.raises(sluice.FormatError, match="feature 'nope' \\(field 'n'\\) is not in record 0"):
        sluice.Loader(sluice.tfrecord(path, fields={"n": sluice.field("nope")}), batch_size=4)
    with pytest.raises(sluice.FormatError, match="record 0.*int64_list value -3 does not fit the field's type u8"):
        list(sluice.Loader(sluice.tfrecord(path, fields={"y": sluice.field("image/class/label", dtype="uint8")}),
                           batch_size=4, sampler=sluice.sample.sequential()))
    with pytest.raises(sluice.UsageError, match="label_field= does not apply"):
        sluice.tfrecord(path, fields={"y": sluice.field("image/class/label")}, label_field="image/class/label")


def test_tfrecord_and_wds_shards_as_a_list_or_a_brace_pattern(tmp_path):
    # 11 Examples over three TFRecord shards of 4, 0 and 7 records, as tools write them.
    recs = [_example({"image/encoded": ("bytes", [jpeg(20 + 9 * k)]), "image/class/label": ("int64", [k])})
            for k in range(11)]
    names = [tmp_path / f"train-{s:05d}-of-00003" for s in range(3)]
    for name, part in zip(names, (recs[:4], [], recs[4:])):
        _write_tfrecord(name, part)

    def labels(src, key="label"):
        with sluice.Loader(src, batch_size=3, sampler=sluice.sample.sequential(), drop_last=False, workers=2) as ld:
            return [int(v) for b in ld for v in np.from_dlpack(b[key])]

    img = sluice.image((8, 8))
    for path in ([str(n) for n in names], tuple(names), str(tmp_path / "train-{00000..00002}-of-00003")):
        assert labels(sluice.tfrecord(path, decode=img)) == list(range(11))
        assert labels(sluice.tfrecord(path, fields={"y": sluice.field("image/class/label")}), "y") == list(range(11))

    # A bad record in the last shard names that file and its own record (1), not the dataset's (5).
    raw = bytearray(names[2].read_bytes())
    raw[12 + len(recs[4]) + 4 + 12 + 5] ^= 0x20
    names[2].write_bytes(bytes(raw))
    with pytest.raises(sluice.FormatError, match=r"train-00002-of-00003', record 1, .*payload CRC mismatch"):
        list(sluice.Loader(sluice.tfrecord(names, decode=img), batch_size=3))

    # WebDataset shards as a list, in the order given.
    n = write_shards(tmp_path, [3, 2])
    parts = [tmp_path / "part-1.tar", tmp_path / "part-0.tar"]
    got = labels(sluice.wds(parts, decode=img))
    assert got == [3 * k - 7 for k in (3, 4, 0, 1, 2)] and n == 5
    got = labels(sluice.wds(parts, fields={"label": sluice.field("cls", dtype="int64")}))
    assert got == [3 * k - 7 for k in (3, 4, 0, 1, 2)]

    with pytest.raises(sluice.UsageError, match=r"path=\[\] is not accepted"):
        sluice.tfrecord([])
    with pytest.raises(sluice.UsageError, match=r"path\[1\]=3 is not accepted"):
        sluice.wds([parts[0], 3])
    with pytest.raises(sluice.UsageError, match="takes one path, not a list"):
        sluice.mds([str(tmp_path)])


def test_npy_arrays_as_fields_arrive_with_their_dtypes_and_row_shapes(tmp_path):
    n = 10
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 3, 2) / 4
    y = (np.arange(n, dtype=np.int64) * 7) - 20
    img = (np.arange(n * 4 * 5 * 3) % 251).astype(np.uint8).reshape(n, 4, 5, 3)
    for name, a in (("x.npy", x), ("y.npy", y), ("img.npy", img)):
        np.save(tmp_path / name, a)
    src = sluice.npy(tmp_path, fields={"x": sluice.field("x.npy"), "y": sluice.field("y.npy", dtype="int64"),
                                       "img": sluice.field(str(tmp_path / "img.npy"), collate=sluice.normalized(mean=0.5, std=0.25))})
    seen = []
    with sluice.Loader(src, batch_size=4, sampler=sluice.sample.shuffle(seed=1), workers=2, drop_last=False) as ld:
        for b in ld:
            bx, by, bi = np.from_dlpack(b["x"]), np.from_dlpack(b["y"]), np.from_dlpack(b["img"])
            assert bx.dtype == np.float32 and bx.shape[1:] == (3, 2)
            assert by.dtype == np.int64 and bi.dtype == np.float32 and bi.shape[1:] == (4, 5, 3)
            for i, row in enumerate(by):
                k = int((row + 20) // 7)
                seen.append(k)
                np.testing.assert_array_equal(bx[i], x[k])
                np.testing.assert_allclose(bi[i], (img[k] / 255 - 0.5) / 0.25, rtol=1e-5, atol=1e-5)
    assert sorted(seen) == list(range(n)) and seen != list(range(n))
    np.save(tmp_path / "short.npy", y[:5])
    with pytest.raises(sluice.FormatError, match=r"short\.npy.*5 rows beside 10"):
        sluice.Loader(sluice.npy(tmp_path, fields={"x": sluice.field("x.npy"), "s": sluice.field("short.npy")}))
    with pytest.raises(sluice.UsageError, match=r"sluice.field\('y.npy', dtype='int32'\): the array y.npy holds i64"):
        sluice.Loader(sluice.npy(tmp_path, fields={"y": sluice.field("y.npy", dtype="int32")}))
    with pytest.raises(sluice.UsageError, match=r"labels= does not apply"):
        sluice.npy(tmp_path, fields={"y": sluice.field("y.npy")}, labels=tmp_path / "y.npy")


def test_compressed_shards_and_records_are_named_as_such(tmp_path):
    # webdataset reads a .tar.gz and TensorFlow writes GZIP TFRecords; sluice maps uncompressed files
    # in place, and says so instead of calling the file a broken tar or a bad CRC.
    import bz2
    import gzip
    import lzma

    with tarfile.open(tmp_path / "s.tar.gz", "w:gz") as tar:
        add(tar, "a.cls", b"1")
        add(tar, "a.txt", b"x")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for k in range(40):
            add(tar, f"k{k:03d}.cls", str(k).encode())
    (tmp_path / "big.tar.xz").write_bytes(lzma.compress(raw.getvalue()))
    (tmp_path / "big.tar.bz2").write_bytes(bz2.compress(raw.getvalue()))
    for name, kind, command in (("s.tar.gz", "gzip", "gzip -dc"), ("big.tar.xz", "xz", "xz -dc"),
                                ("big.tar.bz2", "bzip2", "bzip2 -dc")):
        for src in (sluice.wds(tmp_path / name, fields={"y": sluice.field("cls", dtype="int64")}),
                    sluice.wds(tmp_path / name, decode=sluice.image((8, 8)))):
            with pytest.raises(sluice.FormatError) as e:
                list(sluice.Loader(src, batch_size=2, workers=0))
            msg = str(e.value)
            assert name in msg and f"is {kind}-compressed" in msg and "uncompressed tar archives" in msg, msg
            assert command in msg and "checksum" not in msg and "truncated" not in msg, msg
    path = tmp_path / "a.tfrecord"
    _write_tfrecord(path, [_example({"y": ("int64", [k])}) for k in range(3)])
    (tmp_path / "a.gz.tfrecord").write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(sluice.FormatError) as e:
        sluice.Loader(sluice.tfrecord(tmp_path / "a.gz.tfrecord", fields={"y": sluice.field("y")}), workers=0)
    msg = str(e.value)
    assert "a.gz.tfrecord" in msg and "is gzip-compressed" in msg and "uncompressed TFRecord files" in msg, msg
    assert "CRC" not in msg, msg


def test_upper_case_extensions_match_as_webdataset_reads_them(tmp_path):
    # webdataset lower-cases a member's extension (not its key): "B.CLS" is field "cls" of key "B".
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        for name, data in (("B.CLS", b"2"), ("B.TXT", b"y"), ("B.JPG", jpeg(40)), ("c.cls", b"3"), ("c.txt", b"z"),
                           ("c.Jpg", jpeg(80))):
            add(tar, name, data)

    def read(src):
        with sluice.Loader(src, batch_size=2, sampler=sluice.sample.sequential(), workers=0) as ld:
            return next(iter(ld))

    b = read(sluice.wds(tmp_path / "s.tar", fields={"cls": sluice.field("cls", dtype="int64"),
                                                    "txt": sluice.field("TXT", collate=sluice.ragged())}))
    assert np.from_dlpack(b["cls"]).tolist() == [2, 3]
    assert bytes(np.from_dlpack(b["txt"])) == b"yz"
    b = read(sluice.wds(tmp_path / "s.tar", decode=sluice.image((8, 8))))
    assert np.from_dlpack(b["label"]).tolist() == [2, 3]
    img = np.from_dlpack(b["image"])
    assert abs(int(img[0].mean()) - 40) <= 3 and abs(int(img[1].mean()) - 80) <= 3
    pack = os.environ.get("SLUICE_PACK", "")
    if pack and os.path.exists(pack):
        for args in (["--fields", "txt,jpg"], ["--field", "JPG"]):
            out = tmp_path / "p.sluice"
            subprocess.run([pack, "wds", str(tmp_path / "s.tar"), *args, "-o", str(out), "--quiet"], check=True)
            assert np.from_dlpack(read(sluice.shard(out, decode=sluice.image((8, 8))))["label"]).tolist() == [2, 3]
            out.unlink()


def _write_mds(path, columns, rows):
    # MosaicML Streaming's MDS format, version 2 (MDSWriter's layout): one shard; columns maps a name to
    # (encoding, bytes a sample or None for a variable column, whose sizes lead each sample).
    import json
    import struct
    os.makedirs(path)
    sizes = [size for _, size in columns.values()]
    samples = [b"".join(struct.pack("<I", len(v)) for v, n in zip(r, sizes) if n is None) + b"".join(r) for r in rows]
    head = 4 + 4 * (len(samples) + 1)
    offsets = [head]
    for s in samples:
        offsets.append(offsets[-1] + len(s))
    shard = struct.pack("<I", len(samples)) + b"".join(struct.pack("<I", o) for o in offsets) + b"".join(samples)
    with open(os.path.join(path, "shard.00000.mds"), "wb") as f:
        f.write(shard)
    entry = {"column_encodings": [e for e, _ in columns.values()], "column_names": list(columns), "column_sizes": sizes,
             "compression": None, "format": "mds", "hashes": [], "raw_data": {"basename": "shard.00000.mds",
             "bytes": len(shard), "hashes": {}}, "samples": len(samples), "size_limit": 1 << 26, "version": 2,
             "zip_data": None}
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"shards": [entry], "version": 2}, f)


def test_an_mds_pil_column_is_refused_where_it_would_be_decoded(tmp_path):
    # MDSWriter's 'pil' encoding: u32 width, height, mode length, the mode, then the raw pixels.
    import struct

    def pil(level):
        return struct.pack("<III", 2, 2, 3) + b"RGB" + bytes([level]) * 12

    d = str(tmp_path / "mds")
    _write_mds(d, {"image": ("pil", None), "photo": ("jpeg", None), "label": ("int", 8)},
               [[pil(k), jpeg(40), struct.pack("<q", k)] for k in range(4)])
    for src in (sluice.mds(d, decode=sluice.image((8, 8))),
                sluice.mds(d, fields={"image": sluice.field("image", decode=sluice.image((8, 8)))})):
        with pytest.raises(sluice.UsageError) as e:
            sluice.Loader(src, batch_size=2, workers=0)
        msg = str(e.value)
        assert "column 'image'" in msg and "encoded 'pil'" in msg and "'jpeg' or 'png'" in msg, msg
    # Its bytes as written, undecoded; another column decoded.
    src = sluice.mds(d, fields={"raw": sluice.field("image", collate=sluice.ragged()),
                                "img": sluice.field("photo", decode=sluice.image((8, 8)))})
    with sluice.Loader(src, batch_size=4, sampler=sluice.sample.sequential(), workers=0) as ld:
        b = next(iter(ld))
    assert bytes(np.from_dlpack(b["raw"])[:15]) == pil(0)[:15]
    assert np.from_dlpack(b["img"]).shape == (4, 8, 8, 3)


def test_npy_members_stack_with_their_shape_and_one_of_another_shape_names_both(tmp_path):
    arrays = [np.arange(6, dtype=np.int16).reshape(2, 3) + k for k in range(3)] + [np.zeros((3, 2), np.int16)]
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        for k, a in enumerate(arrays):
            add(tar, f"k{k}.emb.npy", npy(a))
            add(tar, f"k{k}.n.npy", npy(np.int64(k)))

    def first(f, n=3):
        with sluice.Loader(sluice.wds(tmp_path / "s.tar", fields=f), batch_size=n, sampler=sluice.sample.sequential(),
                           workers=0) as ld:
            return next(iter(ld))

    b = first({"emb": sluice.field("emb.npy"), "n": sluice.field("n.npy")})
    e = np.from_dlpack(b["emb"])
    assert e.shape == (3, 2, 3) and e.dtype == np.int16           # (B, *member shape), as help(sluice.wds) says
    np.testing.assert_array_equal(e, np.stack(arrays[:3]))
    assert np.from_dlpack(b["n"]).tolist() == [0, 1, 2]           # 0-d members: (B,)
    with pytest.raises(sluice.FormatError) as err:
        first({"emb": sluice.field("emb.npy")}, 4)
    msg = str(err.value)
    assert "s.tar" in msg and "sample 'k3'" in msg and "shape (3, 2)" in msg and "shape (2, 3)" in msg, msg
    # ragged() and pad() take members of any shape, flattened (row= for rows).
    b = first({"emb": sluice.field("emb.npy", collate=sluice.ragged(row=(2,)))}, 4)
    assert np.from_dlpack(b["emb"]).shape == (12, 2) and np.from_dlpack(b["emb.offsets"]).tolist() == [0, 3, 6, 9, 12]
