#!/usr/bin/python3
"""sluice side by side with the loaders a user would otherwise pick, on the same files, in one run.

Usage (from the repository root, after building the peer programs):
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
    cmake --build build -j2 --target sluice_peers libtorch_peer
    /usr/bin/python3 bench/peers/run.py --build build [--data /tmp/sluice-peers] [--seconds 3]
(the "sluice (Python module)" rows need the module: cmake --build build --target sluice_python;
the "DALI CPU pipeline" rows need NVIDIA DALI in an interpreter given as --dali-python, e.g.
    /usr/bin/python3 -m venv --system-site-packages /work/venv-dali
    /work/venv-dali/bin/pip install nvidia-dali-cuda130
    ... run.py --build build --dali-python /work/venv-dali/bin/python
 without it, or when it cannot import nvidia.dali, those rows say "not measured: DALI not installed";
 the "SPDL" rows likewise need Meta's SPDL in an interpreter given as --spdl-python, e.g.
    /usr/bin/python3 -m venv /work/venv-spdl && /work/venv-spdl/bin/pip install spdl numpy
 with Debian's FFmpeg libraries, libavcodec59 and friends, which SPDL decodes with; and the
 "Grain" rows need Google's Grain in an interpreter given as --grain-python, e.g.
    /usr/bin/python3 -m venv /work/venv-grain && /work/venv-grain/bin/pip install grain numpy pillow)

It needs Debian's python3-torch, python3-numpy and python3-pil (and python3-torchvision for
torchvision.io.decode_jpeg), which install for /usr/bin/python3, not for a python3 found first on
PATH. The script writes the workload files once (reused when present and the same size), warms the
page cache, then measures every loader for --seconds each, in --rounds interleaved rounds, and
prints the best round of each with the ratio sluice/peer.

Workload files (all little-endian, no header; the layout is the contract the C++ programs read):
    records.u8     N fixed-size records of 3x64x64 uint8 (CHW), record i at byte i*12288
    labels.i64     N int64 class labels, long-tailed: class c has ~ N_0 * 100^(-c/9) records
                   (10 classes, imbalance factor 100), in a seeded random order
    images.jpgpack M baseline JPEGs (64x64 RGB, quality 90), concatenated
    images.offsets M+1 uint64 byte offsets into images.jpgpack: JPEG j is [off[j], off[j+1])
    images.labels  M int64 labels, same long-tailed distribution
    weights.f64    10^6 float64 sampling weights (for the weighted-sampler comparison)
With --dali-python, also (DALI's file reader takes one file per image):
    jpegs/<j>.jpg  JPEG j of the pack, byte for byte
    images.filelist  DALI file list: "jpegs/<j>.jpg <label>" a line
"""

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time

RECORD_SHAPE = (3, 64, 64)
RECORD_BYTES = 3 * 64 * 64
BATCH = 256
NUM_CLASSES = 10
IMBALANCE = 100.0


def long_tailed_labels(n, rng):
    import numpy as np
    share = IMBALANCE ** (-np.arange(NUM_CLASSES) / (NUM_CLASSES - 1))
    counts = np.floor(share / share.sum() * n).astype(np.int64)
    counts[0] += n - counts.sum()
    labels = np.repeat(np.arange(NUM_CLASSES, dtype=np.int64), counts)
    rng.shuffle(labels)
    return labels


def write_jpeg_pack(d, n_jpegs, h, w, field, noise, rng):
    """n_jpegs h x w q90 JPEGs of colour fields plus noise into d/images.{jpgpack,offsets,labels}
    (field(xx, yy, a, b, c) gives the three channels for each image's random a, b, c)."""
    import numpy as np
    from PIL import Image
    t = time.time()
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    offsets = [0]
    with open(os.path.join(d, "images.jpgpack"), "wb") as f:
        for _ in range(n_jpegs):
            a, b, c = rng.random(3) * 6.28
            img = np.stack(field(xx, yy, a, b, c), axis=-1) + rng.normal(0, noise, size=(h, w, 3))
            buf = io.BytesIO()
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(buf, "JPEG", quality=90)
            f.write(buf.getvalue())
            offsets.append(offsets[-1] + len(buf.getvalue()))
    np.asarray(offsets, dtype=np.uint64).tofile(os.path.join(d, "images.offsets"))
    long_tailed_labels(n_jpegs, rng).tofile(os.path.join(d, "images.labels"))
    print(f"# wrote {n_jpegs} {w}x{h} JPEGs ({offsets[-1] / 2**20:.1f} MiB, mean {offsets[-1] / n_jpegs:.0f} B) "
          f"in {time.time() - t:.1f} s")


def warm_page_cache(d, names):
    """Reads the files once so every loader reads from memory, not from disk."""
    for name in names:
        with open(os.path.join(d, name), "rb") as f:
            while f.read(1 << 24):
                pass


def make_workload(data, n_records, n_jpegs, n_weights):
    import numpy as np
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(20261129)
    rec = os.path.join(data, "records.u8")
    if not (os.path.exists(rec) and os.path.getsize(rec) == n_records * RECORD_BYTES):
        t = time.time()
        with open(rec, "wb") as f:
            chunk = 4096
            for start in range(0, n_records, chunk):
                k = min(chunk, n_records - start)
                f.write(rng.integers(0, 256, size=k * RECORD_BYTES, dtype=np.uint8).tobytes())
        long_tailed_labels(n_records, rng).tofile(os.path.join(data, "labels.i64"))
        print(f"# wrote {n_records} records ({n_records * RECORD_BYTES / 2**20:.0f} MiB) in {time.time() - t:.1f} s")
    offs = os.path.join(data, "images.offsets")
    if not (os.path.exists(offs) and os.path.getsize(offs) == (n_jpegs + 1) * 8):
        # Smooth colour fields plus mild noise: compresses like a small natural image (~2-4 KiB),
        # not like white noise (which no one stores as JPEG) nor a flat colour (which decodes
        # unrealistically fast).
        write_jpeg_pack(data, n_jpegs, 64, 64, lambda xx, yy, a, b, c: (
            128 + 100 * np.sin(xx / (7 + 5 * a) + a) * np.cos(yy / (9 + 3 * b)),
            128 + 100 * np.sin(yy / (6 + 4 * b) + c),
            128 + 100 * np.cos((xx + yy) / (11 + 4 * c) + b)), 8, rng)
    w = os.path.join(data, "weights.f64")
    if not (os.path.exists(w) and os.path.getsize(w) == n_weights * 8):
        (rng.pareto(1.5, size=n_weights) + 0.01).astype(np.float64).tofile(w)
    warm_page_cache(data, ("records.u8", "labels.i64", "images.jpgpack", "images.offsets", "images.labels",
                           "weights.f64"))


def make_rrc_workload(data, n_jpegs):
    """ImageNet-size JPEGs for the rrc group: 500x375 q90 (an ImageNet training image's typical
    size), noisy colour fields that compress like photos (~60-90 KiB), in the same pack layout as
    the 64x64 ones, in data/rrc/."""
    import numpy as np
    d = os.path.join(data, "rrc")
    os.makedirs(d, exist_ok=True)
    offs = os.path.join(d, "images.offsets")
    if not (os.path.exists(offs) and os.path.getsize(offs) == (n_jpegs + 1) * 8):
        write_jpeg_pack(d, n_jpegs, 375, 500, lambda xx, yy, a, b, c: (
            128 + 90 * np.sin(xx / (30 + 40 * a) + a) * np.cos(yy / (25 + 30 * b)),
            128 + 90 * np.sin(yy / (20 + 35 * b) + c) * np.cos(xx / (45 + 20 * c)),
            128 + 90 * np.cos((xx + yy) / (35 + 30 * c) + b)), 10, np.random.default_rng(20261206))
    warm_page_cache(d, ("images.jpgpack", "images.offsets", "images.labels"))
    return d


# ---------------------------------------------------------------- PyTorch (Python) peers

class RecordDataset:
    """Map-style dataset over np.memmap: what a PyTorch user writes for fixed-size records."""

    def __init__(self, data):
        import numpy as np
        self.data = data
        self.labels = np.fromfile(os.path.join(data, "labels.i64"), dtype=np.int64)
        self.records = None  # opened lazily so that each worker process maps the file itself

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        import numpy as np
        import torch
        if self.records is None:
            self.records = np.memmap(os.path.join(self.data, "records.u8"), dtype=np.uint8, mode="r",
                                     shape=(len(self.labels),) + RECORD_SHAPE)
        return torch.from_numpy(np.array(self.records[i])), int(self.labels[i])


class JpegDataset:
    """Map-style dataset over the packed JPEG file; decode with PIL or torchvision.io.decode_jpeg."""

    def __init__(self, data, decoder, rrc=False):
        import numpy as np
        self.data = data
        self.decoder = decoder
        self.rrc = None
        if rrc:  # torchvision's ImageNet training transform: RandomResizedCrop(224) + a random flip
            import torchvision.transforms as T
            self.rrc = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
        self.offsets = np.fromfile(os.path.join(data, "images.offsets"), dtype=np.uint64).astype(np.int64)
        self.labels = np.fromfile(os.path.join(data, "images.labels"), dtype=np.int64)
        self.pack = None

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        import numpy as np
        import torch
        if self.pack is None:
            self.pack = np.memmap(os.path.join(self.data, "images.jpgpack"), dtype=np.uint8, mode="r")
        raw = self.pack[self.offsets[i]:self.offsets[i + 1]]
        if self.decoder == "pil":
            from PIL import Image
            # HWC uint8 as decoded (what sluice's codec writes too); no permute, no float.
            pil = Image.open(io.BytesIO(raw.tobytes())).convert("RGB")
            if self.rrc is not None:
                pil = self.rrc(pil)
            img = torch.from_numpy(np.array(pil))
        else:
            import torchvision.io
            img = torchvision.io.decode_jpeg(torch.from_numpy(np.array(raw)))
            if self.rrc is not None:  # on the CHW uint8 tensor, as torchvision documents for tensors
                img = self.rrc(img)
        return img, int(self.labels[i])


def jpeg_decoders():
    """The DataLoader's JPEG decoders here: PIL, and torchvision.io.decode_jpeg where installed."""
    try:
        import torchvision.io
        return ["pil", "torchvision"] if hasattr(torchvision.io, "decode_jpeg") else ["pil"]
    except ImportError:
        return ["pil"]


def time_loader(make_loader, seconds):
    """Samples/s of a DataLoader in steady state: warm-up batches (worker start-up) excluded;
    epochs are restarted as needed (persistent workers keep that cheap)."""
    loader = make_loader()
    it = iter(loader)
    for _ in range(3):
        try:
            next(it)
        except StopIteration:  # a tiny workload: fewer than 3 batches an epoch
            it = iter(loader)
    samples = 0
    t0 = time.perf_counter()
    while True:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        samples += x.shape[0]
        if time.perf_counter() - t0 >= seconds:
            break
    rate = samples / (time.perf_counter() - t0)
    del it, loader
    return rate


def module_loop_rate(ld, key, seconds):
    """Samples/s of a sluice module loader in steady state (3 warm-up batches excluded), epochs
    restarted as needed, each batch turned into torch tensors as a trainer would."""
    import torch
    state = {"epoch": 0, "it": iter(ld)}

    def batch():
        while True:
            try:
                return next(state["it"])
            except StopIteration:  # a small workload: a few batches an epoch
                state["epoch"] += 1
                ld.set_epoch(state["epoch"])
                state["it"] = iter(ld)

    for _ in range(3):
        batch()
    samples = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        b = batch()
        x, y = torch.from_dlpack(b[key]), torch.from_dlpack(b["label"])
        samples += x.shape[0]
        del x, y, b
    return samples / (time.perf_counter() - t0)


def sluice_module_rate(module_dir, data, workers, seconds):
    """The raw workload through the Python module (python/): the same pipeline as sluice_peers raw
    (shuffle, fixed records, collate 256, drop_last, depth 2), each batch turned into torch tensors
    with torch.from_dlpack as a trainer would."""
    import torch
    if module_dir not in sys.path:
        sys.path.insert(0, module_dir)
    import sluice
    ld = sluice.loader("records", path=os.path.join(data, "records.u8"), labels=os.path.join(data, "labels.i64"),
                       record_bytes=RECORD_BYTES, batch_size=BATCH, sampler="shuffle", seed=7, drop_last=True,
                       workers=workers, prefetch=2, shape=list(RECORD_SHAPE))
    return module_loop_rate(ld, "data", seconds)


def read_jpeg_pack(data):
    """The JPEG pack's offsets, labels and bytes, as NumPy arrays."""
    import numpy as np
    offsets = np.fromfile(os.path.join(data, "images.offsets"), dtype=np.uint64).astype(np.int64)
    labels = np.fromfile(os.path.join(data, "images.labels"), dtype=np.int64)
    raw = np.fromfile(os.path.join(data, "images.jpgpack"), dtype=np.uint8)
    return offsets, labels, raw


def wds_from_pack(data):
    """The packed JPEGs as one WebDataset shard (<i>.jpg + <i>.cls), for the Python module's "wds"
    source; written once next to the pack."""
    import tarfile
    out = os.path.join(data, "images.tar")
    pack = os.path.join(data, "images.jpgpack")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(pack):
        return out
    offsets, labels, raw = read_jpeg_pack(data)
    with tarfile.open(out + ".partial", "w") as tar:
        for i in range(len(labels)):
            for name, blob in ((f"{i:07d}.jpg", raw[offsets[i]:offsets[i + 1]].tobytes()),
                               (f"{i:07d}.cls", str(int(labels[i])).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    os.replace(out + ".partial", out)
    return out


def sluice_module_image_rate(module_dir, tar, workers, seconds, **image):
    """A JPEG workload through the Python module: WebDataset .jpg + .cls decoded as `image` says
    (jpeg: size=[64, 64], what sluice_peers jpeg writes; rrc: size=[224, 224],
    crop="random_resized", flip=True), HWC uint8, batches of 256, torch.from_dlpack per batch."""
    if module_dir not in sys.path:
        sys.path.insert(0, module_dir)
    import sluice
    ld = sluice.loader("wds", path=tar, batch_size=BATCH, layout="hwc", output="uint8", sampler="shuffle", seed=7,
                       drop_last=True, workers=workers, prefetch=2, **image)
    return module_loop_rate(ld, "image", seconds)


def jpeg_files_from_pack(data):
    """The packed JPEGs as one file each plus a DALI file list ("<path relative to the list> <label>"
    a line), for DALI's fn.readers.file; written once next to the pack."""
    out = os.path.join(data, "images.filelist")
    pack = os.path.join(data, "images.jpgpack")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(pack):
        return out
    offsets, labels, raw = read_jpeg_pack(data)
    os.makedirs(os.path.join(data, "jpegs"), exist_ok=True)
    lines = []
    for i in range(len(labels)):
        name = f"jpegs/{i:07d}.jpg"
        with open(os.path.join(data, name), "wb") as f:
            f.write(raw[offsets[i]:offsets[i + 1]].tobytes())
        lines.append(f"{name} {int(labels[i])}\n")
    with open(out + ".partial", "w") as f:
        f.writelines(lines)
    os.replace(out + ".partial", out)
    return out


def peer_version(python, peer, module, flag, version):
    """The version (the expression `version` after importing `module`) of a peer as the interpreter
    `python` imports it, or (None, why not)."""
    if not python:
        return None, f"{peer} not installed (no {flag} given)"
    try:
        out = subprocess.run([python, "-c", f"import {module}; print({version})"], capture_output=True, text=True,
                             timeout=120)
    except OSError as e:
        return None, f"{peer} not installed ({python}: {e.strerror})"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{peer} not installed ({python} cannot import {module}: {last})"
    return out.stdout.strip(), None


def dali_version(python):
    """DALI's version as the interpreter `python` imports it, or (None, why not)."""
    return peer_version(python, "DALI", "nvidia.dali", "--dali-python", "nvidia.dali.__version__")


FIRST_BATCH = {
    "sluice module": "import time; t0 = time.perf_counter(); import sys; sys.path.insert(0, {mod!r}); import sluice, torch; "
                     "ld = sluice.loader('records', path={rec!r}, labels={lab!r}, record_bytes={rb}, batch_size={b}, workers=2); "
                     "x = torch.from_dlpack(next(iter(ld))['data']); print(time.perf_counter() - t0)",
    "PyTorch DataLoader": "import time; t0 = time.perf_counter(); import sys; sys.path.insert(0, {here!r}); import torch, run; "
                          "ds = run.RecordDataset({data!r}); "
                          "x = next(iter(torch.utils.data.DataLoader(ds, batch_size={b}, shuffle=True, num_workers=2))); "
                          "print(time.perf_counter() - t0)",
}


def first_batch_seconds(kind, module_dir, data):
    """Seconds from a fresh interpreter's start to the first batch (imports included)."""
    code = FIRST_BATCH[kind].format(mod=module_dir, rec=os.path.join(data, "records.u8"),
                                    lab=os.path.join(data, "labels.i64"), rb=RECORD_BYTES, b=BATCH,
                                    here=os.path.dirname(os.path.abspath(__file__)), data=data)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return float(out.stdout.split()[-1])


def torch_loader_factory(dataset, workers):
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    def make():
        return DataLoader(dataset, batch_size=BATCH, sampler=RandomSampler(dataset), num_workers=workers,
                          persistent_workers=workers > 0, drop_last=True)
    return make


def torch_weighted(data, seconds, how, threads=1):
    """Draws/s of torch's weighted sampling over the same 10^6 weights, one pass = 10^6 draws with
    replacement (the cumulative table is rebuilt on every pass, as sluice's alias table is):
      "multinomial"  torch.multinomial(w, n, replacement=True), the ids as one int64 tensor;
      "list"         list(WeightedRandomSampler(w, n)): the sampler consumed in bulk (it calls
                     torch.multinomial, then hands the ids out of .tolist());
      "per-item"     the sampler iterated one index at a time in Python, as a DataLoader's
                     BatchSampler consumes it (an extra: it measures the Python loop as much as
                     the sampling).
    `threads`: torch's intra-op threads for the pass (it reports 1 on the 2-vCPU machines)."""
    import numpy as np
    import torch
    from torch.utils.data import WeightedRandomSampler
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    weights = torch.from_numpy(np.fromfile(os.path.join(data, "weights.f64"), dtype=np.float64))
    n = len(weights)
    draws = 0
    checksum = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if how == "multinomial":
            ids = torch.multinomial(weights, n, replacement=True)
            checksum += int(ids[n // 2])
        elif how == "list":
            ids = list(WeightedRandomSampler(weights, num_samples=n, replacement=True))
            checksum += ids[n // 2]
        else:
            for i in WeightedRandomSampler(weights, num_samples=n, replacement=True):
                checksum += i
        draws += n
    rate = draws / (time.perf_counter() - t0)
    torch.set_num_threads(saved)
    return rate


WEIGHTED_PEERS = {  # loader name: (how, torch intra-op threads)
    "torch.multinomial (bulk)": ("multinomial", 1),
    "torch.multinomial (bulk, 2 threads)": ("multinomial", 2),
    "list(WeightedRandomSampler) (bulk)": ("list", 1),
    "WeightedRandomSampler per item (extra)": ("per-item", 1),
}


# ---------------------------------------------------------------- C++ peers

DALI_NAME = "DALI CPU pipeline"
DALI_RRC_NAME = "DALI CPU pipeline (image_random_crop)"
SPDL_NAME = "SPDL (load_image_batch)"
SPDL_RRC_NAME = "SPDL (demux, crop/scale/flip filter)"
RRC_PIL = "PyTorch DataLoader + PIL + RandomResizedCrop"
RRC_DECODE_JPEG = "PyTorch DataLoader + decode_jpeg + RandomResizedCrop"
SPDL_RAW_NAME = "SPDL (pipeline, memmap gather)"
GRAIN_LOADER = "Grain DataLoader (processes)"
GRAIN_DATASET = "Grain MapDataset (threads)"


class NotBuilt(Exception):
    """The program was built without this mode (exit status 3): reported, not a failure."""


def run_program(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode == 3:
        raise NotBuilt(proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} {argv[1]} exited with {proc.returncode}: {proc.stderr.strip()}")
    out = proc.stdout
    for line in out.splitlines():
        if line.startswith("samples_per_s "):
            return float(line.split()[1])
    raise RuntimeError(f"no samples_per_s in output of {argv}: {out!r}")


def loadavg():
    """The 1-, 5- and 15-minute load averages: the machines are shared, so every run records them."""
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def versions(build):
    import numpy
    import torch
    v = {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__}
    try:
        import torchvision
        v["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    import PIL
    v["pillow"] = PIL.__version__
    try:
        v["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        v["cpu"] = platform.processor()
    v["cores"] = os.cpu_count()
    v["kernel"] = platform.release()
    try:
        import subprocess as sp
        v["g++"] = sp.run(["g++", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="cmake build directory holding the peer programs")
    ap.add_argument("--data", default="/tmp/sluice-peers", help="where the workload files go")
    ap.add_argument("--records", type=int, default=65536)
    ap.add_argument("--jpegs", type=int, default=8192)
    ap.add_argument("--weights", type=int, default=1_000_000)
    ap.add_argument("--rrc-jpegs", type=int, default=1024, help="500x375 JPEGs for the rrc group")
    ap.add_argument("--seconds", type=float, default=3.0, help="measuring time per loader and round")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best is reported")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--only", default="", help="comma list of groups: raw,jpeg,weighted,startup (the default) "
                    "and rrc (ImageNet-size JPEGs, RandomResizedCrop 224 + flip; only when named)")
    ap.add_argument("--dali-python", default="", help="a Python interpreter that imports nvidia.dali "
                    "(e.g. a venv's bin/python): NVIDIA DALI's CPU pipeline is measured in a subprocess "
                    "with it; without it the DALI rows are reported as not measured")
    ap.add_argument("--spdl-python", default="", help="a Python interpreter that imports spdl (e.g. a venv's "
                    "bin/python after `pip install spdl numpy`): Meta's SPDL is measured in a subprocess with it; "
                    "without it the SPDL rows are reported as not measured")
    ap.add_argument("--grain-python", default="", help="a Python interpreter that imports grain (e.g. a venv's "
                    "bin/python after `pip install grain numpy pillow`): Google's Grain is measured in a subprocess "
                    "with it, its DataLoader (worker processes) and its MapDataset (threads); without it the Grain "
                    "rows are reported as not measured")
    ap.add_argument("--cpus", default="", help="comma list of CPU numbers to confine every loader to "
                    "(this process, the peer programs and DataLoader workers inherit it), e.g. 0 for "
                    "an equal-cores comparison on one core; default: every CPU")
    args = ap.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    cores = len(os.sched_getaffinity(0))
    started = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": loadavg()}
    groups = set(args.only.split(",")) if args.only else {"raw", "jpeg", "weighted", "startup"}
    if "rrc" in groups and args.rrc_jpegs < BATCH:  # batches drop the last partial one: none at all
        ap.error(f"--rrc-jpegs {args.rrc_jpegs}: at least one batch ({BATCH}) of images is needed")

    import torch
    bench_dir = os.path.join(args.build, "bench", "peers")
    sluice_prog = os.path.join(bench_dir, "sluice_peers")
    libtorch_prog = os.path.join(bench_dir, "libtorch_peer")
    t_start = time.time()
    make_workload(args.data, args.records, args.jpegs, args.weights)
    d = args.data
    rec, lab = os.path.join(d, "records.u8"), os.path.join(d, "labels.i64")
    pack, offs, jlab = (os.path.join(d, n) for n in ("images.jpgpack", "images.offsets", "images.labels"))
    secs = str(args.seconds)

    # Each entry: (group, name, workers, thunk). Thunks are run round-robin in every round.
    jobs = []
    # Rows that could not be measured on this machine: (group, name, workers) -> why. They are
    # printed and written to the JSON with the reason, never dropped.
    not_measured = {}
    dali, dali_missing = dali_version(args.dali_python) if groups & {"jpeg", "rrc"} else (None, None)
    spdl, spdl_missing = peer_version(args.spdl_python, "SPDL", "spdl.io, importlib.metadata", "--spdl-python",
                                         "importlib.metadata.version('spdl')") \
        if groups & {"raw", "jpeg", "rrc"} else (None, None)
    spdl_prog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spdl_peer.py")
    dali_prog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dali_peer.py")

    grain, grain_missing = peer_version(args.grain_python, "Grain", "grain.python, importlib.metadata",
                                       "--grain-python", "importlib.metadata.version('grain')") \
        if groups & {"raw", "jpeg", "rrc"} else (None, None)
    grain_prog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grain_peer.py")

    def add_grain(group, files):
        """Grain's DataLoader at worker_count 0/1/2 and its MapDataset at 1/2 reader threads."""
        for api, name, settings in (("loader", GRAIN_LOADER, (0, 1, 2)), ("dataset", GRAIN_DATASET, (1, 2))):
            for n in settings:
                if grain:
                    jobs.append((group, name, n, (lambda api=api, n=n: run_program(
                        [args.grain_python, grain_prog, group] + files + [api, str(n), secs, str(BATCH)]))))
                else:
                    not_measured[(group, name, n)] = grain_missing

    def add_dataloaders(group, data, names, rrc=False):
        """The DataLoader over the pack at num_workers 0/1/2, with each JPEG decoder installed."""
        for dec in jpeg_decoders():
            ds = JpegDataset(data, dec, rrc=rrc)
            for w in (0, 1, 2):
                jobs.append((group, names[dec], w, (lambda w=w, ds=ds: time_loader(torch_loader_factory(ds, w), args.seconds))))

    def have(p):
        return os.access(p, os.X_OK)

    if "raw" in groups:
        ds = RecordDataset(d)
        if have(sluice_prog):
            for t in (1, 2):  # threads gathering alternate batches, beside sluice's workers = t
                jobs.append(("raw", "memcpy roofline (mmap + gather)", t,
                             (lambda t=t: run_program([sluice_prog, "roofline", rec, lab, secs, str(t)]))))
        for w in (0, 1, 2):
            jobs.append(("raw", "PyTorch DataLoader", w, (lambda w=w: time_loader(torch_loader_factory(ds, w), args.seconds))))
        if have(libtorch_prog):
            for w in (0, 2):
                jobs.append(("raw", "libtorch data API", w, (lambda w=w: run_program([libtorch_prog, rec, lab, str(w), secs]))))
        add_grain("raw", [rec, lab, str(RECORD_BYTES)])
        for t in (1, 2):  # SPDL's pipeline: gather concurrency and num_threads
            if spdl:
                jobs.append(("raw", SPDL_RAW_NAME, t, (lambda t=t: run_program(
                    [args.spdl_python, spdl_prog, "raw", rec, lab, str(RECORD_BYTES), str(t), secs, str(BATCH)]))))
            else:
                not_measured[("raw", SPDL_RAW_NAME, t)] = spdl_missing
        if have(sluice_prog):
            for w in (0, 1, 2):  # worker threads beside the consumer; 0: each batch filled on the consumer's thread
                jobs.append(("raw", "sluice", w, (lambda w=w: run_program([sluice_prog, "raw", rec, lab, str(w), secs]))))
        module_dir = os.path.join(args.build, "python", "module")
        if os.path.isdir(module_dir):
            for w in (0, 1, 2):  # 0: batches filled in the calling thread, as the DataLoader's num_workers=0
                jobs.append(("raw", "sluice (Python module)", w,
                             (lambda w=w: sluice_module_rate(module_dir, d, w, args.seconds))))
    if "jpeg" in groups:
        add_dataloaders("jpeg", d, {"pil": "PyTorch DataLoader + PIL", "torchvision": "PyTorch DataLoader + decode_jpeg"})
        module_dir = os.path.join(args.build, "python", "module")
        if os.path.isdir(module_dir):
            tar = wds_from_pack(d)
            for w in (0, 1, 2):
                jobs.append(("jpeg", "sluice (Python module)", w,
                             (lambda w=w: sluice_module_image_rate(module_dir, tar, w, args.seconds, size=[64, 64]))))
        for t in (1, 2):  # DALI's num_threads: its CPU operators' thread pool
            if dali:
                filelist = jpeg_files_from_pack(d)
                jobs.append(("jpeg", DALI_NAME, t, (lambda t=t: run_program(
                    [args.dali_python, dali_prog, filelist, str(t), secs, str(BATCH)]))))
            else:
                not_measured[("jpeg", DALI_NAME, t)] = dali_missing
        if dali:  # an extra: without fn.resize + fn.crop (the images are already 64x64)
            for t in (1, 2):
                jobs.append(("jpeg", DALI_NAME + ", decode only (extra)", t, (lambda t=t: run_program(
                    [args.dali_python, dali_prog, filelist, str(t), secs, str(BATCH), "decode-only"]))))
        for t in (1, 2):  # SPDL's pipeline: decode concurrency and num_threads
            if spdl:
                jobs.append(("jpeg", SPDL_NAME, t, (lambda t=t: run_program(
                    [args.spdl_python, spdl_prog, pack, offs, jlab, str(t), secs, str(BATCH)]))))
            else:
                not_measured[("jpeg", SPDL_NAME, t)] = spdl_missing
        if spdl:  # an extra: no resize asked for (the images are already 64x64)
            for t in (1, 2):
                jobs.append(("jpeg", SPDL_NAME + ", decode only (extra)", t, (lambda t=t: run_program(
                    [args.spdl_python, spdl_prog, pack, offs, jlab, str(t), secs, str(BATCH), "decode-only"]))))
        add_grain("jpeg", [pack, offs, jlab])
        if have(sluice_prog):
            for w in (0, 1, 2):  # 0: each batch decoded on the consumer's thread, as num_workers=0
                jobs.append(("jpeg", "sluice (TurboJPEG)", w, (lambda w=w: run_program([sluice_prog, "jpeg", pack, offs, jlab, str(w), secs]))))
    if "rrc" in groups:
        dr = make_rrc_workload(d, args.rrc_jpegs)
        rpack, roffs, rlab = (os.path.join(dr, n) for n in ("images.jpgpack", "images.offsets", "images.labels"))
        add_dataloaders("rrc", dr, {"pil": RRC_PIL, "torchvision": RRC_DECODE_JPEG}, rrc=True)
        module_dir = os.path.join(args.build, "python", "module")
        if os.path.isdir(module_dir):
            rtar = wds_from_pack(dr)
            for w in (0, 1, 2):
                jobs.append(("rrc", "sluice (Python module)", w,
                             (lambda w=w: sluice_module_image_rate(module_dir, rtar, w, args.seconds, size=[224, 224],
                                                                   crop="random_resized", flip=True))))
        for t in (1, 2):  # DALI's num_threads: its CPU operators' thread pool
            if dali:
                rlist = jpeg_files_from_pack(dr)
                jobs.append(("rrc", DALI_RRC_NAME, t, (lambda t=t, rlist=rlist: run_program(
                    [args.dali_python, dali_prog, rlist, str(t), secs, str(BATCH), "rrc"]))))
            else:
                not_measured[("rrc", DALI_RRC_NAME, t)] = dali_missing
        for t in (1, 2):  # SPDL's pipeline: decode concurrency and num_threads
            if spdl:
                jobs.append(("rrc", SPDL_RRC_NAME, t, (lambda t=t: run_program(
                    [args.spdl_python, spdl_prog, "rrc", rpack, roffs, rlab, str(t), secs, str(BATCH)]))))
            else:
                not_measured[("rrc", SPDL_RRC_NAME, t)] = spdl_missing
        add_grain("rrc", [rpack, roffs, rlab])
        if have(sluice_prog):
            for w in (0, 1, 2):
                jobs.append(("rrc", "sluice (TurboJPEG)", w,
                             (lambda w=w: run_program([sluice_prog, "rrc", rpack, roffs, rlab, str(w), secs]))))
    if "weighted" in groups:
        for name, (how, threads) in WEIGHTED_PEERS.items():
            jobs.append(("weighted", name, 0, (lambda how=how, threads=threads: torch_weighted(d, args.seconds, how, threads))))
        if have(sluice_prog):
            jobs.append(("weighted", "sluice weighted (alias)", 0,
                         lambda: run_program([sluice_prog, "weighted", os.path.join(d, "weights.f64"), secs])))

    if "startup" in groups and os.path.isdir(os.path.join(args.build, "python", "module")):
        for kind in FIRST_BATCH:
            jobs.append(("startup", kind, 2, (lambda kind=kind: 1.0 / first_batch_seconds(
                kind, os.path.join(args.build, "python", "module"), d))))

    best = {}
    rounds = {}
    for r in range(args.rounds):
        for group, name, w, thunk in jobs:
            try:
                rate = thunk()
            except NotBuilt as e:
                if r == 0:
                    print(f"# {group} {name} workers={w}: not measured ({e})", file=sys.stderr)
                not_measured[(group, name, w)] = str(e)
                continue
            except Exception as e:  # a peer that fails is reported, not fatal
                print(f"# {group} {name} workers={w}: failed: {e}", file=sys.stderr)
                not_measured.setdefault((group, name, w), f"failed: {e}")
                continue
            key = (group, name, w)
            best[key] = max(best.get(key, 0.0), rate)
            rounds.setdefault(key, []).append(rate)
            print(f"# round {r}: {group:8s} {name:40s} workers={w}  {rate:12.0f}/s", flush=True)

    def is_peer(name):
        return not name.startswith("sluice") and "roofline" not in name and "(extra)" not in name

    def best_of(group, pred, workers=None):
        """(rate, key) of the best row in a group whose loader name satisfies pred."""
        cands = [(v, k) for k, v in best.items()
                 if k[0] == group and pred(k[1]) and (workers is None or k[2] == workers)]
        return max(cands) if cands else (None, None)

    print()
    print(f"{'group':8s} {'loader':40s} {'workers':>7s} {'samples/s':>12s}  rounds")
    results = []
    for (group, name, w), rate in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if group == "startup":
            continue  # reported in seconds below
        each = rounds[(group, name, w)]
        print(f"{group:8s} {name:40s} {w:7d} {rate:12.0f}  " + " / ".join(f"{x:.0f}" for x in each))
        results.append({"group": group, "loader": name, "workers": w, "samples_per_s": rate, "rounds": each})
    for (group, name, w), why in sorted(not_measured.items()):
        if (group, name, w) in best:
            continue  # measured in another round
        print(f"{group:8s} {name:40s} {w:7d} {'-':>12s}  not measured: {why}")
        results.append({"group": group, "loader": name, "workers": w, "samples_per_s": None, "rounds": [],
                        "not_measured": why})

    # Ratios, each of two rows of this run. "Best at any worker count": each loader at its fastest
    # measured setting. Every loader ran confined to the same `cores` CPUs, so that ratio is also the
    # equal-cores one for this core count; --cpus 0 repeats it on one core. Equal worker counts are
    # an extra (a sluice worker is a thread beside the consumer; a PyTorch worker is a process and
    # num_workers = 0 decodes in the consumer).
    summary = []

    def ratio(what, a, b, missing=None):
        if a[0] and b[0]:
            summary.append({"what": what, "sluice": a[0], "sluice_loader": a[1][1], "sluice_workers": a[1][2],
                            "peer": b[0], "peer_loader": b[1][1], "peer_workers": b[1][2], "ratio": a[0] / b[0]})
        elif a[0] and missing:  # the peer side could not be measured: said so, not left out
            summary.append({"what": what, "sluice": a[0], "sluice_loader": a[1][1], "sluice_workers": a[1][2],
                            "peer": None, "ratio": None, "not_measured": missing})

    cxx = (lambda n: n.startswith("sluice") and "Python" not in n)
    module = (lambda n: n == "sluice (Python module)")
    for group in ("raw", "jpeg", "rrc", "weighted"):
        if group not in groups:
            continue  # --only left it out: nothing to compare
        sl = best_of(group, cxx)
        if group == "raw":
            ratio(f"raw: best sluice vs best PyTorch DataLoader (any workers, {cores} cores)", sl,
                  best_of(group, lambda n: n.startswith("PyTorch")))
            ratio(f"raw: best sluice vs best libtorch data API (any workers, {cores} cores)", sl,
                  best_of(group, lambda n: n.startswith("libtorch")))
            grain_gone = grain_missing if grain is None else "Grain: no round succeeded"
            ratio(f"raw: best sluice vs best SPDL pipeline (concurrency 1 or 2, {cores} cores)", sl,
                  best_of(group, lambda n: n == SPDL_RAW_NAME), spdl_missing if spdl is None else "SPDL: no round succeeded")
            ratio(f"raw: best sluice vs best peer of any kind (any setting, {cores} cores)", sl, best_of(group, is_peer))
            ratio(f"raw: best sluice vs best Grain (DataLoader worker processes 0-2 or MapDataset threads 1-2, "
                  f"{cores} cores)", sl, best_of(group, lambda n: n.startswith("Grain")), grain_gone)
            ratio(f"raw: best sluice / memcpy roofline (1 thread)", sl, best_of(group, lambda n: "roofline" in n, 1))
            # Equal threads, each side's median over the rounds, with the roofline's own spread
            # over the rounds beside the ratio: a ratio to a yardstick that moves is read with it.
            for w in (1, 2):
                rk, sk = ("raw", "memcpy roofline (mmap + gather)", w), ("raw", "sluice", w)
                if rk in rounds and sk in rounds:
                    r_med, s_med = statistics.median(rounds[rk]), statistics.median(rounds[sk])
                    summary.append({"what": f"raw: sluice workers={w} / memcpy roofline {w} thread(s), medians of rounds",
                                    "sluice": s_med, "peer": r_med, "ratio": s_med / r_med,
                                    "roofline_spread": (max(rounds[rk]) - min(rounds[rk])) / r_med,
                                    "sluice_spread": (max(rounds[sk]) - min(rounds[sk])) / s_med})
            ratio(f"raw: best sluice from Python vs best PyTorch DataLoader ({cores} cores)", best_of(group, module),
                  best_of(group, lambda n: n.startswith("PyTorch")))
            for w in (1, 2):
                ratio(f"raw: sluice from Python / same pipeline from C++, workers={w}", best_of(group, module, w),
                      best_of(group, lambda n: n == "sluice", w))
        elif group == "rrc":
            ratio(f"rrc: best sluice vs best PyTorch loader (PIL or decode_jpeg + RandomResizedCrop, any workers, "
                  f"{cores} cores)", sl, best_of(group, lambda n: n.startswith("PyTorch")))
            for w in (1, 2):
                ratio(f"rrc (extra, equal worker count): sluice workers={w} vs best PyTorch loader at workers={w}",
                      best_of(group, cxx, w), best_of(group, lambda n: n.startswith("PyTorch"), w))
            ratio(f"rrc: best sluice from Python vs best PyTorch loader ({cores} cores)", best_of(group, module),
                  best_of(group, lambda n: n.startswith("PyTorch")))
            ratio(f"rrc: best sluice vs best Grain (DataLoader worker processes 0-2 or MapDataset threads 1-2, "
                  f"{cores} cores)", sl, best_of(group, lambda n: n.startswith("Grain")),
                  grain_missing if grain is None else "Grain: no round succeeded")
            ratio(f"rrc: best sluice vs best SPDL pipeline (concurrency 1 or 2, {cores} cores)", sl,
                  best_of(group, lambda n: n == SPDL_RRC_NAME), spdl_missing if spdl is None else "SPDL: no round succeeded")
            ratio(f"rrc: best sluice vs best DALI CPU pipeline (num_threads 1 or 2, {cores} cores)", sl,
                  best_of(group, lambda n: n == DALI_RRC_NAME),
                  dali_missing if dali is None else "DALI CPU pipeline: no round succeeded")
            ratio(f"rrc: best sluice vs best peer of any kind (any setting, {cores} cores)", sl, best_of(group, is_peer))
        elif group == "jpeg":
            ratio(f"jpeg: best sluice vs best PyTorch JPEG loader (any decoder, any workers, {cores} cores)", sl,
                  best_of(group, lambda n: n.startswith("PyTorch")))
            for w in (1, 2):
                ratio(f"jpeg (extra, equal worker count): sluice workers={w} vs best PyTorch JPEG loader at workers={w}",
                      best_of(group, cxx, w), best_of(group, lambda n: n.startswith("PyTorch"), w))
            ratio(f"jpeg: best sluice from Python vs best DataLoader + decode_jpeg (any workers, {cores} cores)",
                  best_of(group, module), best_of(group, lambda n: n.endswith("decode_jpeg")))
            ratio(f"jpeg: best sluice from Python vs best PyTorch JPEG loader (any decoder, any workers, {cores} cores)",
                  best_of(group, module), best_of(group, lambda n: n.startswith("PyTorch")))
            # NVIDIA DALI's CPU pipeline, and the goal's peer: the better of DataLoader + decode_jpeg
            # and DALI, each at its best setting, all on the same `cores` CPUs (equal cores).
            dali_peer = (lambda n: n == DALI_NAME)
            vs_best = (lambda n: n.endswith("decode_jpeg") or n == DALI_NAME)
            missing = dali_missing if dali is None else "DALI CPU pipeline: no round succeeded"
            # The best of the two only when DALI was measured: against decode_jpeg alone it is not
            # the goal's comparison, so it is reported as not measured rather than as a ratio.
            dali_ran = best_of(group, dali_peer)[0] is not None
            two = (lambda pick: pick if dali_ran else (None, None))
            ratio(f"jpeg: best sluice vs best DALI CPU pipeline (num_threads 1 or 2, {cores} cores)", sl,
                  best_of(group, dali_peer), missing)
            for w in (1, 2):
                ratio(f"jpeg (extra, equal thread count): sluice workers={w} vs DALI num_threads={w}",
                      best_of(group, cxx, w), best_of(group, dali_peer, w), missing)
            ratio(f"jpeg (extra): best sluice vs best DALI CPU pipeline without resize + crop ({cores} cores)", sl,
                  best_of(group, lambda n: n.startswith(DALI_NAME) and "decode only" in n), missing)
            ratio(f"jpeg: best sluice vs best of DataLoader + decode_jpeg and DALI CPU pipeline (any workers, {cores} cores)",
                  sl, two(best_of(group, vs_best)), missing)
            ratio(f"jpeg: best sluice from Python vs best DALI CPU pipeline ({cores} cores)",
                  best_of(group, module), best_of(group, dali_peer), missing)
            ratio(f"jpeg: best sluice from Python vs best of DataLoader + decode_jpeg and DALI CPU pipeline "
                  f"(any workers, {cores} cores)", best_of(group, module), two(best_of(group, vs_best)), missing)
            # Meta's SPDL, and the Python issue's full peer set: the best of decode_jpeg, DALI and SPDL.
            spdl_peer = (lambda n: n == SPDL_NAME)
            spdl_gone = spdl_missing if spdl is None else "SPDL: no round succeeded"
            spdl_ran = best_of(group, spdl_peer)[0] is not None
            ratio(f"jpeg: best sluice vs best SPDL (concurrency 1 or 2, {cores} cores)", sl, best_of(group, spdl_peer),
                  spdl_gone)
            ratio(f"jpeg: best sluice from Python vs best SPDL ({cores} cores)", best_of(group, module),
                  best_of(group, spdl_peer), spdl_gone)
            ratio(f"jpeg (extra): best sluice vs best SPDL without resize ({cores} cores)", sl,
                  best_of(group, lambda n: n.startswith(SPDL_NAME) and "decode only" in n), spdl_gone)
            grain_gone = grain_missing if grain is None else "Grain: no round succeeded"
            ratio(f"jpeg: best sluice vs best Grain + PIL (DataLoader worker processes 0-2 or MapDataset threads 1-2, "
                  f"{cores} cores)", sl, best_of(group, lambda n: n.startswith("Grain")), grain_gone)
            ratio(f"jpeg: best sluice vs best peer, Grain and SPDL among them where measured (any setting, {cores} cores)",
                  sl, best_of(group, is_peer))
            three = (lambda n: vs_best(n) or spdl_peer(n))
            ratio(f"jpeg: best sluice from Python vs best of DataLoader + decode_jpeg, DALI and SPDL "
                  f"(any workers, {cores} cores)", best_of(group, module),
                  best_of(group, three) if dali_ran and spdl_ran else (None, None),
                  "; ".join(m for m, ran in ((missing, dali_ran), (spdl_gone, spdl_ran)) if not ran))
        else:
            for name in WEIGHTED_PEERS:
                ratio(f"weighted: sluice alias draw_n (build included, 1 thread) vs {name}", sl,
                      best_of(group, lambda n, name=name: n == name))
            ratio("weighted: sluice alias draw_n (1 thread) vs best bulk torch peer at any thread count", sl,
                  best_of(group, lambda n: is_peer(n)))
    print()
    for x in summary:
        if "roofline_spread" in x:
            print(f"{x['what']}: {x['sluice']:.0f}/s vs {x['peer']:.0f}/s -> {x['ratio']:.2f} "
                  f"(spread over rounds: roofline {x['roofline_spread']:.1%}, sluice {x['sluice_spread']:.1%})")
            continue
        if x["ratio"] is None:
            print(f"{x['what']}: {x['sluice']:.0f}/s ({x['sluice_loader']}, workers={x['sluice_workers']}) vs "
                  f"not measured: {x['not_measured']}")
            continue
        print(f"{x['what']}: {x['sluice']:.0f}/s ({x['sluice_loader']}, workers={x['sluice_workers']}) vs "
              f"{x['peer']:.0f}/s ({x['peer_loader']}, workers={x['peer_workers']}) -> {x['ratio']:.2f}")
    st = {k[1]: 1.0 / v for k, v in best.items() if k[0] == "startup"}
    if st:
        print("startup: seconds from interpreter start to the first batch (imports included), best round: " +
              ", ".join(f"{k} {v:.2f} s" for k, v in st.items()))
    v = versions(args.build)
    if dali:
        v["dali"] = dali
    if spdl:
        v["spdl"] = spdl
    if grain:
        v["grain"] = grain
    v["cores_used"] = cores
    v["cpus"] = sorted(os.sched_getaffinity(0))
    v["torch_threads"] = torch.get_num_threads()
    print("\n# " + ", ".join(f"{k} {val}" for k, val in v.items()))
    finished = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": loadavg()}
    print(f"# started {started['utc']} (load {started['loadavg']}), finished {finished['utc']} "
          f"(load {finished['loadavg']}), total {time.time() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join([sys.executable] + sys.argv),
                       "started": started, "finished": finished, "versions": v, "results": results,
                       "summary": summary, "startup_seconds": st, "seconds": args.seconds, "rounds": args.rounds},
                      f, indent=1)


if __name__ == "__main__":
    main()
