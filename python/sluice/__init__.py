"""sluice: C++ data pipelines for PyTorch training loops, zero copy through DLPack.

A source says what the files hold; a Loader runs the pipeline on C++ worker threads (they never
take the GIL) and hands out each batch as a dict of :class:`Tensor` that ``torch.from_dlpack`` and
``numpy.from_dlpack`` take without a copy::

    import sluice, torch
    src = sluice.npy("x.npy", labels="y.npy")                 # rows with the array's dtype and shape
    with sluice.Loader(src, batch_size=256, sampler=sluice.sample.shuffle(seed=7), workers=2) as loader:
        for epoch in range(10):                               # each iteration is the next epoch
            for batch in loader:
                x = torch.from_dlpack(batch["data"]); y = torch.from_dlpack(batch["label"])

Sources (each function's help() lists its keywords; a keyword one does not take is a TypeError
naming the sources that take it):

==================  ===========================================================================
``records``         fixed-size records of a raw file, ``dtype=``/``shape=`` declared
``npy``             an ``.npy`` array, a sample a row, with the array's dtype and shape
``idx``             IDX files (MNIST, Fashion-MNIST, ...), plain or ``.gz``
``shard``           a sluice shard (``sluice-pack``'s output): records as stored, or decoded
``wds``             WebDataset tar shards of images and labels (a path, a brace pattern or a list)
``tfrecord``        TFRecord files of ``tf.train.Example`` images and labels (the same)
``mds``             a MosaicML Streaming (MDS) dataset of images and labels
``coco``            a COCO detection dataset: an image folder and its instances JSON
``yolo``            a YOLO detection dataset: images/ beside labels/ (Ultralytics' layout)
``tokens``          a flat token file: next-token windows ``{"input", "target"}``
``documents``       tokens + document offsets: packed rows or padded documents
==================  ===========================================================================

Image sources take ``decode=sluice.image(size=(h, w), crop=..., flip=..., layout=...)``;
``sluice.wds`` also takes ``boxes=sluice.boxes("boxes.npy", classes="classes.npy")`` for detection:
boxes and their classes that follow the image's crop and flip (or ``boxes=sluice.json_boxes()`` for
annotations in a ``.json`` member, by path).

Any fields: ``sluice.wds``, ``shard``, ``mds``, ``tfrecord`` and ``npy`` take ``fields={name: sluice.field(members, dtype=,
decode=, collate=)}``, a collator a field (``sluice.stack``, ``normalized``, ``ragged``, ``pad``,
``pack``: C++'s collators, the same options and defaults), composed at run time::

    src = sluice.wds("train-{0..3}.tar", fields={
        "image": sluice.field("jpg;png", decode=sluice.image((224, 224)), collate=sluice.normalized(mean=0.5, std=0.25)),
        "label": sluice.field("cls", dtype="int64"),
        "caption": sluice.field("txt", collate=sluice.ragged())})

A field that follows a decoded image (boxes, keypoints, their classes) says so with
``follow=sluice.boxes_of("image")``, ``points_of("image")``, ``rows_of("boxes")`` or ``mask_of("image")``:
it moves with the image's crop, scale and flip (boxes lose the rows the crop drops, a mask is
resampled nearest-neighbour).

How a Loader behaves (as PyTorch's DataLoader and torchdata's StatefulDataLoader do, where their
habits reach):

- ``iter(loader)`` starts the next epoch by itself (reshuffled); ``set_epoch(e)`` names the next one
  (``loader.sampler.set_epoch(e)`` too, as a DistributedSampler loop writes it).
- ``loader.batch_size``, ``drop_last``, ``workers``, ``source`` and ``sampler`` read back what it was
  given; a DataLoader attribute it lacks (``num_workers``, ``dataset``, ``collate_fn``, ...) is an
  AttributeError naming sluice's counterpart.
- ``state_dict()`` / ``load_state_dict()`` resume mid-epoch in this or another process, exactly;
  the usual loop, ``set_epoch`` included, then continues with the remaining batches.
- Batches are the same for any worker count; they depend on (seed, epoch, rank, world) only.
- Keeping batches works (``list(loader)``, evaluation code that keeps outputs): a kept batch keeps
  its slot of the ring, and the ring grows by whole slots for them while the grown slots' bytes stay
  within ``hold_budget=`` (1 GiB by default; ``stats()["slots_grown"]``). Past it, asking for
  another batch is a UsageError naming the budget and how to raise it.
- ``workers=0`` fills each batch in the calling thread when it is asked for, as DataLoader's does.
- ``close()`` or ``with`` joins the workers; Ctrl-C reaches the trainer within about 50 ms.
- Ranks from torchrun, Open MPI, Slurm, PMI or an initialised ``torch.distributed`` process group with
  ``distributed=True``, or ``rank=``/``world_size=``.

Errors: :class:`Error` (a RuntimeError) and its kinds :class:`UsageError` (also ValueError),
:class:`FormatError` (also ValueError: names file, record, field and cause) and :class:`IOError`
(also OSError).
"""
from __future__ import annotations

import difflib
import inspect
import json
import math
import os
import sys
import warnings
import weakref
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _sluice
from ._sluice import Error, FormatError, IOError, LoaderIterator, Tensor, UsageError  # noqa: A004
from . import sample
from .sample import Sampler

__all__ = [
    "Error", "FormatError", "IOError", "UsageError", "Tensor", "Loader", "LoaderIterator", "Source", "Image",
    "Boxes", "Collator", "Field", "Follow", "image", "boxes", "json_boxes", "field", "boxes_of", "points_of", "rows_of", "mask_of",
    "stack", "normalized", "ragged", "pad", "pack",
    "records", "npy", "idx", "shard", "wds", "tfrecord", "mds", "coco", "coco_categories", "yolo", "tokens",
    "documents", "cu_seqlens", "videos",
    "loader", "sample",
]

PathLike = Union[str, "os.PathLike[str]"]
Shards = Union[PathLike, Sequence[PathLike]]  # a path, a brace pattern, or a list of paths

# What a PyTorch user types, and what sluice calls it.
_DATALOADER_WORDS = {
    "num_workers": "workers= (C++ threads; they never take the GIL)",
    "shuffle": "sampler=sluice.sample.shuffle(seed=...)",
    "prefetch_factor": "prefetch= (batches ahead, for all workers together)",
    "collate_fn": "a source's own collate (sluice collates in C++, into the batch's memory)",
    "persistent_workers": "nothing: sluice's workers always persist across epochs",
    "worker_init_fn": "nothing: workers are C++ threads",
    "generator": "the sampler's seed (sluice.sample.shuffle(seed=...))",
    "batch_sampler": "sampler= and batch_size=",
    "timeout": "nothing: errors and Ctrl-C reach the trainer without one",
    "multiprocessing_context": "nothing: workers are C++ threads, never processes",
    "in_order": "nothing: batches always arrive in the sampler's order",
    "pin_memory_device": "nothing: batches are host memory; torch.from_dlpack(...).to(device) copies",
    "dataset": "the source, Loader's first argument: sluice.Loader(source, batch_size=...)",
}


def _param_names(fn) -> Sequence[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("self",)]


def _unknown_keyword(where: str, name: str, valid: Sequence[str]) -> TypeError:
    msg = f"{where}() got an unexpected keyword argument '{name}'"
    close = [] if name in _DATALOADER_WORDS else difflib.get_close_matches(name, valid, n=1)
    if close:
        msg += f"; did you mean '{close[0]}'?"
    homes = [h for h, params in _HOMES.items() if name in params and h != where]
    if homes:
        msg += f" ('{name}' applies to {', '.join(h + '()' for h in homes)})"
    if name in _DATALOADER_WORDS:
        msg += f" (DataLoader's {name}: in sluice, {_DATALOADER_WORDS[name]})"
    return TypeError(msg)


def _check_keywords(where: str, given: Dict[str, Any], valid: Sequence[str]) -> None:
    for k in given:
        if k not in valid:
            raise _unknown_keyword(where, k, valid)


def _usage(msg: str) -> UsageError:
    return UsageError("sluice: " + msg)


def _int(name: str, v: Any, low: int = 0) -> int:
    i = sample._index(v)  # an int, or a NumPy / torch integer (what a config computation gives)
    if i is None or i < low or i >= 1 << 63:
        raise _usage(f"{name}={v!r} is not accepted; use an int >= {low} (and below 2**63)"
                     + (f", not a {type(v).__name__}" if i is None else ""))
    return i


def _path(name: str, v: Any) -> str:
    if isinstance(v, (list, tuple)):
        raise _usage(f"{name}= takes one path, not a {type(v).__name__} (sluice.wds and sluice.tfrecord take "
                     "several shards: a list, or a brace pattern such as 'train-{000000..000127}.tar')")
    if not isinstance(v, (str, os.PathLike)):
        raise _usage(f"{name}={v!r} is not accepted; use a path (str or os.PathLike)")
    path = os.fspath(v)
    # A URL (webdataset's and Streaming's remote shards, or webdataset's "pipe:curl ...") where a
    # file is read: named here, not as a file that does not exist.
    text = path if isinstance(path, str) else os.fsdecode(path)
    scheme = text.split("://", 1)[0] if "://" in text else ""
    url = bool(scheme) and scheme[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in scheme)
    if (url or text.startswith("pipe:")) and not os.path.exists(path):
        raise _usage(f"{name}={text!r} is a {'URL' if url else 'webdataset pipe'}; sluice's Python sources read "
                     "local files, mapped in place: download or mount the data first (C++ reads shards by URL "
                     "through a node disk tier: io::remote_shards, docs/remote.md)")
    return path


def _process_group_rank() -> Optional[Tuple[int, int]]:
    """Loader(distributed=True) without rank=/world_size=: torch.distributed's process group when
    one is initialised (torch.multiprocessing.spawn with init_process_group(rank=, world_size=)
    sets no launcher variables), checked against the launcher's environment; else None, and the
    engine reads the environment (a warning when no launcher set any: every process would be rank
    0 of 1 and read every sample)."""
    env_rank, env_world, launcher, found = _sluice.rank_from_environment()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        r, w = dist.get_rank(), dist.get_world_size()
        if found and (env_rank, env_world) != (r, w):
            raise _usage(f"Loader: distributed=True, but torch.distributed's process group is rank {r} of {w} while "
                         f"the environment ({launcher}) says rank {env_rank} of {env_world}; pass rank= and "
                         "world_size= to say which one splits the data")
        return r, w
    if not found:
        warnings.warn("sluice: distributed=True, but no launcher set this process's rank (torchrun, Open MPI, Slurm, "
                      "PMI) and torch.distributed is not initialised: it reads every sample, as rank 0 of 1. Under "
                      "torch.multiprocessing.spawn, make the Loader after init_process_group, or pass rank= and "
                      "world_size=", stacklevel=4)
    return None


def _shards(v: Any, kind: str) -> Dict[str, Any]:
    """The engine's path= and paths= of a sharded source: one path or brace pattern, or a
    non-empty list of paths (read in the order given)."""
    if isinstance(v, (list, tuple)):
        if not v:
            raise _usage("path=[] is not accepted; use a path, a brace pattern or a non-empty list of paths")
        paths = [_path(f"path[{i}]", p) for i, p in enumerate(v)]
        return dict(path=paths[0], paths=paths)
    path = _path("path", v)
    # A glob or a folder where shards are meant: named here, not as a file that cannot be opened.
    if os.path.isdir(path):
        files = os.path.join(path, "*.tar" if kind == "wds" else "*.tfrecord*")
        raise _usage(f"path={path!r} is a folder; give its shards, e.g. path=sorted(glob.glob({files!r})), "
                     "or a brace pattern")
    if "://" not in path and any(c in path for c in "*?[") and not os.path.exists(path):
        raise _usage(f"path={path!r} is a glob pattern, which sluice does not expand (it expands braces, "
                     f"'train-{{0000..0099}}.tar', as webdataset does); give the files: path=sorted(glob.glob({path!r}))")
    return dict(path=path)


def _floats(name: str, v: Any) -> list:
    if v is None:
        return []
    if isinstance(v, (int, float)):
        return [float(v)]
    try:
        return [float(x) for x in v]
    except TypeError:
        raise _usage(f"{name}={v!r} is not accepted; use a float or a sequence of floats (one per channel)") from None


def _ints(v: Any) -> list:
    """The integers of a sequence, each as range() takes it (None for one that is not: int(2.5) or
    the characters of "28" would give other numbers without a word); [None] for a non-sequence."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        return [None]
    return [sample._index(d) for d in v]


def _shape(v: Any) -> list:
    if v is None:
        return []
    s = _ints(v)
    if not s or any(d is None or d <= 0 for d in s):
        raise _usage(f"shape={tuple(v) if isinstance(v, list) else v!r} is not accepted; use a tuple of positive "
                     "ints (one sample's shape)")
    return s


def _output(v: Any, allowed: Sequence[Optional[str]], where: str) -> str:
    if v not in allowed:
        names = ", ".join(repr(a) for a in allowed if a is not None)
        raise _usage(f"{where}: output={v!r} is not accepted; use {names} or leave it out")
    return v or ""


def _normalise(kw: Dict[str, Any], output: Optional[str], mean: Any, std: Any, where: str,
               channels: Optional[int] = None) -> None:
    """mean=/std=: finite values, std above zero, one value for all channels or one per channel
    (``channels`` where the source knows them: 3 for decoded images). Records check the channel
    count against their per-sample element count when the source is opened."""
    if (mean is not None or std is not None) and output != "float32":
        raise _usage(f"{where}: mean=/std= normalise float32 output; give output='float32' as well")
    m, s = _floats("mean", mean), _floats("std", std)
    for name, vals in (("mean", m), ("std", s)):
        if any(not math.isfinite(x) for x in vals):
            raise _usage(f"{where}: {name}={vals!r} is not accepted; every value must be finite")
    if any(x <= 0 for x in s):
        raise _usage(f"{where}: std={s!r} is not accepted; every value must be above zero")
    # uint8 is scaled to [0, 1] first: 0-255 values (ImageNet's 123.7/58.4, mmcv's std 255) would
    # put every pixel near one value without a word.
    for name, vals, bad in (("mean", m, lambda x: not 0 <= x <= 1), ("std", s, lambda x: x > 1)):
        if any(bad(x) for x in vals):
            raise _usage(f"{where}: {name}={vals!r} is not accepted: sluice scales uint8 pixels to [0, 1] before "
                         "normalising (as ToTensor does before Normalize), so mean= lies in [0, 1] and std= is at "
                         f"most 1; these look like 0-255 values: give {name}={[round(x / 255, 4) for x in vals]!r}")
    if len(m) > 1 and len(s) > 1 and len(m) != len(s):
        raise _usage(f"{where}: mean= has {len(m)} values and std= has {len(s)}; give one per channel for both "
                     "(or one value to apply to every channel)")
    n = max(len(m), len(s))
    if channels is not None and n > 1 and n != channels:
        raise _usage(f"{where}: mean=/std= have {n} values for {channels} channels; give {channels} (one per "
                     "channel) or one for all")
    kw["mean"] = m
    kw["std"] = s


class Image:
    """How an image source decodes: see :func:`image`."""

    __slots__ = ("size", "crop", "flip", "layout")

    def __init__(self, size, crop: str, flip: bool, layout: str) -> None:
        self.size, self.crop, self.flip, self.layout = size, crop, flip, layout

    def __repr__(self) -> str:
        return f"sluice.image(size={self.size}, crop={self.crop!r}, flip={self.flip}, layout={self.layout!r})"


def image(size: Union[int, Tuple[int, int]], *, crop: str = "center", flip: bool = False,
          layout: str = "hwc") -> Image:
    """Decode JPEG (and PNG, by the first bytes) straight into the batch at ``size=(height, width)``
    (one int is a square: ``224`` is ``(224, 224)``, as torchvision's ``RandomResizedCrop(224)``).

    crop:   ``"center"`` (the default): scaled to cover the output, keeping the aspect ratio, then
            the centre cut out: torchvision's ``Resize(min(size)) + CenterCrop(size)`` (ImageNet's
            evaluation ``Resize(256) + CenterCrop(224)``, a wider margin, is C++'s
            ``geometry_options::resize_scale``, not offered here yet); ``"random_resized"``:
            torchvision's RandomResizedCrop (area fraction uniform in [0.08, 1], aspect ratio
            log-uniform in [3/4, 4/3]), drawn from (seed, epoch, sample), so the same every run.
            Resampling is bilinear without antialiasing (JPEGs are first reduced by DCT scaling
            up to 8x): a downscale by more than ~1.5x looks sharper than torchvision's default
            ``antialias=True``, so evaluate with the same loader you trained with.
    flip:   a random horizontal flip (drawn the same way).
    layout: ``"hwc"`` (the default, as C++'s ``codecs::jpeg``) or ``"chw"`` (what torchvision
            models take).
    """
    side = sample._index(size)
    hw = [side, side] if side is not None else _ints(size)  # 224: (224, 224)
    if len(hw) != 2 or None in hw:
        raise _usage(f"sluice.image: size={size!r} is not accepted; use (height, width)")
    h, w = hw
    if h <= 0 or w <= 0:
        raise _usage(f"sluice.image: size={size!r} is not accepted; both must be positive")
    if crop not in ("center", "random_resized"):
        raise _usage(f"sluice.image: crop={crop!r} is not accepted; use 'center' or 'random_resized'")
    if layout not in ("hwc", "chw"):
        raise _usage(f"sluice.image: layout={layout!r} is not accepted; use 'hwc' or 'chw'")
    return Image((h, w), crop, bool(flip), layout)


class Boxes:
    """Boxes that follow a decoded image: see :func:`boxes`."""

    __slots__ = ("field", "classes", "format", "normalized", "min_size", "min_visible", "json")

    def __init__(self, field: str, classes: str, format: str, normalized: bool, min_size: float,
                 min_visible: float) -> None:
        for name, v in (("field", field), ("classes", classes)):
            if not isinstance(v, str) or not v or "/" in v:
                raise _usage(f"sluice.boxes: {name}={v!r} is not accepted; use a member's extension, e.g. 'boxes.npy'")
        if format not in _BOX_FORMATS:
            raise _usage(f"sluice.boxes: format={format!r} is not accepted; {_BOX_FORMAT_WORDS}")
        if not isinstance(normalized, bool):
            raise _usage(f"sluice.boxes: normalized={normalized!r} is not accepted; use True or False")
        try:
            ms, mv = float(min_size), float(min_visible)
        except (TypeError, ValueError):
            raise _usage("sluice.boxes: min_size= and min_visible= take numbers") from None
        if not (math.isfinite(ms) and ms >= 0 and math.isfinite(mv) and 0 <= mv <= 1):
            raise _usage(f"sluice.boxes: min_size={min_size!r}, min_visible={min_visible!r} are not accepted; use "
                         "a finite min_size >= 0 and min_visible in [0, 1]")
        self.field, self.classes, self.format = field, classes, format
        self.normalized, self.min_size, self.min_visible = normalized, ms, mv
        self.json: Optional[Tuple[str, str, str]] = None  # json_boxes: (boxes path, classes path, stored format)

    def __repr__(self) -> str:
        if self.json is not None:
            return (f"sluice.json_boxes({self.field!r}, boxes={self.json[0]!r}, classes={self.json[1]!r}, "
                    f"format={self.json[2]!r}, normalized={self.normalized}, min_size={self.min_size}, "
                    f"min_visible={self.min_visible})")
        return (f"sluice.boxes({self.field!r}, classes={self.classes!r}, format={self.format!r}, "
                f"normalized={self.normalized}, min_size={self.min_size}, min_visible={self.min_visible})")


def boxes(field: str = "boxes.npy", *, classes: str = "classes.npy", format: str = "xyxy", normalized: bool = False,
          min_size: float = 1.0, min_visible: float = 0.0) -> Boxes:
    """Object boxes of a WebDataset sample, for ``sluice.wds(..., boxes=sluice.boxes(...))``.

    field:      the member with the sample's boxes (default ``<key>.boxes.npy``): float32 rows of 4
                (an ``.npy`` of shape ``(n, 4)``, its dtype checked, or raw little-endian float32).
    classes:    the member with one int64 class per box (default ``<key>.classes.npy``).
    format:     ``"xyxy"`` (x0, y0, x1, y1; the default), ``"xywh"`` (x0, y0 the top-left corner,
                then width, height: COCO's) or ``"cxcywh"`` (the centre, then width, height:
                YOLO's); in pixels of the stored image, or fractions of its width and height with
                ``normalized=True``; the batch's boxes come in the same form.
    min_size, min_visible: a box whose clipped side is under ``min_size`` output pixels, or whose
                visible share of its area is under ``min_visible``, is dropped with its class.

    The boxes follow the image's geometry: the same crop (centre or random_resized), scale and
    flip as the pixels, drawn once per sample, so they cannot disagree. Batches hold
    ``"boxes"`` (n, 4) float32 and ``"classes"`` (n,) int64 for all the batch's boxes, with
    ``"boxes.offsets"`` / ``"classes.offsets"`` (B + 1,) int64: sample i's are rows
    ``offsets[i]:offsets[i + 1]`` (C++: ``sluice::boxes<...>`` + ``ragged<...>``).
    """
    return Boxes(field, classes, format, normalized, min_size, min_visible)


def json_boxes(member: str = "json", *, boxes: str = "annotations[*].bbox",
               classes: str = "annotations[*].category_id", format: str = "xywh", normalized: bool = False,
               min_size: float = 1.0, min_visible: float = 0.0) -> Boxes:
    """Object boxes in a JSON member of each WebDataset sample, for
    ``sluice.wds(..., boxes=sluice.json_boxes(...))``: the numbers the path ``boxes`` reaches, rows
    of 4 in the stored convention ``format``, and one class per box at the path ``classes``.

    member:  the JSON member's extension (default ``<key>.json``).
    boxes, classes: paths into it: keys joined by ``.``, ``[*]`` after a key for every element of
             its array (the defaults read COCO-style ``{"annotations": [{"bbox": [x, y, w, h],
             "category_id": 3}, ...]}``; ``"boxes[*]"`` reads ``{"boxes": [[x0, y0, x1, y1], ...]}``).
    format:  how the boxes are stored: ``"xywh"`` (COCO, the default), ``"xyxy"`` or ``"cxcywh"``
             (YOLO); the batch holds them as ``xyxy``, in pixels, or as fractions of the output image
             with ``normalized=True`` (stored as fractions of the image).
    min_size, min_visible: as :func:`boxes`.

    The batch is :func:`boxes`'s: ``"boxes"`` (n, 4) float32, ``"classes"`` (n,) int64 and their
    ``.offsets``. A member that is not valid JSON, a path that is missing, a class that is not an
    integer, a box count that is not a multiple of 4: a ``FormatError`` naming the shard, the sample,
    the member and the path (``errors="skip"`` drops and counts the sample)."""
    if format not in ("xyxy", "xywh", "cxcywh"):
        raise _usage(f"sluice.json_boxes: format={format!r} is not accepted; use 'xywh', 'xyxy' or 'cxcywh'")
    for name, v in (("boxes", boxes), ("classes", classes)):
        if not isinstance(v, str) or not v:
            raise _usage(f"sluice.json_boxes: {name}={v!r} is not accepted; use a path such as 'annotations[*].bbox'")
    b = Boxes(member, member, "xyxy", normalized, min_size, min_visible)
    b.json = (boxes, classes, format)
    return b


class Collator:
    """How one field is collated into the batch: made by :func:`stack`, :func:`normalized`,
    :func:`ragged`, :func:`pad` or :func:`pack` (C++: ``sluice::stack<>`` and the others, the same
    options and defaults)."""

    __slots__ = ("kind", "options")

    def __init__(self, kind: str, options: Dict[str, Any]) -> None:
        self.kind, self.options = kind, options

    def __repr__(self) -> str:
        return f"sluice.{self.kind}({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"


def _dims(name: str, where: str, v: Any) -> list:
    if v is None:
        return []
    dims = _ints(v)
    if None in dims:
        raise _usage(f"{where}: {name}={v!r} is not accepted; use a tuple of positive ints")
    if any(d <= 0 for d in dims):
        raise _usage(f"{where}: {name}={v!r} is not accepted; every dimension must be positive")
    return dims


def stack(*, shape: Optional[Sequence[int]] = None) -> Collator:
    """Fixed-size fields stacked: ``(B, *shape)`` of the field's dtype. ``shape``: the per-sample
    shape; by default the producer's (a decoded image's ``(H, W, C)`` or ``(C, H, W)``), else flat.
    A sample of another size than the batch's first is a FormatError naming it."""
    return Collator("stack", dict(shape=_dims("shape", "sluice.stack", shape)))


def normalized(*, mean=None, std=None, layout: Optional[str] = None) -> Collator:
    """A uint8 image as float32 ``(x / 255 - mean[c]) / std[c]`` per channel (one value, or one per
    channel), in the decoded layout or transposed to ``layout="chw"``/``"hwc"`` in the same pass."""
    kw: Dict[str, Any] = {}
    _normalise(kw, "float32", mean, std, "sluice.normalized")
    if layout not in (None, "chw", "hwc"):
        raise _usage(f"sluice.normalized: layout={layout!r} is not accepted; use 'chw', 'hwc' or None (as decoded)")
    return Collator("normalized", dict(mean=kw.get("mean", []), std=kw.get("std", []), layout=layout or ""))


def ragged(*, row: Optional[Sequence[int]] = None) -> Collator:
    """Variable rows concatenated: ``"f"`` of ``(rows, *row)`` (all the batch's rows) and
    ``"f.offsets"`` ``(B + 1,)`` int64: sample i's rows are ``offsets[i]:offsets[i + 1]``. ``row``:
    the shape of one row, e.g. ``(4,)`` for boxes (default: scalars; bytes of text)."""
    return Collator("ragged", dict(row=_dims("row", "sluice.ragged", row)))


def pad(*, value: float = 0, length: int = 0, multiple: int = 1, mask: bool = False, truncate: bool = False,
        row: Optional[Sequence[int]] = None) -> Collator:
    """Variable rows padded: ``"f"`` ``(B, L, *row)`` and ``"f.lengths"`` ``(B,)`` int64 (and
    ``"f.mask"`` ``(B, L)`` bool with ``mask=True``). ``L``: the batch's longest, or ``length``;
    rounded up to ``multiple``. ``value``: the pad value, in the field's dtype (a value it cannot
    hold is a UsageError). A sequence longer than ``length`` is a FormatError unless ``truncate``."""
    v = float(value)
    if not math.isfinite(v):
        raise _usage(f"sluice.pad: value={value!r} is not accepted; use a finite number")
    return Collator("pad", dict(value=v, length=_int("length", length), multiple=_int("multiple", multiple, 1),
                                mask=bool(mask), truncate=bool(truncate), row=_dims("row", "sluice.pad", row)))


def pack(*, length: int = 2048, split: bool = True, value: float = 0) -> Collator:
    """1-D integer sequences (tokens) packed into rows of ``length``: ``"f"`` ``(rows, length)``
    with ``"f.doc_ids"`` (the sample's index in the batch, -1 on padding), ``"f.position_ids"``
    (restarting per piece) and ``"f.cu_seqlens"`` int32. ``split``: a sequence may continue in the
    next row; else it starts a new one, and one longer than a row is a FormatError."""
    v = float(value)
    if not math.isfinite(v):
        raise _usage(f"sluice.pack: value={value!r} is not accepted; use a finite number")
    return Collator("pack", dict(length=_int("length", length, 1), split=bool(split), value=v))


_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32", "float64",
           "bfloat16", "bool")


class Follow:
    """How a field follows a decoded image: see :func:`boxes_of`, :func:`points_of`, :func:`rows_of`."""

    __slots__ = ("kind", "of", "coordinate", "options")

    def __init__(self, kind: str, of: str, coordinate: int, options: Dict[str, Any]) -> None:
        self.kind, self.of, self.coordinate, self.options = kind, of, coordinate, options

    def __repr__(self) -> str:
        if self.kind == "rows":
            return f"sluice.rows_of({self.of!r})"
        if self.kind == "mask":
            return f"sluice.mask_of({self.of!r}, ignore_index={self.options['ignore_index']!r})"
        names = _COORDINATES[(self.kind, self.options.get("format", "xyxy"))]
        shown = dict(self.options)
        if self.coordinate >= 0:
            shown["coordinate"] = names[self.coordinate]
        return f"sluice.{self.kind}_of({self.of!r}, {', '.join(f'{k}={v!r}' for k, v in shown.items())})"


_BOX_FORMATS = ("xyxy", "xywh", "cxcywh")
_BOX_FORMAT_WORDS = ("use 'xyxy' (corners), 'xywh' (the top-left corner and the size, COCO's) or 'cxcywh' (the "
                     "centre and the size, YOLO's)")
_COORDINATES = {("boxes", "xyxy"): ("x0", "y0", "x1", "y1"), ("boxes", "xywh"): ("x", "y", "w", "h"),
                ("boxes", "cxcywh"): ("cx", "cy", "w", "h"),
                ("points", "xyxy"): ("x", "y")}


def _image_name(where: str, image: Any) -> str:
    if not isinstance(image, str) or not image:
        raise _usage(f"{where}: image={image!r} is not accepted; use the name (a fields= key) of the decoded image")
    return image


def _coordinate(where: str, coordinate: Any, names: Tuple[str, ...]) -> int:
    if coordinate is None:
        return -1
    if coordinate not in names:
        raise _usage(f"{where}: coordinate={coordinate!r} is not accepted; use one of {', '.join(map(repr, names))} "
                     "(the field holds that coordinate of every box) or None (rows of all of them)")
    return names.index(coordinate)


def boxes_of(image: str, *, format: str = "xyxy", normalized: bool = False, min_size: float = 1.0,
             min_visible: float = 0.0, drop_outside: bool = True, coordinate: Optional[str] = None) -> Follow:
    """``sluice.field(..., follow=sluice.boxes_of("image"))``: the field holds boxes that follow
    the decoded field ``image`` (a ``fields=`` key): the same crop, scale and flip, drawn once per
    sample (C++: ``any_boxes``, the run-time ``sluice::boxes<>``).

    format:      ``"xyxy"`` (the default), ``"xywh"`` (top-left corner and size) or ``"cxcywh"``
                 (centre and size), in and out.
    normalized:  coordinates as fractions of the image's width and height (else pixels).
    drop_outside, min_size, min_visible: a box whose clipped side is under ``min_size`` output
                 pixels, or whose visible share of its area is under ``min_visible``, is dropped
                 (with its row of every :func:`rows_of` field); ``drop_outside=False`` keeps every
                 box, clipped.
    coordinate:  None (the default): the field holds rows of 4 (float32 or float64), and collates
                 by default as ``ragged(row=(4,))``. Or one coordinate a field, as the TF Object
                 Detection API stores ``image/object/bbox/xmin`` ... ``ymax``: ``"x0"``, ``"y0"``,
                 ``"x1"``, ``"y1"`` (``"x"``, ``"y"``, ``"w"``, ``"h"`` for xywh; ``"cx"``, ``"cy"``,
                 ``"w"``, ``"h"`` for cxcywh); four fields then
                 name the same image, one coordinate each, and each stays a column (``ragged()``),
                 mapped.
    """
    where = "sluice.boxes_of"
    if format not in _BOX_FORMATS:
        raise _usage(f"{where}: format={format!r} is not accepted; {_BOX_FORMAT_WORDS}")
    try:
        ms, mv = float(min_size), float(min_visible)
    except (TypeError, ValueError):
        raise _usage(f"{where}: min_size= and min_visible= take numbers") from None
    if not (ms >= 0 and math.isfinite(ms)) or not (0 <= mv <= 1):
        raise _usage(f"{where}: min_size={min_size!r}, min_visible={min_visible!r} are not accepted; use "
                     "min_size >= 0 (output pixels) and 0 <= min_visible <= 1")
    return Follow("boxes", _image_name(where, image), _coordinate(where, coordinate, _COORDINATES[("boxes", format)]),
                  dict(format=format, normalized=bool(normalized), min_size=ms, min_visible=mv,
                       drop_outside=bool(drop_outside)))


def points_of(image: str, *, normalized: bool = False, drop_outside: bool = False,
              coordinate: Optional[str] = None) -> Follow:
    """``sluice.field(..., follow=sluice.points_of("image"))``: the field holds points (keypoints)
    that follow the decoded field ``image``: rows of 2 (x, y), float32 or float64, mapped and not
    clipped; ``drop_outside=True`` drops a point that lands outside the output (with its row of
    every :func:`rows_of` field). ``coordinate="x"`` or ``"y"``: one coordinate a field, as for
    :func:`boxes_of`. Collated by default as ``ragged(row=(2,))`` (``ragged()`` for a column)."""
    where = "sluice.points_of"
    return Follow("points", _image_name(where, image), _coordinate(where, coordinate, _COORDINATES[("points", "xyxy")]),
                  dict(normalized=bool(normalized), drop_outside=bool(drop_outside)))


def mask_of(image: str, *, ignore_index: int = 255) -> Follow:
    """``sluice.field("seg.png", follow=sluice.mask_of("image"))``: the field is a PNG of class ids
    (grey or palette indices, the size of the image) that follows the decoded field ``image``:
    decoded and resampled nearest-neighbour through the same crop, scale and flip, so ids are never
    blended; ``ignore_index`` where the crop reaches past the image. Collated by ``stack()`` (the
    default) to ``(B, H, W)`` uint8. A mask of another size than its image is a FormatError naming
    the file, the sample, the field and both sizes. Boxes may follow the same image beside it
    (C++: ``any_mask``, the run-time ``sluice::mask<>``)."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not 0 <= ignore_index <= 255:
        raise _usage(f"sluice.mask_of: ignore_index={ignore_index!r} is not accepted; use a class id of 0..255 "
                     "(a uint8 mask)")
    return Follow("mask", _image_name("sluice.mask_of", image), -1, dict(ignore_index=ignore_index))


def rows_of(field: str) -> Follow:
    """``sluice.field(..., follow=sluice.rows_of("boxes"))``: the field holds one row per box (point)
    of the field ``field`` (a class, a score, a track id: any dtype, any row size) and loses the rows
    of the boxes dropped with the crop. Collated by default as ``ragged()``. Row counts that do not
    match are a FormatError naming the file, the sample and both fields."""
    if not isinstance(field, str) or not field:
        raise _usage(f"sluice.rows_of: field={field!r} is not accepted; use the name (a fields= key) of a field "
                     "that follows an image with boxes_of() or points_of()")
    return Follow("rows", field, -1, {})


class Field:
    """One field of a WebDataset sample: see :func:`field`."""

    __slots__ = ("members", "dtype", "decode", "collate", "follow")

    def __init__(self, members: str, dtype: Optional[str], decode: Optional[Image], collate: Optional[Collator],
                 follow: Optional[Follow] = None) -> None:
        self.members, self.dtype, self.decode, self.collate, self.follow = members, dtype, decode, collate, follow

    def __repr__(self) -> str:
        return (f"sluice.field({self.members!r}, dtype={self.dtype!r}, decode={self.decode!r}, "
                f"collate={self.collate!r}, follow={self.follow!r})")

    def _collator(self) -> Collator:
        """The collator given, else the default: stack(), or ragged() for a field that follows."""
        if self.collate is not None:
            return self.collate
        f = self.follow
        if f is None or f.kind == "mask":
            return stack()
        if f.kind == "rows" or f.coordinate >= 0:
            return ragged()
        return ragged(row=(4,) if f.kind == "boxes" else (2,))

    def _engine(self, name: str) -> Dict[str, Any]:
        col, img, fol = self._collator(), self.decode, self.follow
        c, o = col.options, (fol.options if fol else {})
        return dict(name=name, members=self.members, dtype=self.dtype or "", decode=img is not None,
                    size=list(img.size) if img else [], random_resized_crop=bool(img and img.crop == "random_resized"),
                    flip=bool(img and img.flip), layout=img.layout if img else "hwc", collate=col.kind,
                    shape=c.get("shape", []), row=c.get("row", []), mean=c.get("mean", []), std=c.get("std", []),
                    output_layout=c.get("layout", ""), value=c.get("value", 0.0),
                    length=c.get("length", 0), multiple=c.get("multiple", 1), mask=c.get("mask", False),
                    truncate=c.get("truncate", False), split=c.get("split", True),
                    follow=fol.kind if fol else "", follow_of=fol.of if fol else "",
                    coordinate=fol.coordinate if fol else -1, box_format=o.get("format", "xyxy"),
                    normalized=o.get("normalized", False), min_size=o.get("min_size", 1.0),
                    min_visible=o.get("min_visible", 0.0), drop_outside=o.get("drop_outside", True),
                    ignore_index=o.get("ignore_index", 255))


def field(members: str, *, dtype: Optional[str] = None, decode: Optional[Image] = None,
          collate: Optional[Collator] = None, follow: Optional[Follow] = None) -> Field:
    """A field of ``sluice.wds(path, fields={name: sluice.field(...)})`` (or of ``sluice.shard``,
    ``sluice.mds``, ``sluice.tfrecord``): the batch's ``name``.

    members: the member extensions it takes, ``";"``-separated (``"jpg;png"``, ``"cls"``,
             ``"boxes.npy"``), in any case (webdataset lower-cases a member's extension:
             ``IMG_1.JPG`` is a ``"jpg"``); a sample without one, or with two, is a FormatError
             naming it.
             For ``sluice.shard``: the shard field's name (its dtype and shape as stored); for
             ``sluice.mds``: the column's name (its type as index.json says); for
             ``sluice.tfrecord``: the feature's name (its type the list record 0 holds); for
             ``sluice.npy``: the array's file name in the folder (its dtype and row shape).
    dtype:   the element type. By default an ``.npy`` member's own (read from the first shard's
             first such member, and checked for every member), else ``"uint8"`` (the bytes).
             Stacked (the default), ``.npy`` members keep their shape: ``(B, *shape)``, every
             member of the first one's shape (another is a FormatError naming the shard, the
             sample's key and both shapes); ``ragged()``/``pad()`` flatten each member (``row=``
             gives the rows' shape). A
             non-uint8 field stacked as a fixed value (``stack()``) takes an ASCII number
             (``.cls``) or an ``.npy``; text members (``.json``, ``.txt``) are refused for numbers.
    decode:  ``sluice.image(...)``: the member is a JPEG or PNG decoded straight into the batch.
    collate: :func:`stack` (the default), :func:`normalized`, :func:`ragged`, :func:`pad` or
             :func:`pack`; for a field that follows an image, :func:`ragged` (the default) or
             :func:`pad`.
    follow:  :func:`boxes_of`, :func:`points_of`, :func:`rows_of` or :func:`mask_of`: the field
             moves with a decoded image's crop, scale and flip (detection boxes, keypoints, their
             classes, a segmentation mask)::

                 fields={"image": sluice.field("jpg", decode=sluice.image((512, 512), crop="random_resized", flip=True)),
                         "boxes": sluice.field("boxes.npy", follow=sluice.boxes_of("image")),
                         "classes": sluice.field("classes.npy", follow=sluice.rows_of("boxes"))}
    """
    if not isinstance(members, str) or not members or ":" in members:
        raise _usage(f"sluice.field: members={members!r} is not accepted; use member extensions separated by ';', "
                     "e.g. 'jpg;png' (or a shard field's, an MDS column's or a tf.train.Example feature's name)")
    if dtype is not None and dtype not in _DTYPES:
        near = difflib.get_close_matches(str(dtype), _DTYPES, n=1)
        raise _usage(f"sluice.field({members!r}): dtype={dtype!r} is not accepted; use one of {', '.join(_DTYPES)}"
                     + (f" (did you mean {near[0]!r}?)" if near else ""))
    if decode is not None:
        if not isinstance(decode, Image):
            raise _usage(f"sluice.field({members!r}): decode={decode!r} is not accepted; use sluice.image(size=(h, w), ...)")
        if dtype not in (None, "uint8"):
            raise _usage(f"sluice.field({members!r}): decode= reads encoded bytes; dtype={dtype!r} does not apply")
    if collate is not None and not isinstance(collate, Collator):
        raise _usage(f"sluice.field({members!r}): collate={collate!r} is not accepted; use sluice.stack(), "
                     "sluice.normalized(...), sluice.ragged(...), sluice.pad(...) or sluice.pack(...)")
    if collate is not None and collate.kind == "normalized" and decode is None and dtype not in (None, "uint8"):
        raise _usage(f"sluice.field({members!r}): normalized() takes uint8 images; the field is {dtype}")
    if follow is not None:
        if not isinstance(follow, Follow):
            raise _usage(f"sluice.field({members!r}): follow={follow!r} is not accepted; use sluice.boxes_of(image), "
                         "sluice.points_of(image) or sluice.rows_of(field)")
        if decode is not None:
            raise _usage(f"sluice.field({members!r}): a decoded image does not follow another field; follow= "
                         "goes on the boxes, points and their rows")
        if follow.kind == "mask":
            if collate is not None and collate.kind != "stack":
                raise _usage(f"sluice.field({members!r}): a mask that follows an image is (H, W) uint8 in every "
                             f"sample; collate with sluice.stack() (the default), not sluice.{collate.kind}()")
            if dtype not in (None, "uint8"):
                raise _usage(f"sluice.field({members!r}): a mask is read from a PNG's bytes; dtype={dtype!r} does "
                             "not apply")
        elif collate is not None and collate.kind not in ("ragged", "pad"):
            raise _usage(f"sluice.field({members!r}): a field that follows an image has a row count that varies "
                         f"with the crop; collate with sluice.ragged() (the default) or sluice.pad(), not "
                         f"sluice.{collate.kind}()")
        if follow.kind in ("boxes", "points") and dtype not in (None, "float32", "float64"):
            raise _usage(f"sluice.field({members!r}): {follow.kind} coordinates are float32 or float64; "
                         f"dtype={dtype!r} does not apply")
    return Field(members, dtype, decode, collate, follow)


def _check_follow(kind: str, fields: Dict[str, Field]) -> None:
    """What a fields= dict's follow= say, checked as a whole: each names a field there of the right
    role, and the columns of one image's boxes (points) are each given once, with one set of options."""
    columns: Dict[Tuple[str, str], Dict[int, str]] = {}
    options: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for name, f in fields.items():
        fol = f.follow
        if fol is None:
            continue
        target = fields.get(fol.of)
        if fol.kind == "rows":
            if target is None or target.follow is None or target.follow.kind not in ("boxes", "points"):
                raise _usage(f"sluice.{kind}: fields[{name!r}] follows rows_of({fol.of!r}), which is not a field with "
                             "boxes_of() or points_of() in fields=")
            continue
        if target is None or target.decode is None:
            raise _usage(f"sluice.{kind}: fields[{name!r}] follows {fol.kind}_of({fol.of!r}), which is not a "
                         "decoded image in fields= (a field with decode=sluice.image(...))")
        if fol.coordinate >= 0:
            key = (fol.of, fol.kind)
            got = columns.setdefault(key, {})
            if fol.coordinate in got:
                raise _usage(f"sluice.{kind}: fields[{got[fol.coordinate]!r}] and fields[{name!r}] both hold "
                             f"coordinate {fol.coordinate} of the {fol.kind} of {fol.of!r}")
            got[fol.coordinate] = name
            if options.setdefault(key, fol.options) != fol.options:
                raise _usage(f"sluice.{kind}: the coordinate fields of the {fol.kind} of {fol.of!r} give different "
                             f"options ({options[key]} and {fol.options}); give every one the same")
    for (img, what), got in columns.items():
        need = 4 if what == "boxes" else 2
        if len(got) != need:
            raise _usage(f"sluice.{kind}: the {what} of {img!r} have {len(got)} coordinate fields "
                         f"({', '.join(repr(n) for n in got.values())}); give all {need}, one a coordinate")


class Source:
    """What a loader reads: made by :func:`records`, :func:`npy`, :func:`idx`, :func:`shard`,
    :func:`wds`, :func:`tfrecord`, :func:`mds`, :func:`coco`, :func:`yolo`, :func:`tokens`, :func:`documents` or
    :func:`videos`."""

    __slots__ = ("kind", "engine", "labelled")

    def __init__(self, kind: str, engine: Dict[str, Any], labelled: bool) -> None:
        self.kind = kind
        self.engine = engine      # the engine's keywords (sluice._sluice.loader)
        self.labelled = labelled  # whether class_balanced has labels to draw from

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.engine.items() if k != "source" and v not in ("", [], 0, None)}
        return f"sluice.{self.kind}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def records(path: PathLike, *, record_bytes: int, labels: Optional[PathLike] = None, header_bytes: int = 0,
            dtype: str = "uint8", shape: Optional[Sequence[int]] = None, output: Optional[str] = None,
            mean=None, std=None) -> Source:
    """Fixed-size records of a raw file: record ``i`` is bytes ``[header_bytes + i * record_bytes, ...)``.

    labels: an optional file of one little-endian int64 per record (field ``"label"``).
    dtype, shape: what a record holds (default: ``uint8``, one flat row); batches are
        ``{"data": (B, *shape) of dtype, "label": (B,) int64}``.
    output: ``"float32"`` turns uint8 into float32 scaled by 1/255, then ``(x - mean) / std`` per
        channel; other dtypes arrive as stored (a conversion that would change values is refused).
    """
    kw = dict(source="records", path=_path("path", path), record_bytes=_int("record_bytes", record_bytes, 1),
              labels=_path("labels", labels) if labels is not None else "", header_bytes=_int("header_bytes", header_bytes),
              dtype="" if dtype == "uint8" else str(dtype), shape=_shape(shape),
              output=_output(output, (None, "uint8", "float32", dtype), "sluice.records"))
    _normalise(kw, output, mean, std, "sluice.records")
    return Source("records", kw, labels is not None)


def npy(path: PathLike, *, labels: Optional[PathLike] = None, shape: Optional[Sequence[int]] = None,
        output: Optional[str] = None, mean=None, std=None, fields: Optional[Dict[str, Field]] = None) -> Source:
    """An ``.npy`` array (format 1.0-3.0, C order, little-endian): sample ``i`` is row ``i``, with the
    array's dtype and shape: a ``(N, 3)`` float32 array gives ``"data"`` of ``(B, 3)`` float32, a
    1-D ``(N,)`` array ``(B,)``. An array whose rows hold no elements (``(N, 0)``) is a FormatError
    naming the file when the loader opens it.

    labels: an optional 1-D integer ``.npy`` of the same length (``"label"``, int64).
    shape: another per-sample shape of the same element count.
    output: ``"float32"`` for uint8 arrays (scaled by 1/255, then mean/std); every other dtype
        arrives as the file has it, and asking to convert it is a UsageError naming both types.

    Several arrays of one length: ``path`` is their folder and ``fields={name: sluice.field("x.npy"),
    ...}`` names them, a field's members being its file name there (or an absolute path). Sample
    ``i`` is row ``i`` of each, with each array's dtype and row shape (``stack()`` gives
    ``(B, *row)``); ``dtype=`` given must be the file's. Arrays of different lengths are a
    FormatError naming both files::

        sluice.npy("data", fields={"x": sluice.field("features.npy"), "y": sluice.field("targets.npy")})
    """
    if fields is not None:
        return _fields_source("npy", path, fields, labels=labels, shape=shape, output=output, mean=mean, std=std)
    kw = dict(source="npy", path=_path("path", path), labels=_path("labels", labels) if labels is not None else "",
              shape=_shape(shape), output=output or "")
    _normalise(kw, output, mean, std, "sluice.npy")
    return Source("npy", kw, labels is not None)


def idx(images: PathLike, *, labels: Optional[PathLike] = None, shape: Optional[Sequence[int]] = None,
        output: Optional[str] = None, mean=None, std=None) -> Source:
    """IDX files (the MNIST family), plain or gzip: ``"data"`` of ``(B, *dims)`` as the file's
    dimensions say (uint8 or int8), ``"label"`` from the labels file. ``output="float32"``: scaled
    by 1/255, then mean/std; ``shape=`` another per-sample shape, e.g. ``(1, 28, 28)``."""
    kw = dict(source="idx", images=_path("images", images), labels=_path("labels", labels) if labels is not None else "",
              shape=_shape(shape), output=_output(output, (None, "uint8", "float32"), "sluice.idx"))
    _normalise(kw, output, mean, std, "sluice.idx")
    return Source("idx", kw, labels is not None)


def _image_keywords(kind: str, decode: Optional[Image], output: Optional[str], mean, std, kw: Dict[str, Any]) -> None:
    if decode is None:
        raise _usage(f"sluice.{kind}: decode= is required; e.g. decode=sluice.image(size=(224, 224))")
    if not isinstance(decode, Image):
        raise _usage(f"sluice.{kind}: decode={decode!r} is not accepted; use sluice.image(size=(h, w), ...)")
    kw.update(size=list(decode.size), random_resized_crop=decode.crop == "random_resized", flip=decode.flip,
              layout=decode.layout, output=_output(output, (None, "uint8", "float32"), f"sluice.{kind}"))
    _normalise(kw, output, mean, std, f"sluice.{kind}", channels=3)


def _fields_source(kind: str, path: PathLike, fields: Any, **others: Any) -> Source:
    """The source of ``sluice.<kind>(path, fields=...)``; ``others``: the keywords that do not apply
    with fields= (None where not given)."""
    given = [k for k, v in others.items() if v is not None]
    if given:
        raise _usage(f"sluice.{kind}: fields= names every field, so {', '.join(k + '=' for k in given)} "
                     "does not apply; say it in the field's sluice.field(..., decode=, collate=)")
    if not isinstance(fields, dict) or not fields:
        raise _usage(f"sluice.{kind}: fields={fields!r} is not accepted; use a dict of name: sluice.field(...)")
    engine = []
    for name, f in fields.items():
        if not isinstance(name, str) or not name:
            raise _usage(f"sluice.{kind}: fields= key {name!r} is not accepted; use the batch's name for the field")
        if not isinstance(f, Field):
            raise _usage(f"sluice.{kind}: fields[{name!r}]={f!r} is not accepted; use sluice.field(members, ...)")
        engine.append(f._engine(name))
    _check_follow(kind, fields)
    where = _shards(path, kind) if kind in ("wds", "tfrecord") else dict(path=_path("path", path))
    return Source(kind, dict(source=kind, **where, fields=engine), kind == "shard")


def shard(path: PathLike, *, decode: Optional[Image] = None, image_field: Optional[str] = None,
          label_field: Optional[str] = None, shape: Optional[Sequence[int]] = None, output: Optional[str] = None,
          mean=None, std=None, fields: Optional[Dict[str, Field]] = None) -> Source:
    """A sluice shard (``sluice-pack``'s output). Without ``decode=``: records as stored
    (``"data"``, ``"label"``; ``shape=`` the per-sample shape). With ``decode=sluice.image(...)``:
    encoded images decoded into ``"data"`` (a shard of single records) or, for a shard with fields
    (``sluice-pack --fields``), the field ``image_field=`` (default ``"jpg"``) into ``"image"`` and
    the record's label (or the integer field ``label_field=``) into ``"label"``.

    A shard with fields read without ``decode=`` and ``fields=`` (``sluice-pack npy`` of a
    non-uint8 array: fields ``"data"`` and, packed with ``--labels``, ``"label"``) gives every
    field under its own name with its stored dtype and shape, so the array's rows come back as
    they were; ``output=`` may only name the fields' own dtype (a field ``"label"`` excepted; a
    conversion is a UsageError naming the field and both types), ``shape=``, ``mean=`` and
    ``std=`` are for single records, and a variable field is a UsageError pointing to ``fields=``.

    Any fields of a shard with fields: ``fields={name: sluice.field("jpg", decode=...), ...}``, a
    field's members being the shard field's name; the element types are the shard's, a fixed
    field's shape its stored one (see :func:`field`); the records' labels serve
    ``class_balanced``."""
    if fields is not None:
        return _fields_source("shard", path, fields, decode=decode, image_field=image_field, label_field=label_field,
                              shape=shape, output=output, mean=mean, std=std)
    kw: Dict[str, Any] = dict(source="shard", path=_path("path", path), image_field=image_field or "",
                              label_field=label_field or "")
    if decode is None:
        if image_field is not None or label_field is not None:
            raise _usage("sluice.shard: image_field=/label_field= name the fields an image decode reads; "
                         "give decode=sluice.image(...) as well")
        kw.update(shape=_shape(shape), output=_output(output, (None, "uint8", "float32"), "sluice.shard"))
        _normalise(kw, output, mean, std, "sluice.shard")
    else:
        if shape is not None:
            raise _usage("sluice.shard: shape= is for records as stored; a decoded image's shape is decode=sluice.image's")
        _image_keywords("shard", decode, output, mean, std, kw)
        kw["decode"] = "jpeg"
    return Source("shard", kw, True)


def wds(path: Shards, *, decode: Optional[Image] = None, image_field: Optional[str] = None,
        label_field: Optional[str] = None, boxes: Optional[Boxes] = None, mask: Optional[str] = None,
        ignore_index: int = 255, output: Optional[str] = None, mean=None, std=None,
        fields: Optional[Dict[str, Field]] = None) -> Source:
    """WebDataset shards: a tar path, a brace pattern (``"train-{000000..000127}.tar"``) or a list
    of paths (``sorted(glob.glob("train-*.tar"))``), read in the order given. The tars are read
    uncompressed, in place: a ``.tar.gz`` (or zstd, bzip2, xz) shard is a FormatError saying so.
    ``<key>.<image_field>`` (any extension of the ``;`` list) is decoded into ``"image"``.

    Classification (the default): ``<key>.<label_field>`` (default ``cls``, an integer as text)
    is ``"label"``. Detection: ``boxes=sluice.boxes(...)`` reads each sample's boxes and their
    classes instead, following the image's crop and flip (see :func:`boxes`); no ``"label"``.
    Segmentation: ``mask="seg.png"`` names each sample's mask member, a PNG of class ids (grey, or
    palette indices) the size of the image; it follows the image's crop, scale and flip,
    resampled nearest-neighbour so ids are never blended, ``ignore_index`` where the crop leaves
    the image: ``"mask"`` uint8 ``(B, H, W)``; no ``"label"``.

    Any fields: ``fields={name: sluice.field(members, dtype=, decode=, collate=)}`` names every
    field the batch gets, each with its members, element type, optional image decode and collator
    (see :func:`field`); the keywords above then do not apply::

        sluice.wds("train-{0..3}.tar", fields={
            "image": sluice.field("jpg;png", decode=sluice.image((224, 224), crop="random_resized", flip=True,
                                  layout="chw"), collate=sluice.normalized(mean=MEAN, std=STD)),
            "label": sluice.field("cls", dtype="int64"),
            "caption": sluice.field("txt", collate=sluice.ragged()),
            "emb": sluice.field("emb.npy")})                    # the .npy members' dtype and shape
    """
    if fields is not None:
        return _fields_source("wds", path, fields, decode=decode, image_field=image_field, label_field=label_field,
                              boxes=boxes, mask=mask, output=output, mean=mean, std=std,
                              ignore_index=None if ignore_index == 255 else ignore_index)
    if image_field is None:
        image_field = "jpg;jpeg;png"
    kw: Dict[str, Any] = dict(source="wds", **_shards(path, "wds"), image_field=image_field)
    if mask is not None:
        if not isinstance(mask, str) or not mask:
            raise _usage(f"sluice.wds: mask={mask!r} is not accepted; use the mask member's extension, e.g. 'seg.png'")
        if boxes is not None or label_field is not None:
            raise _usage("sluice.wds: mask= reads a segmentation mask; it does not take boxes= or label_field=")
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not 0 <= ignore_index <= 255:
            raise _usage(f"sluice.wds: ignore_index={ignore_index!r} is not accepted; use a class id of 0..255")
        kw.update(mask=mask, ignore_index=ignore_index)
        _image_keywords("wds", decode, output, mean, std, kw)
        return Source("wds", kw, False)
    if boxes is None:
        kw["label_field"] = "cls" if label_field is None else label_field
    else:
        if not isinstance(boxes, Boxes):
            raise _usage(f"sluice.wds: boxes={boxes!r} is not accepted; use sluice.boxes('boxes.npy', classes=...)")
        if label_field is not None:
            raise _usage("sluice.wds: label_field= names a classification label; with boxes= each box has its "
                         "class (sluice.boxes(classes=...))")
        if boxes.json is not None:
            kw.update(json_boxes=boxes.json[0], json_classes=boxes.json[1], json_format=boxes.json[2])
        kw.update(boxes=boxes.field, classes=boxes.classes, box_format=boxes.format,
                  box_normalized=boxes.normalized, box_min_size=boxes.min_size, box_min_visible=boxes.min_visible)
    _image_keywords("wds", decode, output, mean, std, kw)
    return Source("wds", kw, boxes is None)


def tfrecord(path: Shards, *, decode: Optional[Image] = None, image_field: Optional[str] = None,
             label_field: Optional[str] = None, output: Optional[str] = None, mean=None, std=None,
             fields: Optional[Dict[str, Field]] = None) -> Source:
    """TFRecord files of ``tf.train.Example`` (every record's CRC checked), one path, a brace pattern
    (``"train-{00000..01023}-of-01024"``) or a list of paths, read as one dataset in the order
    given (an error names the file and its record; a compressed file, as
    ``TFRecordOptions(compression_type="GZIP")`` writes it, is a FormatError saying so): the bytes feature
    ``image_field`` (default ``"image/encoded"``) decoded into ``"image"``, the int64 feature
    ``label_field`` (default ``"image/class/label"``) as ``"label"``.

    Any features: ``fields={name: sluice.field("feature/name", ...), ...}``, a field's members
    being the feature's name. Its type is the list record 0 holds (``bytes_list`` uint8,
    ``int64_list`` int64, ``float_list`` float32) unless ``dtype=`` says another the list can be
    written as (a narrower integer, range-checked per value; ``float64``). A field stacked holds
    record 0's count in every record: ``(B,)`` for one value, ``(B, n)`` for n; lists of any length
    take ``ragged()`` or ``pad()``. Detection boxes as the TF Object Detection API stores them follow
    the decoded image one coordinate a feature: ``sluice.field("image/object/bbox/xmin",
    follow=sluice.boxes_of("image", normalized=True, coordinate="x0"))`` and likewise ``ymin``
    (``"y0"``), ``xmax`` (``"x1"``), ``ymax`` (``"y1"``); the labels with
    ``follow=sluice.rows_of("xmin")`` (see :func:`boxes_of`)."""
    if fields is not None:
        return _fields_source("tfrecord", path, fields, decode=decode, image_field=image_field,
                              label_field=label_field, output=output, mean=mean, std=std)
    kw: Dict[str, Any] = dict(source="tfrecord", **_shards(path, "tfrecord"), image_field=image_field or "image/encoded",
                              label_field=label_field or "image/class/label")
    _image_keywords("tfrecord", decode, output, mean, std, kw)
    return Source("tfrecord", kw, True)


def coco(images: PathLike, annotations: PathLike, *, decode: Optional[Image] = None, format: str = "xyxy",
         min_size: float = 1.0, min_visible: float = 0.0, crowd: bool = True, keep_empty: bool = True,
         contiguous: bool = True, segmentation: bool = False, output: Optional[str] = None, mean=None,
         std=None) -> Source:
    """A COCO detection dataset as it is distributed: the image folder ``images`` and its annotation
    file ``annotations`` (``instances_train2017.json``), read without conversion. A sample is an
    entry of the file's ``"images"`` (in the file's order), its image decoded as ``decode=`` says;
    its annotations' boxes, classes and iscrowd flags follow the image's crop and flip (a box left
    with a side under ``min_size`` output pixels, or under ``min_visible`` of its area in view, is
    dropped with its class and flag)::

        {"image": (B, ...), "boxes": (n, 4) float32, "boxes.offsets": (B+1,) int64,
         "classes": (n,) int64, "classes.offsets", "iscrowd": (n,) uint8, "iscrowd.offsets"}

    format:     ``"xyxy"`` (COCO's ``[x, y, w, h]`` converted to corners, output pixels), ``"xywh"``
                (as COCO stores it: the top-left corner and the size) or ``"cxcywh"`` (the centre
                and the size).
    contiguous: class k is the k-th category in id order (COCO's 80 ids of 1..90 become 0..79;
                :func:`coco_categories` lists them); ``False``: the category ids as stored.
    crowd:      ``False`` drops crowd annotations (``iscrowd`` 1).
    keep_empty: ``False`` drops images without annotations (as detection trainers often do).
    segmentation: ``True`` also gives each kept box its instance mask, drawn from the annotation's
                polygons or run-length mask (COCO's list or compressed string) through the image's
                crop and flip: ``"segmentation": (n, H, W) uint8`` (1 inside the object, mask k
                for box k; ``"segmentation.offsets"`` equal to the boxes'). A pixel is inside a
                polygon when its centre is; an annotation without one has an empty mask; a
                run-length mask of another size than its image is a ``FormatError`` naming both.

    A bad annotation file is a ``FormatError`` naming the file and the entry
    (``annotations[17].bbox: a negative width``); images it lists that are missing from the folder
    are one error at construction listing the first of them."""
    if format not in _BOX_FORMATS:
        raise _usage(f"sluice.coco: format={format!r} is not accepted; {_BOX_FORMAT_WORDS}")
    for name, v in (("crowd", crowd), ("keep_empty", keep_empty), ("contiguous", contiguous),
                    ("segmentation", segmentation)):
        if not isinstance(v, bool):
            raise _usage(f"sluice.coco: {name}={v!r} is not accepted; use True or False")
    b = Boxes("boxes", "classes", format, False, min_size, min_visible)
    kw: Dict[str, Any] = dict(source="coco", images=_path("images", images), path=_path("annotations", annotations),
                              box_format=format, box_min_size=b.min_size, box_min_visible=b.min_visible,
                              crowd=crowd, keep_empty=keep_empty, contiguous=contiguous, segmentation=segmentation)
    _image_keywords("coco", decode, output, mean, std, kw)
    return Source("coco", kw, False)


def yolo(images: PathLike, *, decode: Optional[Image] = None, labels: Optional[PathLike] = None, classes: int = 0,
         format: str = "xyxy", min_size: float = 1.0, min_visible: float = 0.0, keep_empty: bool = True,
         polygons: bool = False, output: Optional[str] = None, mean=None, std=None) -> Source:
    """A YOLO detection dataset as Ultralytics lays it out: every ``.jpg``/``.jpeg``/``.png`` under
    ``images`` (sub-folders too, in path order) with its label file, the path's last
    ``/images/`` made ``/labels/`` and its extension ``.txt`` (or the same path below ``labels=``):
    one line ``class cx cy w h`` a box, as fractions of the image. Boxes and classes follow the
    image's crop and flip and arrive as fractions of the output image::

        {"image": (B, ...), "boxes": (n, 4) float32, "boxes.offsets": (B+1,) int64,
         "classes": (n,) int64, "classes.offsets": (B+1,) int64}

    format:     ``"xyxy"`` (x0 y0 x1 y1, converted from cx cy w h), ``"cxcywh"`` (the label files'
                own cx cy w h, as Ultralytics' losses take them) or ``"xywh"`` (x0 y0, the top-left
                corner, then w h: COCO's convention, not YOLO's); fractions of the output image.
    classes:    the class count (data.yaml's ``nc``): a label of a class at or above it is an error.
    keep_empty: ``False`` drops images without boxes (no label file, or an empty one).
    polygons:   ``True`` reads a segmentation dataset's polygon lines as their bounding boxes
                (without it such a line is an error; pose labels are not read).
    min_size, min_visible: as :func:`boxes` (``min_size`` in output pixels).

    Images of other kinds (``.webp``, ``.bmp``, ...) are refused at construction, naming them: none
    is left out silently; so is a folder whose images have not one label file between them (the
    labels lie elsewhere: give ``labels=``), never read as all background. A bad label line is a
    ``FormatError`` naming the file and the line."""
    if format not in _BOX_FORMATS:
        raise _usage(f"sluice.yolo: format={format!r} is not accepted; {_BOX_FORMAT_WORDS}")
    for name, v in (("keep_empty", keep_empty), ("polygons", polygons)):
        if not isinstance(v, bool):
            raise _usage(f"sluice.yolo: {name}={v!r} is not accepted; use True or False")
    b = Boxes("boxes", "classes", format, True, min_size, min_visible)
    kw: Dict[str, Any] = dict(source="yolo", images=_path("images", images),
                              labels=_path("labels", labels) if labels is not None else "",
                              class_count=_int("classes", classes), box_format=format, box_min_size=b.min_size,
                              box_min_visible=b.min_visible, keep_empty=keep_empty, polygons=polygons)
    _image_keywords("yolo", decode, output, mean, std, kw)
    return Source("yolo", kw, False)


def coco_categories(annotations: PathLike) -> list:
    """The categories of a COCO annotation file in class order, as :func:`coco` numbers them with
    ``contiguous=True``: element k is ``(id, name)`` of class k (the categories sorted by id)."""
    with open(_path("annotations", annotations), "rb") as f:
        doc = json.load(f)
    return sorted((int(c["id"]), str(c.get("name", ""))) for c in doc.get("categories", []))


def mds(path: PathLike, *, decode: Optional[Image] = None, image_field: Optional[str] = None,
        label_field: Optional[str] = None, output: Optional[str] = None, mean=None, std=None,
        fields: Optional[Dict[str, Field]] = None) -> Source:
    """A MosaicML Streaming (MDS) dataset as ``MDSWriter`` wrote it (its directory or
    ``index.json``): the column ``image_field`` (default ``"image"``; jpeg, png or bytes) decoded
    into ``"image"``, the int column ``label_field`` (default ``"label"``) as ``"label"``.

    Any columns: ``fields={name: sluice.field("column", ...), ...}``, a field's members being the
    column's name. Each field has its column's type (``int`` int64, ``float32``, ``ndarray:int32``,
    an ``ndarray`` that stores its dtype per sample: the first sample's, checked for every sample;
    ``str``/``bytes``/``json``/``jpeg``/``png`` uint8 bytes); a scalar column stacks to ``(B,)``,
    an ndarray of static shape to ``(B, *shape)``. A ``dtype=`` given must be the column's.

    A ``pil`` column (MDSWriter's raw pixels behind a size and mode header) is no encoded image:
    decoding it (``decode=``) is a UsageError naming the column; write it as ``jpeg`` or ``png``."""
    if fields is not None:
        return _fields_source("mds", path, fields, decode=decode, image_field=image_field, label_field=label_field,
                              output=output, mean=mean, std=std)
    kw: Dict[str, Any] = dict(source="mds", path=_path("path", path), image_field=image_field or "image",
                              label_field=label_field or "label")
    _image_keywords("mds", decode, output, mean, std, kw)
    return Source("mds", kw, True)


def _token_dtype(dtype: str, where: str) -> str:
    if dtype not in ("uint16", "uint32"):
        raise _usage(f"{where}: dtype={dtype!r} is not accepted; use 'uint16' or 'uint32' (the file's token type)")
    return dtype


def tokens(path: PathLike, *, length: int, stride: int = 0, dtype: str = "uint16", vocab: int = 0,
           output: Optional[str] = None) -> Source:
    """A flat token file (as ``numpy.ndarray.tofile`` writes it): windows of ``length`` tokens every
    ``stride`` (default ``length``) as ``{"input", "target"}``, ``target`` shifted by one.
    ``vocab``: every token checked below it. ``output="int64"`` widens the ids while they are
    written (PyTorch before 2.3 has no uint16/uint32 tensors; embeddings take int64)."""
    kw = dict(source="tokens", path=_path("path", path), length=_int("length", length, 1), stride=_int("stride", stride),
              dtype=_token_dtype(dtype, "sluice.tokens"), vocab=_int("vocab", vocab),
              output=_output(output, (None, "int64"), "sluice.tokens"))
    return Source("tokens", kw, False)


def cu_seqlens(rows: Any) -> Tuple[Any, int]:
    """The segments of a batch of ``sluice.documents(..., collate="rows")`` as one sequence, as
    variable-length attention kernels take them (``flash_attn_varlen_func``'s ``cu_seqlens_q``/
    ``cu_seqlens_k`` and ``max_seqlen``): ``rows`` is the batch's ``"cu_seqlens"``
    ``(R, length + 1)`` int32. Returns ``(cu, max_seqlen)``: ``cu`` int32 ``(segments + 1,)``
    from 0 to ``R * length``, each row's boundaries offset by the row's start, the empty segments
    left out; a torch tensor on ``rows``' device when ``rows`` is one, else a NumPy array.
    Rows of ``length = 8``, ``[0, 5, 8, 8, ...]`` and ``[0, 3, 6, 8, ...]``, give ``[0, 5, 8, 11, 14, 16]``
    and 5."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(rows, torch.Tensor):
        t, np = rows, None
    else:
        import numpy as np
        t = rows if isinstance(rows, np.ndarray) else np.from_dlpack(rows)
    if len(t.shape) != 2 or t.shape[1] < 2 or str(t.dtype).split(".")[-1] != "int32":
        raise _usage(f"sluice.cu_seqlens: rows of shape {tuple(t.shape)} and dtype {t.dtype}; it takes a batch's "
                     "\"cu_seqlens\", (R, length + 1) int32")
    n, length = t.shape[0], t.shape[1] - 1
    if n * length > 2**31 - 1:
        raise _usage(f"sluice.cu_seqlens: {n * length} tokens overflow int32 boundaries")
    ends, begins = t[:, 1:], t[:, :-1]
    keep = ends != begins
    if np is None:
        start = (torch.arange(n, device=t.device, dtype=t.dtype) * length).reshape(-1, 1)
        cu = torch.cat([torch.zeros(1, dtype=t.dtype, device=t.device), (ends + start)[keep]])
    else:
        start = (np.arange(n, dtype=t.dtype) * length).reshape(-1, 1)
        cu = np.concatenate([np.zeros(1, dtype=t.dtype), (ends + start)[keep]])
    longest = (ends - begins)[keep]
    return cu, int(longest.max()) if longest.shape[0] else 0


def documents(path: PathLike, *, offsets: PathLike, collate: str = "pack", length: int = 1024, pad_value: float = 0,
              dtype: str = "uint16", vocab: int = 0, output: Optional[str] = None, split: bool = True,
              bins: int = 1) -> Source:
    """Documents of a token file with ``offsets`` (``n_docs + 1`` uint64, document ``d`` is tokens
    ``[offsets[d], offsets[d+1])``). ``collate="pack"``: the batch's documents packed into rows of
    ``length`` tokens, with ``"tokens.doc_ids"`` (the batch's own document numbering),
    ``"tokens.position_ids"`` (restarting at each document and each row) and
    ``"tokens.cu_seqlens"``; the number of rows varies with the documents. ``collate="rows"``: a
    fixed token budget a step for pretraining: every batch is ``batch_size`` rows of ``length``
    tokens (the last one of an epoch may have fewer rows; ``drop_last=True`` drops it), the
    documents streamed in the sampler's order, a document cut at a row's end continuing in the
    next row (and batch); ``"doc_ids"`` int32 (the document's index in the dataset, -1 on padding),
    ``"position_ids"`` int32 (the token's position in its document) and ``"cu_seqlens"`` int32
    ``(batch_size, length + 1)``: where each segment of a row starts (a document's piece or a run
    of padding), then ``length`` repeated (a static shape); :func:`cu_seqlens` joins a batch's rows
    into what variable-length attention kernels take. Deterministic for any
    worker count and resumable with ``state_dict``; under ``distributed`` the ranks split the rows.
    With ``split=False`` documents are kept whole (one longer than ``length`` is a ``FormatError``
    naming it): each goes into the current row or starts the next (``bins=1``), or, with
    ``bins=k``, best-fit into the one of k open rows it fills most closely, which cuts the padding
    from about 20 % to about 1 % (k=8) of a step's tokens on web-like lengths (bench/README.md).
    ``collate="pad"``: one row per document, padded with ``pad_value`` to the longest
    (``length=0``) or cut to ``length``, with ``"tokens.lengths"`` and ``"tokens.mask"``."""
    if collate not in ("pack", "rows", "pad"):
        raise _usage(f"sluice.documents: collate={collate!r} is not accepted; use 'pack', 'rows' or 'pad'")
    if collate != "rows" and (split is not True or bins != 1):
        raise _usage("sluice.documents: split= and bins= shape collate='rows'; collate=" + repr(collate) + " takes neither")
    if not isinstance(split, bool):
        raise _usage(f"sluice.documents: split={split!r} is not accepted; use True or False")
    if bins != 1 and split:
        raise _usage("sluice.documents: bins= packs whole documents; give split=False with it")
    kw = dict(source="documents", path=_path("path", path), offsets=_path("offsets", offsets), collate=collate,
              split=split, bins=_int("bins", bins, 1),
              length=_int("length", length, 1 if collate in ("pack", "rows") else 0), pad_value=float(pad_value),
              dtype=_token_dtype(dtype, "sluice.documents"), vocab=_int("vocab", vocab),
              output=_output(output, (None, "int64"), "sluice.documents"))
    return Source("documents", kw, False)


def videos(paths: Sequence[PathLike], *, labels: Optional[Sequence[int]] = None, decode: Optional[Image] = None,
           frames: int = 16, stride: int = 1, fps: Optional[float] = None, clips: str = "random", per_video: int = 1,
           step: int = 0, output: Optional[str] = None, mean=None, std=None) -> Source:
    """Clips of video files (MP4, MKV, WebM, AVI, ...; decoded with FFmpeg, on sluice's worker threads).

    A clip is ``frames`` frames, every ``stride``-th in presentation order, or with ``fps=`` the
    frames on screen every ``1/fps`` seconds; frames are chosen by their timestamps, so
    variable-frame-rate videos and B-frames give exactly the frames asked for.
    clips:   ``"random"`` (default): ``per_video`` clips of each video an epoch, each start drawn
             from (seed, epoch, clip), a new one every epoch; ``"every"``: every clip of every video,
             a start every ``step`` frames (0: one clip's span, no overlap); the videos are read once
             when the loader is made to count them (a video shorter than a clip has none).
    decode:  ``sluice.image(size=(h, w), crop=, flip=, layout=)``: one crop and flip a clip, applied
             to every frame; ``layout="hwc"`` gives ``"video"`` of ``(B, T, H, W, 3)``, ``"chw"``
             ``(B, 3, T, H, W)`` (what 3-D convolutions take).
    labels:  one integer a video (``"label"``, int64; -1 for every clip without).
    output:  ``"float32"`` scales by 1/255, then ``(x - mean) / std`` per channel.
    Needs a module built with FFmpeg (``pip install .`` on a machine with libavformat-dev,
    libavcodec-dev and libswscale-dev); the prebuilt wheel has no video source (a UsageError says so).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    ps = [_path("paths", p) for p in paths]
    if not ps:
        raise _usage("sluice.videos: paths= is empty; give the video files")
    if labels is not None:
        given, labels = labels, _ints(labels)
        if None in labels:
            raise _usage(f"sluice.videos: labels={given!r} is not accepted; use one int a video")
        if len(labels) != len(ps):
            raise _usage(f"sluice.videos: labels= has {len(labels)} labels for {len(ps)} videos; give one a video")
    if clips not in ("random", "every"):
        raise _usage(f"sluice.videos: clips={clips!r} is not accepted; use 'random' or 'every'")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps < 1e6):
        raise _usage(f"sluice.videos: fps={fps!r} is not accepted; use frames a second above 0, or leave it out")
    kw: Dict[str, Any] = dict(source="video", paths=ps, video_labels=labels or [], clip_frames=_int("frames", frames, 1),
                              clip_stride=_int("stride", stride, 1), clip_fps=float(fps or 0), clips=clips,
                              clips_per_video=_int("per_video", per_video, 1), clip_step=_int("step", step))
    _image_keywords("videos", decode, output, mean, std, kw)
    return Source("videos", kw, labels is not None)


class Loader:
    """A pipeline over a source: iterate it for batches, an epoch each time.

    Loader(source, *, batch_size=256, sampler=sluice.sample.shuffle(), drop_last=False, workers=2,
           prefetch=2, depth="fixed", max_workers=0, ram_budget=0, hold_budget=1 << 30, errors="raise",
           seed=0, distributed=False, rank=None, world_size=None, pin_memory=False)

    batch_size: samples a batch (C++'s collate default, 256). drop_last: drop a final partial batch.
    sampler:    a :mod:`sluice.sample` sampler (default: shuffle with seed 0).
    workers:    C++ worker threads (they never take the GIL); ``0`` starts none: each batch is filled
                in the calling thread when asked for, nothing runs ahead (as DataLoader's
                ``num_workers=0``; for debugging, or where threads are unwelcome). The batches
                are the same for any count. prefetch: batches ready ahead; the ring has
                ``prefetch + workers`` slots of its own (2 with ``workers=0``).
    hold_budget: bytes the batches a trainer keeps may add to the ring (default 1 GiB): each kept
                batch holds its slot, and the ring grows by a slot per kept batch while the grown
                slots (each counted at the largest batch so far) fit in it. Memory is bounded by
                the ring's slots plus this budget; kept batches let go give their grown slots'
                memory back. ``0``: never grows; keeping every slot and asking for more is a
                UsageError.
    depth:      ``"adaptive"`` moves the prefetch depth (up to max(16, prefetch), within
                ``ram_budget`` bytes when non-zero) to hold the stall under 4 %. max_workers above
                workers lets sluice add and remove worker threads. The batches stay the same.
    errors:     ``"raise"`` (a bad record stops the epoch with a FormatError naming it) or
                ``"skip"`` (dropped from its batch, counted in ``stats()["skipped"]``).
    seed:       the augmentation seed (random crops and flips).
    distributed, rank, world_size: split the sampler's order across ranks, from the launcher's
                environment (torchrun, Open MPI, Slurm, PMI) or ``torch.distributed``'s initialised
                process group (``torch.multiprocessing.spawn``) with ``distributed=True``, or given.
    pin_memory: accepted for DataLoader code; this build has no CUDA, so it warns and does nothing.
    """

    def __init__(self, source: Source, *, batch_size: int = 256, sampler: Optional[Sampler] = None,
                 drop_last: bool = False, workers: int = 2, prefetch: int = 2, depth: str = "fixed",
                 max_workers: int = 0, ram_budget: int = 0, hold_budget: int = 1 << 30, errors: str = "raise",
                 seed: int = 0,
                 distributed: bool = False, rank: Optional[int] = None, world_size: Optional[int] = None,
                 pin_memory: bool = False) -> None:
        if not isinstance(source, Source):
            raise _usage(f"Loader: source={source!r} is not a source; make one with sluice.records(...), "
                         "sluice.npy(...), sluice.wds(...), ...")
        kw = dict(source.engine)
        if sampler is None:
            sampler = sample.shuffle()
        if not isinstance(sampler, Sampler):
            raise _usage(f"Loader: sampler={sampler!r} is not accepted; use sluice.sample.sequential(), "
                         "shuffle(seed=), weighted(weights, seed=) or class_balanced(rule, seed=)")
        if sampler.kind == "class_balanced" and not source.labelled:
            raise _usage(f"Loader: sampler=class_balanced needs labels, and sluice.{source.kind}(...) has none"
                         + (" (give labels=)" if source.kind in ("records", "npy", "idx") else ""))
        if errors not in ("raise", "skip"):
            raise _usage(f"Loader: errors={errors!r} is not accepted; use 'raise' or 'skip'")
        if depth not in ("fixed", "adaptive"):
            raise _usage(f"Loader: depth={depth!r} is not accepted; use 'fixed' or 'adaptive'")
        if workers == 0 and not isinstance(workers, bool) and max_workers:
            raise _usage(f"Loader: workers=0 fills each batch in the calling thread, so max_workers={max_workers!r} "
                         "has no threads to tune; give workers>=1 with it")
        if (rank is None) != (world_size is None):
            given, missing = ("rank", "world_size") if rank is not None else ("world_size", "rank")
            raise _usage(f"Loader: {given}= is given but {missing}= is not; give both, or neither with "
                         "distributed=True to read them from the launcher's environment")
        if pin_memory:
            warnings.warn("sluice: pin_memory=True does nothing: this sluice module was built without CUDA "
                          "(batches are in host memory)", stacklevel=3)
        self._rank_given = rank is not None
        if distributed and rank is None:
            rank, world_size = _process_group_rank() or (None, None)
        if rank is not None:
            self._ranks: Optional[Tuple[int, int]] = (rank, world_size)
        elif distributed:
            self._ranks = tuple(_sluice.rank_from_environment()[:2])
        else:
            self._ranks = None
        kw.update(batch_size=_int("batch_size", batch_size, 1), drop_last=bool(drop_last),
                  workers=_int("workers", workers), prefetch=_int("prefetch", prefetch, 1), depth=depth,
                  max_workers=_int("max_workers", max_workers), ram_budget=_int("ram_budget", ram_budget),
                  hold_budget=_int("hold_budget", hold_budget),
                  errors=errors, seed=_int("seed", seed), distributed=bool(distributed) or rank is not None,
                  rank=-1 if rank is None else _int("rank", rank), world_size=-1 if world_size is None
                  else _int("world_size", world_size, 1), sampler=sampler.kind, sampler_seed=sampler.seed)
        if sampler.kind == "weighted":
            kw["sample_weights"] = list(sampler.weights)
        if sampler.kind == "class_balanced":
            kw["weights"] = sampler.rule
        self.source = source
        self.sampler = sampler
        self._engine = _sluice.loader(**kw)
        for note in self._engine.notes:
            warnings.warn(note, stacklevel=3)  # past the keyword check that wraps __init__
        self._keywords = kw
        sampler._loaders = [r for r in sampler._loaders if r() is not None] + [weakref.ref(self)]

    @property
    def batch_size(self) -> int:
        """Samples a batch (the last may hold fewer unless ``drop_last``)."""
        return self._keywords["batch_size"]

    @property
    def drop_last(self) -> bool:
        return self._keywords["drop_last"]

    @property
    def workers(self) -> int:
        """C++ worker threads (DataLoader's ``num_workers``, in threads)."""
        return self._keywords["workers"]

    def __getattr__(self, name: str):
        # Only for names normal lookup did not find: DataLoader's attributes, named in sluice's words.
        hint = _DATALOADER_ATTRIBUTES.get(name) or _DATALOADER_WORDS.get(name)
        if hint is None or name.startswith("_"):
            raise AttributeError(f"'Loader' object has no attribute {name!r}")
        raise AttributeError(f"'Loader' object has no attribute {name!r} (DataLoader's {name}: in sluice, {hint})")

    def __getitem__(self, index: Any):
        # What torch.utils.data.DataLoader(loader) asks first: a Loader is not a dataset.
        raise TypeError("'Loader' object is not subscriptable: a sluice Loader is itself the DataLoader (it batches, "
                        "samples and runs its workers): iterate it (for batch in loader) rather than wrapping it in "
                        "torch.utils.data.DataLoader; its batches are dicts of tensors through DLPack")

    def __iter__(self) -> LoaderIterator:
        """A new iterator over the next epoch (or the resumed one, after load_state_dict)."""
        if not self._rank_given:
            _warn_in_dataloader_worker()
        return iter(self._engine)

    def __len__(self) -> int:
        """Batches in the epoch the loader is at (:attr:`epoch`)."""
        return len(self._engine)

    @property
    def epoch(self) -> int:
        """The epoch of the last iter() until its last batch (also after a ``break``: state_dict()
        resumes it); after that, the one the next iter() starts. iter() without load_state_dict()
        always starts the next epoch."""
        return self._engine.epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iter() runs. Each iter() advances by itself; this is for loops written
        for DistributedSampler. After load_state_dict, only the state's own epoch is accepted."""
        self._engine.set_epoch(_int("epoch", epoch))

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader stands: mid-epoch (also after a ``break`` or an exception left the loop),
        the batches delivered count as consumed; after an epoch, the start of the next. After
        close() (or the end of a ``with`` block) it still answers where the loader stood then, for a
        checkpoint written in a ``finally``. Pickles (bytes and ints) for torch.save / a checkpoint.
        A distributed loader's state also says its ``rank`` and ``world_size``: each rank saves and
        resumes its own."""
        d = self._engine.state_dict()
        if self._ranks is not None:
            d["rank"], d["world_size"] = self._ranks
        return d

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """The next iter() resumes where ``state_dict`` stood (checked against this pipeline at once:
        another dataset, sampler, seed or batch size is a UsageError naming each difference)."""
        if not isinstance(state_dict, dict):
            raise _usage(f"load_state_dict() takes the dict state_dict() returned, not a {type(state_dict).__name__}")
        was = (state_dict.get("rank"), state_dict.get("world_size"))
        if self._ranks is not None and None not in was and tuple(was) != tuple(self._ranks):
            (r, w), (sr, sw) = self._ranks, was
            raise _usage(f"load_state_dict: this state was saved by rank {sr} of {sw}, and this loader is rank {r} "
                         f"of {w}: " + ("each rank resumes from its own state_dict() (save one a rank, e.g. "
                                        "torch.save(loader.state_dict(), f'loader_rank{rank}.pt'))" if sw == w else
                                        "a state resumes on the world size it was saved with"))
        self._engine.load_state_dict(state_dict)

    def stats(self) -> Dict[str, Any]:
        """The pipeline's counters: samples, batches, skipped, stall, per stage busy time, ..."""
        return self._engine.stats()

    def epoch_stats(self, epoch: int) -> Optional[Dict[str, Any]]:
        """One epoch's figures (per stage, stall, bottleneck), or None when no longer kept (16 kept)."""
        return self._engine.epoch_stats(_int("epoch", epoch))

    def advise(self, validation_loss: Optional[Dict[int, float]] = None) -> list:
        """The advisor's recommendations on the kept epochs: ``[{rule, severity, message, value}]``,
        from the loader's own figures: stall, step time and its spread, worker time, the limiting
        stage (rules R1, R2, R3's worker count, R5, R7 of docs/advisor.md). ``validation_loss=
        {epoch: loss}`` is passed on, but the rules that weigh it against class balance and drift
        need C++'s monitors (diag/monitors.hpp), which this module does not run: from Python it
        changes no recommendation today."""
        return self._engine.advise(validation_loss or {})

    def close(self) -> None:
        """Ends the epoch and joins the workers; iterators then end and iter() is a UsageError.
        Batches already taken stay valid; state_dict() still says where the loader stood."""
        self._engine.close()

    @property
    def closed(self) -> bool:
        return self._engine.closed

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"sluice.Loader({self.source!r}, sampler={self.sampler!r})"


def _warn_in_dataloader_worker() -> None:
    """A Loader iterated inside torch's DataLoader workers (an IterableDataset wrapping it, with
    num_workers > 1) is read whole by every worker: each sample arrives num_workers times."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is not None and info.num_workers > 1:
        warnings.warn(f"sluice: this Loader is iterated in DataLoader worker {info.id} of {info.num_workers}, and "
                      f"each worker reads the whole epoch: every sample arrives {info.num_workers} times. Iterate "
                      "the Loader itself (its workers= are threads), or give it rank=info.id, "
                      "world_size=info.num_workers from torch.utils.data.get_worker_info()", stacklevel=3)


# DataLoader attributes a training script reads, where sluice's word for the keyword does not say it.
_DATALOADER_ATTRIBUTES = {
    "num_workers": "loader.workers (C++ threads)",
    "dataset": "loader.source; len(loader) is the batches of an epoch (of this rank), loader.batch_size "
               "the samples a batch",
    "pin_memory": "nothing: batches are host memory; torch.from_dlpack(t).to(device) copies",
}


_SOURCES = {f.__name__: f for f in (records, npy, idx, shard, wds, tfrecord, mds, coco, yolo, tokens, documents)}
_LOADER_KEYWORDS = [p for p in _param_names(Loader.__init__) if p != "source"]
_HOMES: Dict[str, Sequence[str]] = {f"sluice.{n}": _param_names(f) for n, f in _SOURCES.items()}
_HOMES["sluice.Loader"] = _LOADER_KEYWORDS
_HOMES["sluice.image"] = _param_names(image)
_HOMES["sluice.boxes"] = _param_names(boxes)
_HOMES["sluice.json_boxes"] = _param_names(json_boxes)
for _f in (boxes_of, points_of, mask_of, rows_of):
    _HOMES[f"sluice.{_f.__name__}"] = _param_names(_f)


def _checked(fn, where: str):
    valid = _param_names(fn)

    def call(*args, **kwargs):
        _check_keywords(where, kwargs, valid)
        return fn(*args, **kwargs)

    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    call.__signature__ = inspect.signature(fn)
    call.__wrapped__ = fn
    return call


for _n, _f in list(_SOURCES.items()):
    globals()[_n] = _SOURCES[_n] = _checked(_f, f"sluice.{_n}")
image = _checked(image, "sluice.image")
boxes = _checked(boxes, "sluice.boxes")
json_boxes = _checked(json_boxes, "sluice.json_boxes")
field = _checked(field, "sluice.field")
boxes_of = _checked(boxes_of, "sluice.boxes_of")
points_of = _checked(points_of, "sluice.points_of")
mask_of = _checked(mask_of, "sluice.mask_of")
rows_of = _checked(rows_of, "sluice.rows_of")
stack = _checked(stack, "sluice.stack")
normalized = _checked(normalized, "sluice.normalized")
ragged = _checked(ragged, "sluice.ragged")
pad = _checked(pad, "sluice.pad")
pack = _checked(pack, "sluice.pack")
_loader_init = Loader.__init__


def _loader_init_checked(self, source=None, *more, **kwargs):
    if more:
        raise TypeError(f"sluice.Loader() takes the source positionally and its settings by keyword: "
                        f"sluice.Loader(source, batch_size={more[0]!r}, ...) (got {len(more)} more positional "
                        f"argument{'s' if len(more) > 1 else ''})")
    _check_keywords("sluice.Loader", kwargs, _LOADER_KEYWORDS)
    if source is None:
        raise TypeError("sluice.Loader() needs a source as its first argument: sluice.Loader(sluice.npy(...), "
                        "batch_size=...)")
    _loader_init(self, source, **kwargs)


_loader_init_checked.__signature__ = inspect.signature(_loader_init)
_loader_init_checked.__doc__ = _loader_init.__doc__
Loader.__init__ = _loader_init_checked

_IMAGE_WORDS = ("size", "crop", "flip", "layout")


def loader(source: str, **keywords) -> Loader:
    """One call for a source and its loader: ``sluice.loader("npy", path="x.npy", batch_size=256)``
    is ``sluice.Loader(sluice.npy("x.npy"), batch_size=256)``.

    The keywords are those of the source function (``help(sluice.npy)``), of :class:`Loader`, and,
    for image sources, of :func:`image` (``size=``, ``crop=``, ``flip=``, ``layout=``). ``sampler=``
    takes a :mod:`sluice.sample` sampler or its name (``"sequential"``, ``"shuffle"``,
    ``"weighted"`` with ``sample_weights=``, ``"class_balanced"`` with ``weights=`` the rule), its
    seed the loader's ``seed=``. A keyword that applies to neither is a TypeError naming where it
    applies.
    """
    if source not in _SOURCES:
        close = difflib.get_close_matches(str(source), list(_SOURCES), n=1)
        raise _usage(f"loader: source={source!r} is not accepted; use one of {', '.join(map(repr, _SOURCES))}"
                     + (f" (did you mean {close[0]!r}?)" if close else ""))
    fn = _SOURCES[source].__wrapped__
    src_params = _param_names(fn)
    images = source in ("wds", "tfrecord", "mds", "shard")
    valid = list(src_params) + _LOADER_KEYWORDS + (list(_IMAGE_WORDS) if images else []) + ["sample_weights", "weights"]
    _check_keywords(f"sluice.loader('{source}')", keywords, valid)
    src_kw = {k: keywords.pop(k) for k in list(keywords) if k in src_params}
    img_kw = {k: keywords.pop(k) for k in list(keywords) if k in _IMAGE_WORDS}
    if img_kw:
        if "size" not in img_kw:
            raise _usage(f"loader('{source}'): crop=/flip=/layout= decode an image; give size=(h, w) too")
        src_kw["decode"] = image(**img_kw)
    s = keywords.pop("sampler", "shuffle")
    rule = keywords.pop("weights", None)
    sw = keywords.pop("sample_weights", None)
    if isinstance(s, str):
        seed = keywords.get("seed", 0)
        if s == "sequential":
            s = sample.sequential()
        elif s == "shuffle":
            s = sample.shuffle(seed)
        elif s == "weighted":
            if sw is None:
                raise _usage("loader: sampler='weighted' needs sample_weights= (one weight per sample)")
            s = sample.weighted(sw, seed)
            sw = None
        elif s == "class_balanced":
            s = sample.class_balanced(rule or "inverse_log", seed)
            rule = None
        else:
            raise _usage(f"loader: sampler={s!r} is not accepted; use 'sequential', 'shuffle', 'weighted' or "
                         "'class_balanced' (or a sluice.sample sampler)")
    if sw is not None:
        raise TypeError("sluice.loader(): sample_weights= applies to sampler='weighted'")
    if rule is not None:
        raise TypeError("sluice.loader(): weights= (the class weighting rule) applies to sampler='class_balanced'")
    positional = src_params[0]
    if positional not in src_kw:
        raise _usage(f"loader('{source}'): needs {positional}=")
    first = src_kw.pop(positional)
    return Loader(fn(first, **src_kw), sampler=s, **keywords)

