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

Two more things are keyed the same way, each with its own domain constant folded in after
the three integers (so they never reuse a sample's key except by chance): the sample order
of an epoch (:func:`epoch_permutation`) and the worker seeds of an unseeded epoch.

Threads: :func:`keyed_default_rng` re-seeds the process-wide default generator, which is
only safe where no other thread draws from it at the same time (a DataLoader worker
process, or the thread that owns the training loop). :func:`keyed_thread_rng` gives the
same draws without touching it: inside the block, the torch random functions called *in
this thread* draw from a private generator seeded by the key.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from ._checks import is_int

__all__ = ["sample_key", "sample_keys", "derived_key", "key_derived", "keyed_sample_rng", "RngBusy",
           "RNG_LOCK_TIMEOUT_S", "epoch_permutation", "keyed_default_rng", "keyed_thread_rng", "sample_rng",
           "check_seed", "draw_seed",
           "ORDER_DOMAIN", "WORKERS_DOMAIN", "PYTHON_RANDOM_DOMAIN", "NUMPY_DOMAIN"]

_MASK64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd: the SplitMix64 increment


def _mix64(z: int) -> int:
    """The SplitMix64 output function: a bijective 64-bit finaliser."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return z ^ (z >> 31)


def check_seed(seed: Any, name: str = "seed"):
    """``None`` or an int in ``[0, 2**64)``; raise ``TypeError``/``ValueError`` otherwise."""
    if seed is None:
        return None
    if not is_int(seed):
        raise TypeError(f"{name} must be an int or None, got {seed!r} ({type(seed).__name__})")
    if not 0 <= int(seed) <= _MASK64:
        raise ValueError(f"{name} must be in [0, 2**64), got {seed}")
    return int(seed)


def draw_seed(generator: torch.Generator | None, seed: int | None) -> np.uint64:
    """The seed of one random kernel call: ``seed`` (any int, taken modulo 2**64) when
    given, else one 63-bit draw from ``generator`` (torch's default generator when ``None``).
    """
    if seed is not None:
        if not is_int(seed):
            raise TypeError(f"seed must be an int, got {seed!r} ({type(seed).__name__})")
        return np.uint64(int(seed) & _MASK64)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return np.uint64(int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64, generator=generator)))


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
    return sample_keys(seed, epoch, (index,))[0]


def sample_keys(seed: int, epoch: int, indices) -> list[int]:
    """:func:`sample_key` of each of ``indices`` (the epoch's part computed once)."""
    h = _mix64((seed + _GOLDEN) & _MASK64)
    h = _mix64((h ^ (epoch & _MASK64)) + _GOLDEN & _MASK64)
    return [_mix64((h ^ (index & _MASK64)) + _GOLDEN & _MASK64) for index in indices]


#: :func:`derived_key` domain of an epoch's sample order (:func:`epoch_permutation`).
ORDER_DOMAIN = 0x6F72646572  # "order"
#: :func:`derived_key` domain of the DataLoader worker seeds of an unseeded epoch.
WORKERS_DOMAIN = 0x776F726B  # "work"
#: :func:`block_permutation`'s domain
BLOCK_ORDER_DOMAIN = 0x626C6F636B  # "block"
#: :func:`derived_key` domain of a sample's seed for Python's ``random`` (:func:`sample_rng`).
PYTHON_RANDOM_DOMAIN = 0x72616E646F6D  # "random"
#: :func:`derived_key` domain of a sample's seed for NumPy's global RNG (:func:`sample_rng`).
NUMPY_DOMAIN = 0x6E756D7079  # "numpy"


def derived_key(seed: int, epoch: int, index: int, domain: int) -> int:
    """A 64-bit key for something other than a sample's transform: :func:`sample_key` of
    the three integers with ``domain`` folded in by one more SplitMix64 round.

    Returns:
        int in ``[0, 2**64)``; equal to no :func:`sample_key` value except by chance.
    """
    return key_derived(sample_key(seed, epoch, index), domain)


def key_derived(key: int, domain: int) -> int:
    """:func:`derived_key` from the sample's key (``sample_key(seed, epoch, index)``) alone."""
    return _mix64((key ^ (domain & _MASK64)) + _GOLDEN & _MASK64)


def epoch_permutation(seed: int, epoch: int, size: int) -> torch.Tensor:
    """The sample order of ``epoch`` under ``seed``: a permutation of ``range(size)``.

    ``torch.randperm`` from a generator seeded by ``derived_key(seed, epoch, 0,
    ORDER_DOMAIN)``: the same in every process and rank, different for every epoch.

    Returns:
        int64 tensor ``[size]``.
    """
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    gen = torch.Generator().manual_seed(derived_key(seed, epoch, 0, ORDER_DOMAIN))
    return torch.randperm(size, generator=gen)


def block_permutation(seed: int, epoch: int, size: int, block: int) -> torch.Tensor:
    """A block shuffle of ``range(size)`` for ``epoch`` under ``seed``: the blocks of
    ``block`` consecutive indices (the last one shorter) in a random order, the indices
    inside each block in a random order of their own. Keyed by ``derived_key(seed, epoch,
    0, BLOCK_ORDER_DOMAIN)``; ``block == 1`` is a plain permutation (not
    :func:`epoch_permutation`'s).

    Returns:
        int64 tensor ``[size]``.
    """
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    gen = torch.Generator().manual_seed(derived_key(seed, epoch, 0, BLOCK_ORDER_DOMAIN))
    num_blocks = -(-size // block)
    rank = torch.empty(num_blocks, dtype=torch.int64)
    rank[torch.randperm(num_blocks, generator=gen)] = torch.arange(num_blocks)  # each block's place
    within = torch.rand(size, generator=gen, dtype=torch.float64)  # in [0, 1): the order inside a block
    key = rank.repeat_interleave(block)[:size].to(torch.float64) + within
    return torch.sort(key, stable=True).indices


@contextlib.contextmanager
def keyed_default_rng(key: int) -> Iterator[None]:
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


def _nonneg(name: str, value: Any) -> int:
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


#: serialises :func:`sample_rng` and :func:`keyed_sample_rng` blocks (Python's and NumPy's RNGs are process-wide)
_PROCESS_RNG_LOCK = threading.RLock()
#: how long :func:`keyed_sample_rng` waits for the lock before raising
RNG_LOCK_TIMEOUT_S = 30.0
#: ``[holder]``: the ``sample_rng`` block (its thread and entry count) that made a wait time out:
#: while it still holds the lock, later waits fail at once instead of timing out again
_stuck: list = []
_holder: list = [None]


class RngBusy(RuntimeError):
    """:func:`keyed_sample_rng` waited too long for Python's and NumPy's RNGs: another thread holds
    them in a :func:`sample_rng` block (iterating a loader inside one never ends)."""


@contextlib.contextmanager
def sample_rng(seed: int, epoch: int, index: int) -> Iterator[None]:
    """Run the body with the three process-wide RNGs that user code draws from seeded for
    sample ``index`` of ``epoch`` under ``seed``, and restore all three afterwards (also when
    the body raises).

    * torch's default CPU generator: ``manual_seed(sample_key(seed, epoch, index))``, exactly
      as :func:`keyed_default_rng` seeds it (so the native planner's re-draws of torchvision's
      calls stay what they were);
    * Python's ``random``: ``random.seed(derived_key(seed, epoch, index, PYTHON_RANDOM_DOMAIN))``;
    * NumPy's global RNG (``np.random.rand`` & co.): ``np.random.seed`` with the two 32-bit
      halves of ``derived_key(seed, epoch, index, NUMPY_DOMAIN)``.

    This is the definition of a seeded sample: with ``seed=S``, sample ``index`` of epoch
    ``e`` from either engine of :class:`fastprep.data.DataLoader` (and :func:`make_loader`)
    equals ``with sample_rng(S, e, index): dataset[index]``. Call it yourself to reproduce one
    training sample. It changes process-wide state: use it where no other thread draws from
    these generators meanwhile (the training loop's thread, a worker process). Blocks of it
    and of :func:`keyed_sample_rng` (the threads engine tracing a user's transform) run one at
    a time: do not iterate such a loader inside the block.

    Raises:
        TypeError, ValueError: ``seed`` not an int in ``[0, 2**64)``; ``epoch`` or ``index``
            not an int >= 0.
    """
    seed = check_seed(seed)
    if seed is None:
        raise TypeError("seed must be an int in [0, 2**64), got None")
    epoch, index = _nonneg("epoch", epoch), _nonneg("index", index)
    gen = torch.default_generator
    with _PROCESS_RNG_LOCK:  # not while a loader thread traces a sample (keyed_sample_rng)
        outer = _holder[0] is None
        if outer:
            _holder[0] = object()
        torch_state = gen.get_state()
        python_state = random.getstate()
        numpy_state = np.random.get_state()
        try:
            gen.manual_seed(sample_key(seed, epoch, index))
            random.seed(derived_key(seed, epoch, index, PYTHON_RANDOM_DOMAIN))
            key = derived_key(seed, epoch, index, NUMPY_DOMAIN)
            np.random.seed(np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32))
            yield
        finally:
            gen.set_state(torch_state)
            random.setstate(python_state)
            np.random.set_state(numpy_state)
            if outer:
                _holder[0] = None


def _acquire_process_rngs() -> None:
    """Take :data:`_PROCESS_RNG_LOCK` for a keyed block, or raise :class:`RngBusy`."""
    holder = _holder[0]
    wait = 0.0 if holder is not None and holder in _stuck else RNG_LOCK_TIMEOUT_S
    if not _PROCESS_RNG_LOCK.acquire(timeout=wait):
        holder = _holder[0]
        if holder is not None and holder not in _stuck:
            _stuck[:] = [holder]
        raise RngBusy(f"a sample_rng block of another thread has held Python's and NumPy's RNGs for over "
                      f"{RNG_LOCK_TIMEOUT_S:g} s: a loader tracing your transform cannot seed them (do not iterate "
                      "such a loader inside sample_rng)")


@contextlib.contextmanager
def held_process_rngs() -> Iterator[None]:
    """Hold Python's and NumPy's RNGs for several :func:`keyed_sample_rng` blocks of this
    thread (a batch of traces): their states are saved once on entry and restored once on
    exit, instead of per block (NumPy's ``get_state``/``set_state`` cost about 85 us a
    sample). Inside, each block still seeds both for its own key, so every block draws what
    it draws alone; between blocks the two generators hold the last block's state, not the
    outside one. Raises :class:`RngBusy` as :func:`keyed_sample_rng` does."""
    if getattr(_thread_state, "held", False):
        yield
        return
    _acquire_process_rngs()
    try:
        python_state = random.getstate()
        numpy_state = np.random.get_state()
        _thread_state.held = True
        try:
            yield
        finally:
            _thread_state.held = False
            random.setstate(python_state)
            np.random.set_state(numpy_state)
    finally:
        _PROCESS_RNG_LOCK.release()


def _seed_process_rngs(key: int) -> None:
    random.seed(key_derived(key, PYTHON_RANDOM_DOMAIN))
    nkey = key_derived(key, NUMPY_DOMAIN)
    np.random.seed(np.array([nkey & 0xFFFFFFFF, nkey >> 32], dtype=np.uint32))


@contextlib.contextmanager
def keyed_sample_rng(key: int) -> Iterator[None]:
    """:func:`sample_rng` for the sample whose key is ``key`` (``sample_key(seed, epoch,
    index)``), safe beside other threads that draw from torch: torch's random calls of *this
    thread* draw from a private generator seeded by ``key`` (:func:`keyed_thread_rng`; the
    default generator is neither read nor changed), and Python's ``random`` and NumPy's global
    RNG are seeded as :func:`sample_rng` seeds them and restored on exit. Those two are
    process-wide: blocks of this function and of :func:`sample_rng` in different threads run
    one at a time (a lock), and another thread drawing from them meanwhile (not through these
    functions) would take the sample's numbers.

    Raises:
        RngBusy: another thread's :func:`sample_rng` block held the lock for
            :data:`RNG_LOCK_TIMEOUT_S` (at once while that same block still holds it)."""
    with held_process_rngs():  # the lock, and the states saved and restored (unless a batch holds them)
        _seed_process_rngs(key)
        with keyed_thread_rng(key):
            yield


# Every torch function (and Tensor method) that draws from a generator and takes ``generator=``.
_RANDOM_FUNCTIONS = frozenset([
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.rand_like, torch.randn_like, torch.randint_like,
    torch.normal, torch.bernoulli, torch.multinomial, torch.poisson, torch.binomial,
    torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.random_, torch.Tensor.bernoulli_,
    torch.Tensor.exponential_, torch.Tensor.geometric_, torch.Tensor.cauchy_, torch.Tensor.log_normal_,
    torch.Tensor.bernoulli, torch.Tensor.multinomial,
])


class GeneratorSealed(RuntimeError):
    """A random torch call in a :func:`keyed_thread_rng` block after
    :func:`seal_private_generator`: the draws it would take were handed elsewhere."""


class _PrivateGenerator(TorchFunctionMode):
    """Hands ``generator`` to every random torch call that would use the default one, and
    counts those calls (``draws``); after :func:`seal_private_generator` they raise."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator
        self.draws = 0
        self.sealed: str | None = None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = {} if kwargs is None else kwargs
        if func in _RANDOM_FUNCTIONS and kwargs.get("generator") is None:
            if self.sealed is not None:
                raise GeneratorSealed(self.sealed)
            self.draws += 1
            kwargs = {**kwargs, "generator": self.generator}
        return func(*args, **kwargs)


def private_generator_draws() -> int | None:
    """How many random torch calls this thread's innermost :func:`keyed_thread_rng` block has
    redirected so far (``None`` outside one): 0 means its generator is still as seeded."""
    mode = getattr(_thread_state, "mode", None)
    return None if mode is None else mode.draws


def private_generator_for_draws() -> torch.Generator | None:
    """The generator this thread's innermost :func:`keyed_thread_rng` block hands to random
    torch calls, for code that draws on it explicitly (with torch functions disabled, so the
    mode does not see those calls): counted as a draw, and refused (:class:`GeneratorSealed`)
    once sealed. ``None`` outside such a block."""
    mode = getattr(_thread_state, "mode", None)
    if mode is None:
        return None
    if mode.sealed is not None:
        raise GeneratorSealed(mode.sealed)
    mode.draws += 1
    return mode.generator


def seal_private_generator(why: str) -> None:
    """Make every later random torch call of this thread's :func:`keyed_thread_rng` block raise
    :class:`GeneratorSealed` with ``why`` (its draws were taken over by native code, which
    draws from the same seed itself)."""
    _thread_state.mode.sealed = why


_thread_state = threading.local()


@contextlib.contextmanager
def keyed_thread_rng(key: int) -> Iterator[None]:
    """Run the body with the torch random calls *of this thread* drawing from a private
    CPU generator seeded by ``key``; torch's default generator is neither read nor changed.

    The draws equal those under :func:`keyed_default_rng` (both generators are torch's
    Mersenne Twister seeded with ``key``) for code that draws through torch's random
    functions without an explicit generator -- fastprep's transforms, torchvision's v2
    transforms, :mod:`fastprep.functional`'s seed draws. It works by a torch function mode,
    which is per thread, so other threads (a training loop drawing from the default
    generator, say) run unaffected and in parallel. Draws made below the Python level
    (in C++ code that calls the default generator directly) are not redirected.
    """
    spare = getattr(_thread_state, "spare", None)
    if spare is None:
        spare = _thread_state.spare = []
    gen = spare.pop() if spare else torch.Generator()  # nested blocks each get their own
    gen.manual_seed(key)
    outer = getattr(_thread_state, "mode", None)
    mode = _thread_state.mode = _PrivateGenerator(gen)
    try:
        with mode:
            yield
    finally:
        _thread_state.mode = outer
        spare.append(gen)
