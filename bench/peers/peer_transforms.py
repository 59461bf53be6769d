"""The ImageNet training transform's crop, drawn as torchvision draws it, for the peer scripts that
have no RandomResizedCrop of their own (grain_peer.py with PIL, spdl_peer.py with FFmpeg filters)."""


def random_resized_crop_box(rng, w, h, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """The crop torchvision's RandomResizedCrop.get_params draws, as (left, top, right, bottom)."""
    import math
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(*scale)
        r = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = int(round(math.sqrt(target * r))), int(round(math.sqrt(target / r)))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            return x, y, x + cw, y + ch
    r = w / h  # the fallback: the centre crop within the ratio's bounds
    cw, ch = (w, int(round(w / ratio[0]))) if r < ratio[0] else (
        (int(round(h * ratio[1])), h) if r > ratio[1] else (w, h))
    x, y = (w - cw) // 2, (h - ch) // 2
    return x, y, x + cw, y + ch
