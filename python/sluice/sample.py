"""Samplers: the order of an epoch, drawn from (seed, epoch, position) alone.

Every sampler here gives the same batches for any worker count and resumes mid-epoch exactly; a
shuffling one reshuffles each epoch (each ``iter(loader)`` starts the next epoch). The names are
those of C++'s ``sluice::sample``::

    sluice.sample.sequential()                       # 0, 1, 2, ... every epoch
    sluice.sample.shuffle(seed=7)                    # a permutation per (seed, epoch)
    sluice.sample.weighted(weights, seed=7)          # draws with replacement, P(i) ~ weights[i]
    sluice.sample.class_balanced("inverse_frequency", seed=7)   # classes drawn evenly (labels
                                                     # from the source)

A loader splits any of them across ranks (``distributed=True`` or ``rank=``/``world_size=``).
"""
from __future__ import annotations

import operator
from typing import Optional, Sequence

__all__ = ["Sampler", "sequential", "shuffle", "weighted", "class_balanced"]


class Sampler:
    """A sampler's description; make one with the functions of this module."""

    __slots__ = ("kind", "seed", "weights", "rule", "_loaders")

    def __init__(self, kind: str, seed: int = 0, weights: Optional[Sequence[float]] = None,
                 rule: str = "inverse_log") -> None:
        self.kind = kind
        self.seed = seed
        self.weights = weights
        self.rule = rule
        self._loaders: list = []  # weak references to the Loaders given this sampler

    def __getstate__(self):  # pickles and copies as the description alone, without its Loaders
        return (self.kind, self.seed, self.weights, self.rule)

    def __setstate__(self, state) -> None:
        self.kind, self.seed, self.weights, self.rule = state
        self._loaders = []

    def set_epoch(self, epoch: int) -> None:
        """For loops written for DistributedSampler (``loader.sampler.set_epoch(epoch)``): the epoch
        the next iter() of each Loader given this sampler runs, as ``loader.set_epoch(epoch)``.
        Not needed: each iter() starts the next epoch by itself."""
        from . import UsageError
        loaders = [l for l in (r() for r in self._loaders) if l is not None]
        if not loaders:
            raise UsageError(f"{self!r}.set_epoch(): no Loader uses this sampler; the epoch belongs to a "
                             "Loader: give it the sampler (sampler=) and call loader.set_epoch(epoch) (or nothing: each "
                             "iter() starts the next epoch)")
        for l in loaders:
            l.set_epoch(epoch)

    def __repr__(self) -> str:
        extra = ""
        if self.kind == "weighted":
            extra = f", weights=<{len(self.weights)} values>"
        elif self.kind == "class_balanced":
            extra = f", rule={self.rule!r}"
        return f"sluice.sample.{self.kind}(seed={self.seed}{extra})"


def _index(v) -> Optional[int]:
    """``v`` as a Python int where it is an integer (int, numpy.int64, a 0-d integer torch tensor:
    whatever has ``__index__``, as ``range()`` takes), else None (bool, float, str, ...)."""
    if isinstance(v, bool) or type(v).__name__ in ("bool_", "bool"):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _seed(seed: int) -> int:
    from . import UsageError
    i = _index(seed)
    if i is None or i < 0 or i >= 1 << 63:
        raise UsageError(f"sluice.sample: seed={seed!r} is not accepted; use an int >= 0 (and below 2**63)"
                         + (f", not a {type(seed).__name__}" if i is None else ""))
    return i


def sequential() -> Sampler:
    """Positions in file order, the same every epoch (evaluation, or data shuffled offline)."""
    return Sampler("sequential")


def shuffle(seed: int = 0) -> Sampler:
    """A fresh permutation every epoch, a pure function of (seed, epoch): what a DataLoader with
    ``shuffle=True`` does, but reproducible and resumable without saving the permutation."""
    return Sampler("shuffle", _seed(seed))


def weighted(weights: Sequence[float], seed: int = 0) -> Sampler:
    """Draws with replacement, sample ``i`` with probability ``weights[i] / sum(weights)``
    (alias method: O(1) a draw), as many draws an epoch as there are samples: PyTorch's
    ``WeightedRandomSampler(weights, len(weights), replacement=True)``."""
    from . import UsageError
    w = [float(x) for x in weights]
    if not w:
        raise UsageError("sluice.sample.weighted: weights= is empty; give one weight per sample")
    if any(not (x >= 0.0) for x in w) or not any(x > 0.0 for x in w):
        raise UsageError("sluice.sample.weighted: weights must be non-negative, with at least one above 0")
    return Sampler("weighted", _seed(seed), weights=w)


def class_balanced(rule: str = "inverse_log", seed: int = 0) -> Sampler:
    """Draws with replacement so that rare classes come up more often, from the source's labels:
    a class of ``n`` samples is weighted ``1/log(1 + n)`` (``rule="inverse_log"``, gentle) or
    ``1/n`` (``rule="inverse_frequency"``, every class equally likely)."""
    from . import UsageError
    if rule not in ("inverse_log", "inverse_frequency"):
        raise UsageError(f"sluice.sample.class_balanced: rule={rule!r} is not accepted; use 'inverse_log' "
                         "(1/log(1+n)) or 'inverse_frequency' (1/n)")
    return Sampler("class_balanced", _seed(seed), rule=rule)
