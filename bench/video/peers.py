"""Video clips beside the peers, in one run: sluice (bench/video's BM_loader) against PyAV in
PyTorch's DataLoader and SPDL, on the same videos and the same work.

The work: 32 clips an epoch (4 a video from the 8 videos sluice_bench_video encodes: 854x480
H.264, 30 fps, 10 s, GOP 60, 2 B-frames), each 16 frames at stride 2 from a random start, to
224x224 RGB uint8, batches of 4. sluice crops (random_resized_crop) and flips; the peers resize
the whole frame in FFmpeg's swscale as they convert it (their cheapest path: no crop, no flip).

  PyAV       av.open on the bytes, seek to the keyframe before the clip, decode forward, each wanted
             frame to_ndarray(rgb24, 224x224); one FFmpeg thread a decode ("equal cores") unless
             said; in a DataLoader with 0, 1 and 2 worker processes
  SPDL       spdl.io.demux_video of the clip's time window, sample_decode_video of the wanted
             frames with a scale filter, convert_frames; clips on a thread pool of 1 and 2 threads

Usage:  python3 bench/video/peers.py --sluice build/dev/bench/video/sluice_bench_video \\
            [--av-python /tmp/venv-av/bin/python] [--spdl-python /tmp/venv-spdl/bin/python] [--rounds 3]
Each peer runs in its own interpreter (the venv that has it); every figure is clips/s, the
median of the rounds, and the best of each peer's settings is compared with sluice at 2 workers
(2 cores) and at 1 worker (1 core).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

VIDEO_DIR = os.environ.get("SLUICE_BENCH_VIDEO_DIR", "/tmp/sluice-bench-video")
N_VIDEOS, PER_VIDEO, T, STRIDE, SIZE, BATCH, FPS, FRAMES = 8, 4, 16, 2, 224, 4, 30, 300

PEER = r'''
import io, os, sys, time, json, random
import numpy as np
VIDEO_DIR, N_VIDEOS, PER_VIDEO, T, STRIDE, SIZE, BATCH, FPS, FRAMES = %r
videos = [open(os.path.join(VIDEO_DIR, "v%%d.mp4" %% v), "rb").read() for v in range(N_VIDEOS)]
last_start = FRAMES - (T - 1) * STRIDE - 1

def clip_of(i, epoch):
    rng = random.Random(epoch * 1000003 + i)
    return i // PER_VIDEO, rng.randint(0, last_start)

def pyav_clip(data, first, threads):
    import av
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        s.codec_context.thread_count = threads
        tb = s.time_base
        start_pts = s.start_time or 0
        want = [start_pts + int(round((first + j * STRIDE) / FPS / tb)) for j in range(T)]
        c.seek(want[0], stream=s, backward=True, any_frame=False)
        out = np.empty((T, SIZE, SIZE, 3), np.uint8)
        j = 0
        for f in c.decode(s):
            if f.pts == want[j]:
                out[j] = f.to_ndarray(format="rgb24", width=SIZE, height=SIZE)
                j += 1
                if j == T:
                    break
        assert j == T, (first, j)
        return out

def run_pyav(workers, threads, rounds):
    import torch
    from torch.utils.data import Dataset, DataLoader
    class Clips(Dataset):
        epoch = 0
        def __len__(self): return N_VIDEOS * PER_VIDEO
        def __getitem__(self, i):
            v, first = clip_of(i, self.epoch)
            return torch.from_numpy(pyav_clip(videos[v], first, threads)), v
    ds = Clips()
    dl = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
    rates = []
    for r in range(rounds + 1):
        ds.epoch = r
        t0 = time.perf_counter(); n = 0
        for x, y in dl: n += x.shape[0]
        if r > 0: rates.append(n / (time.perf_counter() - t0))   # round 0 starts the workers
    return rates

def run_spdl(threads, rounds):
    import spdl.io
    from concurrent.futures import ThreadPoolExecutor
    filt = spdl.io.get_video_filter_desc(scale_width=SIZE, scale_height=SIZE, scale_mode=None, scale_algo="bilinear", pix_fmt="rgb24")
    def one(i, epoch):
        v, first = clip_of(i, epoch)
        t0 = first / FPS
        pk = spdl.io.demux_video(videos[v], timestamp=(t0, t0 + ((T - 1) * STRIDE + 1) / FPS))
        frames = spdl.io.sample_decode_video(pk, list(range(0, (T - 1) * STRIDE + 1, STRIDE)), filter_desc=filt,
                                             decode_config=spdl.io.decode_config(decoder_options={"threads": "1"}))
        a = np.asarray(spdl.io.convert_frames(frames))
        assert a.shape == (T, SIZE, SIZE, 3), a.shape
        return a
    rates = []
    with ThreadPoolExecutor(threads) as ex:
        for r in range(rounds + 1):
            t0 = time.perf_counter(); n = 0
            order = list(range(N_VIDEOS * PER_VIDEO)); random.Random(r).shuffle(order)
            for b in range(0, len(order), BATCH):
                clips = list(ex.map(lambda i: one(i, r), order[b:b + BATCH]))
                n += len(np.stack(clips))
            if r > 0: rates.append(n / (time.perf_counter() - t0))
    return rates

kind, a, b, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rates = run_pyav(a, b, rounds) if kind == "pyav" else run_spdl(a, rounds)
print(json.dumps(rates))
'''


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def peer(python, kind, a, b, rounds, cpus):
    code = PEER % ((VIDEO_DIR, N_VIDEOS, PER_VIDEO, T, STRIDE, SIZE, BATCH, FPS, FRAMES),)
    cmd = ([ "taskset", "-c", cpus] if cpus else []) + [python, "-c", code, kind, str(a), str(b), str(rounds)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def sluice_rates(binary, workers, rounds, cpus):
    cmd = ([ "taskset", "-c", cpus] if cpus else []) + [binary, "--benchmark_filter=BM_loader/%d/" % workers,
           "--benchmark_repetitions=%d" % rounds, "--benchmark_counters_tabular=true", "--benchmark_format=json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    return [b["clips/s"] for b in data["benchmarks"] if b.get("run_type") == "iteration"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--av-python", default="/tmp/venv-av/bin/python")
    ap.add_argument("--spdl-python", default="/tmp/venv-spdl/bin/python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus", default="", help="taskset list for every row, e.g. 0 for one core")
    args = ap.parse_args()
    subprocess.run([args.sluice, "--benchmark_filter=NONE"], check=True, capture_output=True)  # encodes the videos once
    ncpu = len(args.cpus.split(",")) if args.cpus else os.cpu_count()
    rows = []
    for w in ([1] if ncpu == 1 else [1, 2]):
        rows.append(("sluice", "%d worker%s" % (w, "s" if w > 1 else ""), sluice_rates(args.sluice, w, args.rounds, args.cpus), None))
    for workers in (0, 1, 2):
        r, err = peer(args.av_python, "pyav", workers, 1, args.rounds, args.cpus)
        rows.append(("PyAV + DataLoader", "%d workers, 1 FFmpeg thread" % workers, r, err))
    r, err = peer(args.av_python, "pyav", 0, 0, args.rounds, args.cpus)
    rows.append(("PyAV + DataLoader", "0 workers, FFmpeg's own threads (auto)", r, err))
    for threads in ([1] if ncpu == 1 else [1, 2]):
        r, err = peer(args.spdl_python, "spdl", threads, 0, args.rounds, args.cpus)
        rows.append(("SPDL", "%d thread%s" % (threads, "s" if threads > 1 else ""), r, err))
    best_sluice = max(median(r) for name, _, r, _ in rows if name == "sluice")
    best_peer = max((median(r), name, how) for name, how, r, err in rows if name != "sluice" and r)
    print("clips/s, median of %d rounds (cpus: %s)" % (args.rounds, args.cpus or "all %d" % ncpu))
    for name, how, r, err in rows:
        if r is None:
            print("  %-20s %-42s failed: %s" % (name, how, err))
        else:
            print("  %-20s %-42s %7.2f   (%s)" % (name, how, median(r), ", ".join("%.2f" % x for x in r)))
    print("sluice best %.2f / best peer %.2f (%s, %s) = %.2fx" % (best_sluice, best_peer[0], best_peer[1], best_peer[2],
                                                                best_sluice / best_peer[0]))


if __name__ == "__main__":
    main()
