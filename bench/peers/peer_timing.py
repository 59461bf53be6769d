"""The timing loop the peer scripts share (grain_peer.py, spdl_peer.py): samples a second."""

import time


def rate_of(it, seconds, check=None, warmup=3):
    """Samples a second drawn from iterator `it` of (x, y) batches over `seconds`, after `warmup`
    batches (worker start-up excluded); `check(x, y)` may raise on a batch of the wrong shape."""
    for _ in range(warmup):
        next(it)
    samples = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        x, y = next(it)
        if check is not None:
            check(x, y)
        samples += x.shape[0]
    return samples / (time.perf_counter() - t0)
