#!/usr/bin/env python3
"""Writes the MDS fixtures of tests/io/mds_test.cpp with MosaicML Streaming's own MDSWriter.

The fixtures are committed (a few KiB) so the test suite needs no PyPI packages; this script is
how they were made, and remakes them with another version of the writer:

    python3 -m venv --system-site-packages /tmp/mds && /tmp/mds/bin/pip install mosaicml-streaming
    /tmp/mds/bin/python tests/data/mds/make_fixtures.py tests/data/mds

Made with mosaicml-streaming 0.13.0 (Python 3.11, NumPy 1.24, Pillow 9.4).
Sample i of `plain/` (5 shards of 2 samples: size_limit makes a new shard every 2):
    label  int                 i * 7 % 10
    name   str                 "sample-<i>"
    u16    uint16              1000 + i
    f32    float32             i / 4
    image  jpeg                a (8 + i % 3) x 6 RGB JPEG (quality 75, the encoding's default)
    mask   png                 a 5 x 4 greyscale PNG
    arr    ndarray             int32, shape (1 + i % 3, 2), values i * 100 + k
    vec    ndarray:float32:3   [i, i + 0.5, -i]
    meta   json                {"i": i, "tags": ["a", "b"]}
    blob   bytes               i + 1 bytes of value i
    obj    pkl                 {"i": i} (the reader refuses this column when a schema asks for it)
`zstd/`: the same first 4 samples, shards compressed with zstd. `expected.txt`: one line a sample
of `plain/` (i, the JPEG's size, the PNG's size) for the checks that need the encoder's output.
"""
import io
import os
import sys

import numpy as np
from PIL import Image
from streaming import MDSWriter

COLUMNS = {
    "label": "int", "name": "str", "u16": "uint16", "f32": "float32", "image": "jpeg", "mask": "png",
    "arr": "ndarray", "vec": "ndarray:float32:3", "meta": "json", "blob": "bytes", "obj": "pkl",
}
N = 10


def sample(i):
    w, h = 8 + i % 3, 6
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[:, :, 0] = i * 20
    rgb[:, :, 1] = np.arange(w, dtype=np.uint8) * 10
    img = Image.fromarray(rgb, "RGB")
    mask = Image.fromarray((np.arange(20, dtype=np.uint8).reshape(4, 5) * (i + 1)) % 256, "L")
    return {
        "label": i * 7 % 10,
        "name": f"sample-{i}",
        "u16": 1000 + i,
        "f32": i / 4,
        "image": img,
        "mask": mask,
        "arr": (np.arange((1 + i % 3) * 2, dtype=np.int32) + i * 100).reshape(1 + i % 3, 2),
        "vec": np.array([i, i + 0.5, -i], np.float32),
        "meta": {"i": i, "tags": ["a", "b"]},
        "blob": bytes([i]) * (i + 1),
        "obj": {"i": i},
    }


def main(out):
    expected = []
    with MDSWriter(out=os.path.join(out, "plain"), columns=COLUMNS, size_limit=3000,
                   hashes=["sha1", "xxh64"]) as w:
        for i in range(N):
            s = sample(i)
            jpg, png = io.BytesIO(), io.BytesIO()
            s["image"].save(jpg, format="JPEG", quality=75)
            s["mask"].save(png, format="PNG")
            expected.append(f"{i} {len(jpg.getvalue())} {len(png.getvalue())}")
            w.write(s)
    with MDSWriter(out=os.path.join(out, "zstd"), columns=COLUMNS, compression="zstd") as w:
        for i in range(4):
            w.write(sample(i))
    with open(os.path.join(out, "expected.txt"), "w") as f:
        f.write("\n".join(expected) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
