"""NVIDIA DALI's CPU pipeline on the peers' JPEG workload: one measurement, for run.py.

Run by run.py with the interpreter given as --dali-python (DALI lives in its own venv, e.g.
`/usr/bin/python3 -m venv --system-site-packages ENV && ENV/bin/pip install nvidia-dali-cuda130`):
    ENV/bin/python bench/peers/dali_peer.py FILE_LIST NUM_THREADS SECONDS [BATCH [decode-only|rrc]]
prints `samples_per_s <rate>` like the C++ peer programs; exits with status 3 when nvidia.dali
cannot be imported (run.py then reports the rows as not measured).

The pipeline is what a DALI user writes for CPU decoding, built with device_id=None (no GPU):
    fn.readers.file(file_list, shuffle_after_epoch)   one .jpg per image (run.py writes them
                                                     from the pack, with a DALI file list)
    fn.decoders.image(device="cpu", output_type=RGB)  HWC uint8
    fn.resize(size=[64, 64], mode="not_smaller", bilinear, no antialias)
    fn.crop(crop=(64, 64))                            centred
which is sluice's codecs::jpeg{64x64} default fit (crop: scale so the image covers the output,
bilinear, centred window). On the workload's 64x64 JPEGs both are the identity; sluice copies rows
at scale 1, and DALI's resize and crop still run. Each batch is taken as one dense array
(TensorList.as_tensor(), viewed by NumPy without a copy), as a trainer reading the outputs would.
Rate: batch_size samples per pipeline run, over SECONDS after 3 warm-up batches.
"decode-only" leaves out fn.resize and fn.crop (an extra: right only because every image of this
workload is already 64x64; it shows what DALI's resize and crop operators cost).
"rrc" is the ImageNet training transform on run.py's rrc group, as DALI's ResNet-50 examples write it:
    fn.decoders.image_random_crop(device="cpu", output_type=RGB, random_area=[0.08, 1],
                                  random_aspect_ratio=[3/4, 4/3], num_attempts=10)   decodes the crop's
                                                     region only
    fn.resize(size=[224, 224], bilinear, no antialias)
    fn.flip(horizontal=fn.random.coin_flip())
"""

import sys
import time


def main():
    if len(sys.argv) not in (4, 5, 6) or (len(sys.argv) == 6 and sys.argv[5] not in ("decode-only", "rrc")):
        print(__doc__, file=sys.stderr)
        return 2
    file_list, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    batch = int(sys.argv[4]) if len(sys.argv) >= 5 else 256
    resize = len(sys.argv) < 6
    rrc = len(sys.argv) == 6 and sys.argv[5] == "rrc"
    side = 224 if rrc else 64
    try:
        import numpy as np
        from nvidia.dali import fn, pipeline_def, types
    except ImportError as e:
        print(f"DALI not installed ({e})", file=sys.stderr)
        return 3

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=7, prefetch_queue_depth=2)
    def jpeg_pipeline():
        jpegs, labels = fn.readers.file(file_list=file_list, shuffle_after_epoch=True, name="reader")
        if rrc:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
                                                   num_attempts=10)
            images = fn.resize(images, size=[224, 224], interp_type=types.INTERP_LINEAR, antialias=False)
            images = fn.flip(images, horizontal=fn.random.coin_flip())
            return images, labels
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        if resize:
            images = fn.resize(images, size=[64, 64], mode="not_smaller", interp_type=types.INTERP_LINEAR,
                               antialias=False)
            images = fn.crop(images, crop=(64, 64))  # crop_pos_x = crop_pos_y = 0.5: centred
        return images, labels

    pipe = jpeg_pipeline()
    pipe.build()

    def one_batch():
        images, labels = pipe.run()
        x = np.asarray(images.as_tensor())
        y = np.asarray(labels.as_tensor())
        if x.shape[1:] != (side, side, 3) or x.dtype != np.uint8:
            raise RuntimeError(f"unexpected batch {x.shape} {x.dtype}")
        return x.shape[0] + 0 * y.shape[0]

    for _ in range(3):
        one_batch()
    samples = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        samples += one_batch()
    print(f"samples_per_s {samples / (time.perf_counter() - t0):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
