"""Meta's SPDL on the peers' JPEG workload: one measurement, for run.py.

Run by run.py with the interpreter given as --spdl-python (SPDL lives in its own venv, e.g.
`/usr/bin/python3 -m venv ENV && ENV/bin/pip install spdl numpy`; it decodes with the system's
FFmpeg libraries, Debian's libavcodec59 and friends):
    ENV/bin/python bench/peers/spdl_peer.py PACK OFFSETS LABELS NUM_THREADS SECONDS [BATCH [decode-only]]
prints `samples_per_s <rate>` like the C++ peer programs; exits with status 3 when spdl cannot be
imported or cannot decode (run.py then reports the rows as not measured).

The pipeline is SPDL's own image-loading recipe (its examples' "batch decode" stage), on the
JPEGs of run.py's pack read into memory once (as the page-cached pack is for every loader):
    PipelineBuilder().add_source(batches of BATCH shuffled (jpeg bytes, label))
                     .pipe(decode, concurrency=NUM_THREADS)     spdl.io.load_image_batch(jpegs,
                                                                 width=64, height=64, pix_fmt="rgb24")
                                                                 -> spdl.io.to_numpy: (B, 64, 64, 3) u8
                     .add_sink(2).build(num_threads=NUM_THREADS)
A new shuffled order each epoch. Rate: samples a second over SECONDS after 3 warm-up batches.
Raw records (run.py's raw group), the same pipeline with a gather stage instead of the decode:
    ENV/bin/python bench/peers/spdl_peer.py raw RECORDS LABELS RECORD_BYTES NUM_THREADS SECONDS [BATCH]
    .pipe(gather, concurrency=NUM_THREADS)   records[idx] of an np.memmap of the file: (B, bytes) u8
On the workload's 64x64 JPEGs the resize is the identity, as it is for sluice's and DALI's.
"decode-only" asks for no size (width=height=None: decode and RGB conversion only; an extra, right
only because every image of this workload is already 64x64, as DALI's "decode only" extra).
ImageNet-size JPEGs through the ImageNet training transform (run.py's rrc group):
    ENV/bin/python bench/peers/spdl_peer.py rrc PACK OFFSETS LABELS NUM_THREADS SECONDS [BATCH]
    .pipe(decode, concurrency=NUM_THREADS)   per image spdl.io.demux_image, a crop drawn as
        torchvision's RandomResizedCrop draws it (peer_transforms.py) and a flip with probability
        1/2, decoded through the FFmpeg filter "crop=w:h:x:y,scale=224:224:flags=bilinear[,hflip]"
        (spdl.io.decode_packets), the batch's frames stacked by spdl.io.convert_frames: (B, 224, 224, 3) u8
SPDL's load_image_batch has no random crop, so this is the per-image recipe of its API.
"""

import sys

from peer_timing import rate_of
from peer_transforms import random_resized_crop_box


def raw_main(a):
    records, labels, record_bytes, threads, seconds = a[2], a[3], int(a[4]), int(a[5]), float(a[6])
    batch = int(a[7]) if len(a) >= 8 else 256
    try:
        import numpy as np
        from spdl.pipeline import PipelineBuilder
    except ImportError as e:
        print(f"SPDL not installed ({e})", file=sys.stderr)
        return 3
    lab = np.fromfile(labels, dtype="<i8")
    mm = np.memmap(records, dtype=np.uint8, mode="r", shape=(len(lab), record_bytes))

    def source():
        rng = np.random.default_rng(7)
        while True:
            order = rng.permutation(len(lab))
            for s in range(0, len(order) - batch + 1, batch):
                yield np.sort(order[s:s + batch])

    def gather(idx):
        return mm[idx], lab[idx]  # fancy indexing copies the records out of the mapping

    pipeline = (PipelineBuilder().add_source(source()).pipe(gather, concurrency=threads, output_order="completion")
                .add_sink(2).build(num_threads=threads))
    def check(x, _):
        if x.shape != (batch, record_bytes):
            raise RuntimeError(f"unexpected batch {x.shape}")

    with pipeline.auto_stop():
        rate = rate_of(iter(pipeline), seconds, check)
    print(f"samples_per_s {rate:.1f}")
    return 0


def main():
    if len(sys.argv) in (7, 8) and sys.argv[1] == "raw":
        return raw_main(sys.argv)
    rrc = len(sys.argv) > 1 and sys.argv[1] == "rrc"
    argv = sys.argv[1:] if rrc else sys.argv
    if len(argv) not in (6, 7, 8) or (len(argv) == 8 and (rrc or argv[7] != "decode-only")):
        print(__doc__, file=sys.stderr)
        return 2
    pack, offsets, labels, threads, seconds = argv[1], argv[2], argv[3], int(argv[4]), float(argv[5])
    batch = int(argv[6]) if len(argv) >= 7 else 256
    size = None if len(argv) == 8 else 64
    try:
        import numpy as np
        import spdl.io
        from spdl.pipeline import PipelineBuilder
    except ImportError as e:
        print(f"SPDL not installed ({e})", file=sys.stderr)
        return 3
    blob = open(pack, "rb").read()
    off = np.fromfile(offsets, dtype="<u8")
    lab = np.fromfile(labels, dtype="<i8")
    jpegs = [blob[off[j]:off[j + 1]] for j in range(len(off) - 1)]

    def source():
        rng = np.random.default_rng(7)
        while True:
            order = rng.permutation(len(jpegs))
            for s in range(0, len(order) - batch + 1, batch):
                idx = order[s:s + batch]
                yield [jpegs[i] for i in idx], lab[idx]

    def decode(item):
        srcs, y = item
        x = spdl.io.to_numpy(spdl.io.load_image_batch(srcs, width=size, height=size, pix_fmt="rgb24"))
        if x.shape != (len(srcs), 64, 64, 3) or x.dtype != np.uint8:
            raise RuntimeError(f"unexpected batch {x.shape} {x.dtype}")
        return x, y

    def decode_rrc(item):
        srcs, y = item
        rng = np.random.default_rng()
        frames = []
        for src in srcs:
            packets = spdl.io.demux_image(src)
            x0, y0, x1, y1 = random_resized_crop_box(rng, packets.width, packets.height)
            flip = ",hflip" if rng.random() < 0.5 else ""
            frames.append(spdl.io.decode_packets(
                packets, filter_desc=f"crop={x1 - x0}:{y1 - y0}:{x0}:{y0},scale=224:224:flags=bilinear{flip},"
                                     "format=pix_fmts=rgb24"))
        x = spdl.io.to_numpy(spdl.io.convert_frames(frames))
        if x.shape != (len(srcs), 224, 224, 3) or x.dtype != np.uint8:
            raise RuntimeError(f"unexpected batch {x.shape} {x.dtype}")
        return x, y

    try:
        pipeline = (PipelineBuilder().add_source(source()).pipe(decode_rrc if rrc else decode, concurrency=threads,
                                                          output_order="completion")
                    .add_sink(2).build(num_threads=threads))
        with pipeline.auto_stop():
            rate = rate_of(iter(pipeline), seconds)
    except Exception as e:  # FFmpeg libraries missing or of another major version
        print(f"SPDL could not decode here ({type(e).__name__}: {e})", file=sys.stderr)
        return 3
    print(f"samples_per_s {rate:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
