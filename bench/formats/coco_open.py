#!/usr/bin/python3
"""What opening a COCO annotation file costs: time and peak memory of sluice.coco (without and with
segmentation=True) against json.load of the same file (what pycocotools' COCO() does first), each
in its own process, on a synthetic file shaped like instances_train2017.json: 7.3 annotations an
image, each a polygon of 24 vertices written as json.dump writes Python floats.

    PYTHONPATH=build/dev/python/module python3 bench/formats/coco_open.py [--images 20000] [--repeat 3]

Prints one line per reader: median seconds, peak RSS above the process's RSS before the open (MB),
and both as ratios to json.load's. The images are 1x1 PNGs (sluice checks they exist at open).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, json
mode, ann, images = sys.argv[1:4]
if mode != "json":
    import sluice
def rss(key):  # kB
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from here
before = rss("VmRSS:")
t0 = time.perf_counter()
if mode == "json":
    doc = json.load(open(ann))
    n = len(doc["annotations"])
else:
    src = sluice.coco(images, ann, decode=sluice.image((64, 64)), segmentation=(mode == "sluice+segmentation"))
    loader = sluice.Loader(src, batch_size=1, workers=1)
    n = len(loader)
dt = time.perf_counter() - t0
peak = rss("VmHWM:")
print(dt, (peak - before) / 1024, n)
"""


def write(root, images):
    import random
    rng = random.Random(3)
    os.mkdir(os.path.join(root, "img"))
    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010800000000"
                        "3a7e9b550000000a49444154789c6360000000020001e221bc330000000049454e44ae426082")
    ims, anns = [], []
    for i in range(images):
        name = f"{i:012d}.png"
        with open(os.path.join(root, "img", name), "wb") as f:
            f.write(png)
        ims.append({"id": i, "file_name": name, "width": 640, "height": 480})
        for _ in range(7 if i % 10 < 7 else 8):
            x, y = rng.uniform(0, 500), rng.uniform(0, 400)
            poly = [v for k in range(24) for v in (x + rng.uniform(0, 100), y + rng.uniform(0, 80))]
            anns.append({"id": len(anns), "image_id": i, "category_id": rng.randint(1, 80), "iscrowd": 0,
                         "area": rng.uniform(10, 5000), "bbox": [x, y, 100.0, 80.0], "segmentation": [poly]})
    path = os.path.join(root, "instances.json")
    with open(path, "w") as f:
        json.dump({"images": ims, "annotations": anns,
                   "categories": [{"id": k, "name": f"c{k}"} for k in range(1, 81)]}, f)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        path = write(root, a.images)
        mb = os.path.getsize(path) / 2**20
        print(f"coco_open: {a.images} images, file {mb:.1f} MB")
        rows = {}
        for mode in ("json", "sluice", "sluice+segmentation"):
            runs = []
            for _ in range(a.repeat):
                out = subprocess.run([sys.executable, "-c", CHILD, mode, path, os.path.join(root, "img")],
                                     check=True, capture_output=True, text=True).stdout.split()
                runs.append((float(out[0]), float(out[1])))
            runs.sort()
            rows[mode] = runs[len(runs) // 2]
        js, jm = rows["json"]
        label = {"json": "json.load (pycocotools' COCO() first step)", "sluice": "sluice.coco",
                 "sluice+segmentation": "sluice.coco(segmentation=True)"}
        for mode, (s, m) in rows.items():
            print(f"  {label[mode]:44s} {s:7.2f} s ({s / js:4.2f}x json.load)  peak +{m:7.0f} MB "
                  f"({m / jm:4.2f}x json.load, {m / mb:4.2f}x the file)")


if __name__ == "__main__":
    main()
