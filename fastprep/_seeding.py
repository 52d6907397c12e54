"""Sample-keyed randomness: the random draws for sample ``i`` in epoch ``e`` depend only on
``(seed, e, i)``.

fastprep's per-sample transforms (and torchvision's) draw from torch's default CPU
generator. In sample-keyed mode the dataset runs each sample's transform with that
generator re-seeded by :func:`sample_key` and restores the generator's previous state
afterwards (:func:`keyed_default_rng`), so

* a sample's crop window and mask are the same whatever worker, rank, engine (DataLoader or
  Ray Data), batch position or resume point produced it, and
* the process's own stream (what a worker would draw without a seed) is left untouched.

The key is a 64-bit hash of the three integers. Each is folded into the state with the
SplitMix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014; constants as in Vigna's ``splitmix64.c``), a bijection on 64-bit words with
full avalanche, so neighbouring indices and epochs give unrelated keys and
``(seed, e, i) != (seed, e', i')`` collide only by chance (probability 2**-64 per pair).
"""

from __future__ import annotations

import contextlib
import numbers

import torch

__all__ = ["sample_key", "keyed_default_rng", "check_seed"]

_MASK64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd: the SplitMix64 increment


def _mix64(z: int) -> int:
    """The SplitMix64 output function: a bijective 64-bit finaliser."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return z ^ (z >> 31)


def check_seed(seed, name: str = "seed"):
    """``None`` or an int in ``[0, 2**64)``; raise ``TypeError``/``ValueError`` otherwise."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an int or None, got {seed!r} ({type(seed).__name__})")
    if not 0 <= int(seed) <= _MASK64:
        raise ValueError(f"{name} must be in [0, 2**64), got {seed}")
    return int(seed)


def sample_key(seed: int, epoch: int, index: int) -> int:
    """The 64-bit generator seed of sample ``index`` in ``epoch`` under ``seed``.

    Args:
        seed: the user's seed, an int in ``[0, 2**64)``.
        epoch: the epoch, an int >= 0.
        index: the sample's index in the dataset, an int >= 0.

    Returns:
        int in ``[0, 2**64)``; a fixed function of the three arguments (the same in every
        process, platform and run).
    """
    h = _mix64((seed + _GOLDEN) & _MASK64)
    h = _mix64((h ^ (epoch & _MASK64)) + _GOLDEN & _MASK64)
    return _mix64((h ^ (index & _MASK64)) + _GOLDEN & _MASK64)


@contextlib.contextmanager
def keyed_default_rng(key: int):
    """Run the body with torch's default CPU generator seeded by ``key``, then restore it.

    Only the CPU default generator is touched (CUDA generators are not: the per-sample
    transforms run on the CPU); the saved state is restored even if the body raises.
    Cost: a state save, a Mersenne Twister seeding and a state restore, a few microseconds
    (``torch.random.fork_rng`` does the same but also visits every CUDA device).
    """
    gen = torch.default_generator
    state = gen.get_state()
    gen.manual_seed(key)
    try:
        yield
    finally:
        gen.set_state(state)
