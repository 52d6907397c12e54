"""The sample order of :func:`~fastprep.data.make_loader`'s loaders and what makes them
resumable: :class:`EpochSampler`, :class:`EpochControl`.

An epoch's order is global: one permutation of the dataset keyed by ``(seed, epoch)``
(:func:`fastprep._seeding.epoch_permutation`), of which each of ``world_size`` ranks takes
every ``world_size``-th entry, as ``DistributedSampler`` does. The position in an epoch is
global too: the *cursor*, the number of entries of the global order consumed by all ranks
together. Resuming at a cursor re-slices the rest of the order, so a run can resume with
another world size, worker count or engine and still see every remaining sample once.
"""

from __future__ import annotations

import copy

import torch
from torch.utils.data import Sampler

from .._checks import is_int
from .._seeding import WORKERS_DOMAIN, block_permutation, check_seed, derived_key, epoch_permutation

__all__ = ["EpochControl", "EpochSampler"]

_STATE_VERSION = 1
#: The largest epoch number (the dataset keeps it in an int64).
MAX_EPOCH = 2**63 - 1
_ENGINES = ("threads", "processes")
#: The fields of a loader state (:meth:`EpochControl.state`), in order.
STATE_FIELDS = ("version", "engine", "epoch", "batches", "samples", "cursor", "epoch_seed", "seed", "size",
                "world_size", "rank", "batch_size", "num_workers")


def _nonneg_int(name: str, value) -> int:
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


def check_epoch(epoch, name: str = "epoch") -> int:
    """``epoch`` as an int in ``[0, MAX_EPOCH]``; ``ValueError`` naming it otherwise."""
    if not is_int(epoch) or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"{name} must be an int >= 0 and < 2**63, got {epoch!r}")
    return int(epoch)


def _state_int(state: dict, name: str, low: int, high: int | None = None) -> int:
    value = state[name]
    if not is_int(value):
        raise TypeError(f"the loader state's {name!r} must be an int, got {value!r} ({type(value).__name__})")
    top = MAX_EPOCH if high is None else high  # every count fits an int64
    if not low <= value <= top:
        bound = "2**63 - 1" if high is None else str(high)
        raise ValueError(f"the loader state's {name!r} must be in [{low}, {bound}], got {value}")
    return int(value)


def check_loader_state(state) -> dict:
    """Validate a loader state (:meth:`EpochControl.state`) on its own: every field present,
    of its type and range, and the fields consistent with each other. Returns a copy.

    Raises:
        TypeError: ``state`` is not a dict, or a field has the wrong type (named, with its value).
        ValueError: a field is missing, unknown or out of range, or fields contradict each
            other (named, with their values).
    """
    if not isinstance(state, dict):
        raise TypeError(f"a loader state is a dict from loader.state_dict(), got {type(state).__name__}")
    missing = [k for k in STATE_FIELDS if k not in state]
    unknown = sorted(str(k) for k in state if k not in STATE_FIELDS)
    if missing or unknown:
        what = "; ".join(part for part in (missing and f"missing {', '.join(map(repr, missing))}",
                                            unknown and f"unknown {', '.join(map(repr, unknown))}") if part)
        raise ValueError(f"not a loader state from loader.state_dict() ({what}): {state!r:.200}")
    if not is_int(state["version"]) or state["version"] != _STATE_VERSION:
        raise ValueError(f"the loader state's 'version' must be {_STATE_VERSION}, got {state['version']!r}")
    if state["engine"] not in _ENGINES:
        raise ValueError(f"the loader state's 'engine' must be 'threads' or 'processes', got {state['engine']!r}")
    size = _state_int(state, "size", 0)
    world_size = _state_int(state, "world_size", 1)
    _state_int(state, "rank", 0, world_size - 1)
    _state_int(state, "batch_size", 1)
    _state_int(state, "num_workers", 0)
    _state_int(state, "epoch", 0)
    batches = _state_int(state, "batches", 0)
    samples = _state_int(state, "samples", 0)
    cursor = _state_int(state, "cursor", 0, size)
    seed = check_seed(state["seed"], "the loader state's 'seed'")
    epoch_seed = check_seed(state["epoch_seed"], "the loader state's 'epoch_seed'")
    # every delivered batch holds a sample; the cursor moves with the samples delivered
    if batches > samples or (batches > 0) != (samples > 0) or (samples > 0) != (cursor > 0):
        raise ValueError(f"the loader state's positions contradict each other: batches={batches}, "
                         f"samples={samples}, cursor={cursor} (of size={size})")
    if seed is not None and epoch_seed is not None:
        raise ValueError(f"the loader state has both 'seed' ({seed}) and 'epoch_seed' ({epoch_seed}); a seeded "
                         "loader keeps no epoch seed")
    if seed is None and samples and epoch_seed is None:
        raise ValueError("the loader state is unseeded and mid-epoch, so it needs its 'epoch_seed'; got None")
    return dict(state)


def rank_slice(order: torch.Tensor, cursor: int, rank: int, world_size: int, drop_last: bool) -> list[int]:
    """Rank ``rank``'s share of ``order[cursor:]``: padded (with entries from the start of
    ``order``, cyclically) or cut (``drop_last``) to a multiple of ``world_size``, then
    every ``world_size``-th entry from ``rank`` -- ``DistributedSampler``'s slicing, applied
    to what is left of the epoch.

    For a cursor reached by consuming whole rounds of the same ``world_size`` (``cursor``
    a multiple of it past the previous start), the result is exactly the rest of that rank's
    uninterrupted slice.
    """
    n = int(order.numel())
    left = n - cursor
    if left <= 0:
        return []
    rest = order[cursor:]
    if drop_last:
        seq = rest[:left // world_size * world_size]
    else:
        pad = -left % world_size
        if pad:
            reps = -(-pad // n)
            rest = torch.cat([rest, order.repeat(reps)[:pad]])
        seq = rest
    return seq[rank::world_size].tolist()


class EpochSampler(Sampler[int]):
    """Each epoch's sample order: a permutation keyed by ``(seed, epoch)`` (``0 .. size - 1``
    in order without ``shuffle``), sliced for ``rank`` of ``world_size`` as
    ``torch.utils.data.DistributedSampler`` slices (padding by repeating entries from the
    start of the order, or dropping the tail with ``drop_last``).

    The permutation is the same in every process and rank; unlike ``DistributedSampler``'s
    it is keyed by a hash of ``(seed, epoch)`` (two seeds never give shifted copies of one
    another's orders). :meth:`state_dict` / :meth:`load_state_dict` follow torchdata's
    ``Stateful`` protocol: the state holds the global *cursor* (entries of the global order
    consumed by all ranks: ``start + yielded * world_size``), so loading it into a sampler of
    another ``world_size`` continues with the samples no rank has seen.

    Args:
        size: number of samples (``len(dataset)``).
        seed: int in ``[0, 2**64)``; the order's key (with the epoch).
        shuffle: permute (``True``) or keep the dataset's order.
        rank, world_size: this rank and the number of ranks.
        drop_last: cut the order to a multiple of ``world_size`` instead of padding it.
        shuffle_block: with ``shuffle``, a block shuffle instead of a permutation of single
            samples: blocks of this many consecutive samples in a keyed random order, the
            samples inside each block in a keyed random order of their own
            (:func:`fastprep._seeding.block_permutation`). Neighbours in a shard are read
            together from object storage (one request per block); batches hold whole
            blocks of neighbours (less shuffled). 1 (default): every sample on its own.
    """

    def __init__(self, size: int, *, seed: int = 0, shuffle: bool = True, rank: int = 0, world_size: int = 1,
                 drop_last: bool = False, shuffle_block: int = 1):
        self.size = _nonneg_int("size", size)
        if not is_int(shuffle_block) or shuffle_block < 1:
            raise ValueError(f"shuffle_block must be an int >= 1, got {shuffle_block!r}")
        self.shuffle_block = int(shuffle_block)
        self.seed = check_seed(seed)
        if self.seed is None:
            raise TypeError("seed must be an int, got None")
        self.shuffle = bool(shuffle)
        if not is_int(world_size) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        self.world_size = int(world_size)
        self.rank = _nonneg_int("rank", rank)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in [0, world_size={self.world_size}), got {rank}")
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._next_start = 0  # cursor of the next iteration (load_state_dict)
        self._start = 0  # cursor the current iteration started from
        self._yielded = 0

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order from now on."""
        self.epoch = check_epoch(epoch)

    def start_at(self, cursor: int) -> None:
        """Make the next iteration start at global position ``cursor`` of the epoch
        (``0 <= cursor <= size``)."""
        cursor = _nonneg_int("cursor", cursor)
        if cursor > self.size:
            raise ValueError(f"cursor must be in [0, size={self.size}], got {cursor}")
        self._next_start = cursor

    def global_order(self) -> torch.Tensor:
        """The epoch's order over all ranks: int64 ``[size]``."""
        if not self.shuffle:
            return torch.arange(self.size)
        if self.shuffle_block > 1:
            return block_permutation(self.seed, self.epoch, self.size, self.shuffle_block)
        return epoch_permutation(self.seed, self.epoch, self.size)

    def indices(self, cursor: int = 0) -> list[int]:
        """This rank's indices for the epoch from global position ``cursor`` on."""
        return rank_slice(self.global_order(), cursor, self.rank, self.world_size, self.drop_last)

    def __iter__(self):
        start, self._next_start = self._next_start, 0
        self._start, self._yielded = start, 0
        for index in self.indices(start):
            self._yielded += 1
            yield index

    def __len__(self) -> int:
        """This rank's share of a whole epoch."""
        if self.drop_last:
            return self.size // self.world_size
        return -(-self.size // self.world_size)

    def cursor(self) -> int:
        """The global position after what the current iteration has yielded."""
        return min(self._start + self._yielded * self.world_size, self.size)

    def state_dict(self) -> dict:
        """``{"epoch", "seed", "cursor"}``: plain ints (torchdata's ``Stateful``)."""
        return {"epoch": self.epoch, "seed": self.seed, "cursor": self.cursor()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (:meth:`state_dict`, possibly of another ``world_size``):
        the next iteration runs its epoch from its cursor. Every field is checked before
        anything changes (``TypeError``/``ValueError`` naming it)."""
        if not isinstance(state, dict):
            raise TypeError(f"an EpochSampler state is a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in ("epoch", "seed", "cursor") if k not in state]
        if missing:
            raise ValueError(f"not an EpochSampler state (missing {', '.join(map(repr, missing))}): {state!r:.200}")
        epoch = check_epoch(state["epoch"], "the state's 'epoch'")
        seed = check_seed(state["seed"], "the state's 'seed'")
        if seed is None:
            raise TypeError("the state's 'seed' must be an int, got None")
        cursor = state["cursor"]
        if not is_int(cursor) or not 0 <= cursor <= self.size:
            raise ValueError(f"the state's 'cursor' must be an int in [0, size={self.size}], got {cursor!r}")
        self.epoch, self.seed = epoch, seed
        self.start_at(cursor)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, seed={self.seed}, shuffle={self.shuffle}, "
                f"rank={self.rank}, world_size={self.world_size}, drop_last={self.drop_last}"
                + (f", shuffle_block={self.shuffle_block})" if self.shuffle_block > 1 else ")"))


class EpochControl:
    """Sets up each epoch of a :func:`~fastprep.data.make_loader` loader and describes
    where it stands, for :class:`~fastprep.data.DevicePrefetcher`'s ``state_dict``.

    At the start of an epoch (in the consumer's thread, at ``iter()``) it fixes what the
    epoch's batches depend on besides the files: the epoch number on the sampler and the
    dataset; without ``seed``, one *epoch seed* drawn from ``generator`` (torch's default
    generator when ``None``), which keys the order (unless distributed: then the order's
    seed is 0 on every rank, so the ranks' slices partition one order), the threads
    engine's samples, and the processes engine's DataLoader worker seeds (mixed with the
    rank); and, when resuming, the cursor to start from.

    Args:
        engine: ``"threads"`` (a :class:`~fastprep.data.engine.ThreadLoader`) or
            ``"processes"`` (a ``DataLoader``), given as ``loader``.
        loader: the object the prefetcher iterates.
        dataset: the dataset (``set_epoch`` is called on it when it has one).
        sampler: an :class:`EpochSampler`, or any sampler (resumed by skipping what was
            consumed: replayed by the processes engine, skipped unread by the threads one).
        seed: the user's seed or ``None``.
        generator: where an unseeded epoch's seed is drawn from (``None``: torch's default).
        distributed: the sampler slices one order over ranks (its seed must then be equal
            on every rank).
        replay: resume the processes engine by re-running the consumed batches (it must,
            to be exact, when the samples' randomness lives in worker processes).
    """

    def __init__(self, engine: str, loader, dataset, sampler, *, seed=None, generator=None, distributed: bool = False,
                 replay: bool = False, batch_size: int = 1, num_workers: int = 0):
        self.engine = engine
        self.loader = loader
        self.dataset = dataset
        self.sampler = sampler
        self.seed = seed
        self.generator = generator
        self.distributed = bool(distributed)
        self.replay = bool(replay)
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self._running: dict | None = None  # where the running epoch began: see begin()

    @property
    def world_size(self) -> int:
        return self.sampler.world_size if isinstance(self.sampler, EpochSampler) else 1

    @property
    def rank(self) -> int:
        return self.sampler.rank if isinstance(self.sampler, EpochSampler) else 0

    def set_epoch(self, epoch: int) -> None:
        """Tell the sampler and the dataset (nothing is drawn)."""
        for owner in (self.sampler, self.dataset):
            set_epoch = getattr(owner, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)

    def begin(self, epoch: int, resume: dict | None = None) -> int:
        """Set up ``epoch``, from ``resume``'s position when it is a state of that epoch
        (:meth:`state`); returns how many leading batches the consumer must drop (a
        replay), usually 0."""
        position = None
        if resume is not None:
            resume = self.check(resume)
            if resume["epoch"] == epoch and (resume["batches"] or resume["samples"] or resume["cursor"]):
                position = resume
        epoch_seed = self.seed
        if epoch_seed is None:
            if position is not None:
                epoch_seed = position["epoch_seed"]
            else:
                epoch_seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator))
        self.set_epoch(epoch)
        cursor = skip = drop = 0
        if position is not None:
            if self.replay:
                drop = position["batches"]
            elif isinstance(self.sampler, EpochSampler):
                cursor = position["cursor"]
            else:
                skip = position["samples"]
        if isinstance(self.sampler, EpochSampler):
            self.sampler.seed = 0 if self.seed is None and self.distributed else epoch_seed
            self.sampler.start_at(cursor)
        if self.engine == "threads":
            self.loader.begin_epoch(epoch, epoch_seed, skip=skip, following=self._following(epoch))
        elif self.seed is None:
            # The workers' base seed: from the epoch seed, distinct per rank (ranks that
            # seeded torch alike must not crop alike).
            key = derived_key(epoch_seed, epoch, self.rank, WORKERS_DOMAIN)
            self.loader.generator = torch.Generator().manual_seed(key)
        start = position or {"batches": 0, "samples": 0, "cursor": 0}
        self._running = {"epoch_seed": epoch_seed, "batches": start["batches"], "samples": start["samples"],
                         "cursor": start["cursor"]}
        return drop

    def _following(self, epoch: int):
        """A callable giving this rank's indices of epoch ``epoch + 1`` from its start, where
        they are known before it begins (an :class:`EpochSampler` whose order's seed does not
        change: a seeded loader, or a distributed one), else ``None``."""
        sampler = self.sampler
        if not isinstance(sampler, EpochSampler) or (self.seed is None and not self.distributed) \
                or epoch >= MAX_EPOCH:
            return None
        following = copy.copy(sampler)
        following.set_epoch(epoch + 1)
        return lambda: following.indices(0)

    def state(self, epoch: int, batches: int = 0, samples: int = 0, running: bool = False) -> dict:
        """A plain dict: where the loader stands.

        ``running``: ``epoch`` began (:meth:`begin`) and ``batches`` batches of
        ``samples`` samples were delivered since; otherwise ``epoch`` has not begun.
        """
        state = {
            "version": _STATE_VERSION, "engine": self.engine, "epoch": epoch,
            "batches": 0, "samples": 0, "cursor": 0, "epoch_seed": None, "seed": self.seed,
            "size": len(self.dataset), "world_size": self.world_size, "rank": self.rank,
            "batch_size": self.batch_size, "num_workers": self.num_workers,
        }
        if running:
            start = self._running
            assert start is not None, "running=True before begin()"
            state.update(batches=start["batches"] + batches, samples=start["samples"] + samples,
                         cursor=min(start["cursor"] + samples * self.world_size, state["size"]),
                         epoch_seed=start["epoch_seed"] if self.seed is None else None)
        return state

    def check(self, state) -> dict:
        """Validate a loader state for this loader (:meth:`DevicePrefetcher.load_state_dict`
        calls it): :func:`check_loader_state`, then what must match the loader -- the
        dataset size, the seed, and the configuration an exact resume needs. Returns a copy.

        Raises:
            TypeError, ValueError: naming the field and its value, or what differs.
        """
        state = check_loader_state(state)
        if state["size"] != len(self.dataset):
            raise ValueError(f"the state is of a dataset of {state['size']} samples; this loader has "
                             f"{len(self.dataset)}")
        if state["seed"] != self.seed:
            raise ValueError(f"the state was saved by a loader with seed={state['seed']}; this one has "
                             f"seed={self.seed}")
        same: dict[str, object] = {}
        if self.seed is None:  # the epoch seed keys different things on each engine and rank
            same.update(engine=self.engine, world_size=self.world_size, rank=self.rank)
        if self.replay:  # a replay re-runs the same batches with the same worker streams
            same.update(batch_size=self.batch_size)
            if self.seed is None:
                same.update(num_workers=self.num_workers)
        changed = {k: (state[k], v) for k, v in same.items() if state[k] != v}
        if changed:
            what = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise ValueError(f"this loader cannot resume exactly in another configuration than the one the state "
                             f"was saved in ({what}); with seed= and make_loader's own order it can")
        return state
