"""The threads engine of ``make_loader`` (``fastprep.data.engine``), the keyed epoch order
(``EpochSampler``) and resuming (``state_dict`` / ``load_state_dict``) on both engines.

References: the processes engine (a DataLoader running the per-sample transform under
``keyed_default_rng``) for the threads engine's batches; ``DistributedSampler``'s slicing
written out here for ``EpochSampler``; an uninterrupted run for every resume. Images are
tens of pixels so every loader finishes fast; each sample's target is its index (one
class folder per file), so batches name the samples they hold.
"""

import gc
import hashlib
import os
import pickle
import signal
import threading
import time
import warnings

import pytest
import torch
from torch.utils.data import DistributedSampler

import fastprep.data as D
from fastprep import io as fio
from fastprep._seeding import epoch_permutation, keyed_thread_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.data.order import rank_slice
from fastprep.transforms import DecodeCenterCrop

from conftest import make_jpeg
from test_decode_errors import warning_flip

CROP = 24
SEED = 77
# (height, width): larger than the crop, and smaller (pad_if_needed); 13 files: batches of
# 4 leave a partial one, 2 and 3 ranks need padding.
SIZES = [(40, 56), (48, 37), (33, 60), (52, 44), (61, 33), (35, 70), (50, 50), (44, 29), (30, 41), (37, 38),
         (45, 45), (20, 28), (58, 47)]
N = len(SIZES)


def _write(path, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One class folder per file: sample i has target i."""
    root = tmp_path_factory.mktemp("engine")
    for i, (h, w) in enumerate(SIZES):
        _write(root / f"c{i:02d}" / "x.jpg", encode_jpeg(photo_like(h, w, seed=i)))
    return str(root)


def _clone(batch):
    images, targets = batch
    return images.clone(), targets.clone()


def _epochs(loader, epochs=1):
    return [[_clone(b) for b in loader] for _ in range(epochs)]


def _assert_same(got, want):
    assert len(got) == len(want)
    for (a, ta), (b, tb) in zip(got, want):
        assert torch.equal(ta, tb)
        assert a.dtype == b.dtype and torch.equal(a, b)


def _digests(batches):
    """target (= index) -> digest of its image, over a list of batches."""
    out = {}
    for images, targets in batches:
        for img, t in zip(images, targets.tolist()):
            out.setdefault(t, hashlib.sha256(img.contiguous().numpy().tobytes()).hexdigest())
    return out


def _loader(source, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("crop_size", CROP)
    kw.setdefault("device", "cpu")
    if kw.get("engine") == "processes" and kw.get("num_workers", 2) > 0:
        kw.setdefault("multiprocessing_context", "fork")
    return D.make_loader(source, **kw)


def _threads():
    """The loader's threads that are alive.

    ``fastprep.functional`` keeps one process-wide helper pool for its kernels
    (``fastprep-kernel_*``) on purpose; an earlier test may have started it, and it is
    not the loader's to stop, so it is not counted; nor is the process-wide asyncio loop of
    ``s3://`` requests (``fastprep-s3``, started by an earlier object storage test).
    """
    return {
        t
        for t in threading.enumerate()
        if t.name.startswith("fastprep-") and not t.name.startswith(("fastprep-kernel", "fastprep-s3"))
    }


# ------------------------------------------------------------------ the keyed order


class TestEpochSampler:
    @staticmethod
    def _distributed_reference(order, rank, world, drop_last):
        """DistributedSampler's slicing of a given order, written out."""
        n = len(order)
        if drop_last and n % world:
            total = (n - world + world - 1) // world * world
            seq = order[:total]
        else:
            total = -(-n // world) * world
            seq = (order * (-(-total // n)))[:total] if n else []
        return seq[rank:total:world]

    @pytest.mark.parametrize("n,world", [(13, 1), (13, 2), (13, 3), (12, 4), (2, 5), (7, 7)])
    @pytest.mark.parametrize("drop_last", [False, True])
    def test_slices_as_distributed_sampler(self, n, world, drop_last):
        for rank in range(world):
            plain = D.EpochSampler(n, shuffle=False, rank=rank, world_size=world, drop_last=drop_last)
            ds = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last)
            assert list(plain) == list(ds) and len(plain) == len(ds)
            keyed = D.EpochSampler(n, seed=5, rank=rank, world_size=world, drop_last=drop_last)
            keyed.set_epoch(3)
            order = epoch_permutation(5, 3, n).tolist()
            assert list(keyed) == self._distributed_reference(order, rank, world, drop_last)

    def test_keyed_by_seed_and_epoch(self):
        g = torch.Generator().manual_seed(0)
        orders = {}
        for seed in (0, 1):
            for epoch in (0, 1):
                s = D.EpochSampler(50, seed=seed)
                s.set_epoch(epoch)
                orders[seed, epoch] = list(s)
                assert sorted(orders[seed, epoch]) == list(range(50))
                assert list(s) == orders[seed, epoch]  # repeatable
        assert len({tuple(o) for o in orders.values()}) == 4
        del g

    @pytest.mark.parametrize("world", [1, 2, 3])
    @pytest.mark.parametrize("drop_last", [False, True])
    def test_cursor_continues_each_rank(self, world, drop_last):
        """After whole rounds of the same world size, each rank's rest is its suffix."""
        order = epoch_permutation(9, 0, N)
        for rank in range(world):
            full = rank_slice(order, 0, rank, world, drop_last)
            for consumed in range(len(full) + 1):
                assert rank_slice(order, consumed * world, rank, world, drop_last) == full[consumed:]

    @pytest.mark.parametrize("old,new", [(2, 3), (3, 1), (1, 2)])
    def test_cursor_across_world_sizes(self, old, new):
        """The remaining ranks together see exactly what no rank saw before the cursor."""
        order = epoch_permutation(4, 2, N).tolist()
        for consumed in range(0, -(-N // old)):
            cursor = consumed * old
            rest = [i for r in range(new) for i in rank_slice(torch.tensor(order), cursor, r, new, False)]
            pad = -(N - cursor) % new
            assert len(rest) == N - cursor + pad  # padded to whole rounds
            assert sorted(rest) == sorted(order[cursor:] + order[:pad])  # padding: the order's first entries

    def test_state_dict_protocol(self):
        s = D.EpochSampler(N, seed=3, rank=1, world_size=2)
        s.set_epoch(4)
        it = iter(s)
        first = [next(it) for _ in range(3)]
        state = s.state_dict()
        assert state == {"epoch": 4, "seed": 3, "cursor": 6}
        other = D.EpochSampler(N, seed=0, rank=0, world_size=3)
        other.load_state_dict(pickle.loads(pickle.dumps(state)))
        rest = list(other)
        assert not set(rest) & set(epoch_permutation(3, 4, N)[:6].tolist())
        assert list(other) == other.indices(0)  # the cursor applies to one iteration
        assert first == s.indices(0)[:3]

    def test_errors(self):
        with pytest.raises(ValueError, match="rank must be in"):
            D.EpochSampler(4, rank=2, world_size=2)
        with pytest.raises(ValueError, match="world_size must be an int >= 1, got 0"):
            D.EpochSampler(4, world_size=0)
        with pytest.raises(ValueError, match="epoch must be an int >= 0"):
            D.EpochSampler(4).set_epoch(-1)
        with pytest.raises(TypeError, match="seed must be an int"):
            D.EpochSampler(4, seed=None)

    def test_stateful_dataloader(self, folder):
        """The sampler as torchdata's StatefulDataLoader sees it (Stateful protocol)."""
        tdl = pytest.importorskip("torchdata.stateful_dataloader")
        ds = D.JpegFolder(folder, transform=DecodeCenterCrop(CROP), seed=SEED)
        kw = dict(batch_size=3, collate_fn=D.collate_uint8, num_workers=0)
        with warnings.catch_warnings():
            # torchdata 0.11 calls torch.set_vital, deprecated in recent torch
            warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
            full = list(tdl.StatefulDataLoader(ds, sampler=D.EpochSampler(N, seed=2), **kw))
            loader = tdl.StatefulDataLoader(ds, sampler=D.EpochSampler(N, seed=2), **kw)
            it = iter(loader)
            head = [next(it) for _ in range(2)]
            state = loader.state_dict()
            resumed = tdl.StatefulDataLoader(ds, sampler=D.EpochSampler(N, seed=2), **kw)
            resumed.load_state_dict(state)
            rest = list(resumed)
        assert len(head + rest) == len(full) == -(-N // 3)
        _assert_same(head + rest, full)


# ------------------------------------------------------------------ engines agree

PIPELINES = {
    "default": dict(crop_size=CROP, mask_ratio=0.25),
    "imagenet-train": dict(recipe="imagenet-train"),
    "imagenet-eval": dict(recipe="imagenet-eval"),
}


@pytest.fixture(scope="module")
def threads_run(folder):
    """pipeline -> two epochs of the seeded threads engine (2 workers)."""
    cache = {}

    def run(pipeline):
        if pipeline not in cache:
            loader = _loader(folder, engine="threads", num_workers=2, seed=SEED, **PIPELINES[pipeline])
            assert loader.engine == "threads" and isinstance(loader.loader, D.ThreadLoader)
            cache[pipeline] = _epochs(loader, 2)
        return cache[pipeline]

    return run


class TestSameAsProcesses:
    @pytest.mark.parametrize("workers", [0, 1, 2])
    @pytest.mark.parametrize("pipeline", list(PIPELINES))
    def test_bit_identical(self, folder, threads_run, pipeline, workers):
        want = _epochs(_loader(folder, engine="processes", num_workers=workers, seed=SEED, **PIPELINES[pipeline]), 2)
        got = threads_run(pipeline)
        for e in range(2):
            _assert_same(got[e], want[e])
        assert not torch.equal(got[0][0][1], got[1][0][1]) or not torch.equal(got[0][0][0], got[1][0][0])

    @pytest.mark.parametrize("workers", [0, 1, 3])
    def test_any_thread_count(self, folder, threads_run, workers):
        got = _epochs(_loader(folder, engine="threads", num_workers=workers, seed=SEED), 2)
        for e in range(2):
            _assert_same(got[e], threads_run("default")[e])

    def test_keyed_order(self, folder, threads_run):
        a = threads_run("default")
        b = _epochs(_loader(folder, engine="threads", seed=SEED), 2)
        for e in range(2):
            _assert_same(b[e], a[e])
            order = epoch_permutation(SEED, e, N).tolist()
            assert torch.cat([t for _, t in a[e]]).tolist() == order
        assert torch.cat([t for _, t in a[0]]).tolist() != torch.cat([t for _, t in a[1]]).tolist()
        other = _epochs(_loader(folder, engine="processes", num_workers=0, seed=SEED + 1), 1)[0]
        assert torch.cat([t for _, t in other]).tolist() == epoch_permutation(SEED + 1, 0, N).tolist()

    def test_shuffle_off_and_drop_last(self, folder):
        kw = dict(seed=SEED, shuffle=False, drop_last=True, batch_size=5)
        got = _epochs(_loader(folder, engine="threads", **kw))[0]
        want = _epochs(_loader(folder, engine="processes", num_workers=0, **kw))[0]
        _assert_same(got, want)
        assert torch.cat([t for _, t in got]).tolist() == list(range(10))


class TestUnseeded:
    def test_torch_manual_seed_reproduces(self, folder):
        runs = []
        for workers in (2, 0, 2):
            torch.manual_seed(11)
            runs.append(_epochs(_loader(folder, engine="threads", num_workers=workers), 2))
        for e in range(2):
            _assert_same(runs[1][e], runs[0][e])
            _assert_same(runs[2][e], runs[0][e])
        torch.manual_seed(12)
        other = _epochs(_loader(folder, engine="threads"), 1)[0]
        assert _digests(other) != _digests(runs[0][0])

    def test_generator_gives_the_epoch_seed(self, folder):
        a = _epochs(_loader(folder, engine="threads", generator=torch.Generator().manual_seed(3)), 2)
        torch.manual_seed(999)
        b = _epochs(_loader(folder, engine="threads", generator=torch.Generator().manual_seed(3)), 2)
        for e in range(2):
            _assert_same(b[e], a[e])

    @pytest.mark.parametrize("seed", [None, SEED])
    def test_consumer_rng_untouched(self, folder, seed):
        """Background threads never draw from (or re-seed) torch's default generator: the
        training loop's draws interleaved with a running loader are the plain stream."""
        torch.manual_seed(5)
        loader = _loader(folder, engine="threads", num_workers=2, seed=seed, batch_size=2)
        draws = []
        for _ in loader:
            for _ in range(20):
                draws.append(torch.rand(64))
                time.sleep(0.001)
        torch.manual_seed(5)
        if seed is None:
            torch.empty((), dtype=torch.int64).random_()  # the epoch seed, drawn at iter()
        want = [torch.rand(64) for _ in draws]
        assert all(torch.equal(a, b) for a, b in zip(draws, want))

    def test_keyed_thread_rng_matches_default_and_is_private(self):
        key = sample_key(1, 2, 3)
        g = torch.Generator().manual_seed(key)
        want = [torch.randint(0, 1000, (3,), generator=g), torch.empty(2).uniform_(0, 1, generator=g),
                torch.rand(2, generator=g)]
        torch.manual_seed(8)
        before = torch.get_rng_state()
        with keyed_thread_rng(key):
            got = [torch.randint(0, 1000, (3,)), torch.empty(2).uniform_(0, 1), torch.rand(2)]
        assert torch.equal(torch.get_rng_state(), before)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


# ------------------------------------------------------------------ resume


def _take(loader, k):
    """The first ``k`` batches of the next epoch, then the loader's state (the loop left)."""
    it = iter(loader)
    head = [_clone(next(it)) for _ in range(k)]
    state = loader.state_dict()
    del it
    return head, pickle.loads(pickle.dumps(state))


class TestResume:
    # Not unseeded processes with num_workers=0: its samples draw from the consumer's own
    # torch stream, which the training loop shares (docs/engine.md).
    @pytest.mark.parametrize("engine,workers,seeded", [("threads", 2, True), ("threads", 0, True),
                                                       ("processes", 0, True), ("processes", 2, True),
                                                       ("threads", 2, False), ("threads", 0, False),
                                                       ("processes", 2, False)])
    def test_mid_epoch_same_configuration(self, folder, engine, workers, seeded):
        kw = dict(engine=engine, num_workers=workers, seed=SEED if seeded else None)
        torch.manual_seed(21)
        full = _epochs(_loader(folder, **kw), 2)
        torch.manual_seed(21)
        first = _loader(folder, **kw)
        _assert_same(_epochs(first, 1)[0], full[0])
        head, state = _take(first, 2)
        _assert_same(head, full[1][:2])
        assert state["epoch"] == 1 and state["batches"] == 2 and state["samples"] == 8
        torch.manual_seed(1234)  # whatever the new process's RNG: the state decides
        resumed = _loader(folder, **kw)
        resumed.load_state_dict(state)
        assert resumed.state_dict() == state  # pending until iter()
        _assert_same(_epochs(resumed, 1)[0], full[1][2:])
        assert resumed.state_dict()["epoch"] == 2 and resumed.state_dict()["batches"] == 0

    @pytest.mark.parametrize("saved,loaded", [(("threads", 2), ("processes", 1)), (("processes", 2), ("threads", 0)),
                                              (("threads", 1), ("threads", 3))])
    def test_seeded_across_engines_and_workers(self, folder, saved, loaded):
        full = _epochs(_loader(folder, engine=saved[0], num_workers=saved[1], seed=SEED), 1)[0]
        head, state = _take(_loader(folder, engine=saved[0], num_workers=saved[1], seed=SEED), 1)
        resumed = _loader(folder, engine=loaded[0], num_workers=loaded[1], seed=SEED)
        resumed.load_state_dict(state)
        _assert_same(head + _epochs(resumed)[0], full)

    def test_seeded_other_batch_size(self, folder):
        full = _epochs(_loader(folder, engine="threads", seed=SEED))[0]
        _, state = _take(_loader(folder, engine="threads", seed=SEED), 1)
        resumed = _loader(folder, engine="threads", seed=SEED, batch_size=3)
        resumed.load_state_dict(state)
        rest = _epochs(resumed)[0]
        assert [x.shape[0] for x, _ in rest] == [3, 3, 3]
        assert torch.cat([t for _, t in rest]).tolist() == torch.cat([t for _, t in full]).tolist()[4:]
        assert _digests(rest) == {k: v for k, v in _digests(full).items() if k in _digests(rest)}

    @pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (1, 2), (2, 1)])
    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_seeded_across_world_sizes(self, folder, engine, old, new):
        """Ranks simulated with an EpochSampler each: after resuming with another world
        size, the ranks deliver every sample no rank had delivered, with its pixels."""
        def rank_loader(rank, world):
            sampler = D.EpochSampler(N, rank=rank, world_size=world)
            return _loader(folder, engine=engine, num_workers=0, seed=SEED, sampler=sampler, batch_size=2)

        reference = _digests(_epochs(_loader(folder, engine="threads", seed=SEED, batch_size=N))[0])
        heads, states = [], []
        for rank in range(old):
            head, state = _take(rank_loader(rank, old), 2)
            heads += head
            states.append(state)
        assert len({s["cursor"] for s in states}) == 1 and states[0]["cursor"] == 2 * 2 * old
        seen = _digests(heads)
        rest = []
        for rank in range(new):
            loader = rank_loader(rank, new)
            loader.load_state_dict(states[0])
            rest += _epochs(loader)[0]
        after = _digests(rest)
        assert set(seen) | set(after) == set(range(N))
        cursor = states[0]["cursor"]
        padding = epoch_permutation(SEED, 0, N)[:-(N - cursor) % new].tolist()
        assert set(seen) & set(after) <= set(padding)  # seen again only as padding
        assert {**seen, **after} == reference

    def test_state_at_epoch_boundaries_and_set_epoch(self, folder):
        loader = _loader(folder, engine="threads", seed=SEED)
        assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batches"] == 0
        _epochs(loader, 1)
        assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["cursor"] == 0
        head, state = _take(loader, 4)  # the last batch received, the epoch not yet ended
        assert state["batches"] == 4 and state["cursor"] == N
        resumed = _loader(folder, engine="threads", seed=SEED)
        resumed.load_state_dict(state)
        resumed.set_epoch(1)  # the usual loop's set_epoch keeps a state of that epoch
        assert _epochs(resumed)[0] == []
        assert resumed.state_dict()["epoch"] == 2

    def test_refused_states(self, folder):
        _, state = _take(_loader(folder, engine="processes", num_workers=2), 1)
        with pytest.raises(ValueError, match=r"num_workers 2 -> 1"):
            loader = _loader(folder, engine="processes", num_workers=1)
            loader.load_state_dict(state)
            iter(loader)
        with pytest.raises(ValueError, match=r"engine 'processes' -> 'threads'"):
            loader = _loader(folder, engine="threads")
            loader.load_state_dict(state)
            iter(loader)
        with pytest.raises(ValueError, match=r"seed=None; this one has seed=77"):
            loader = _loader(folder, engine="threads", seed=SEED)
            loader.load_state_dict(state)
            iter(loader)
        with pytest.raises(ValueError, match="not a loader state"):
            _loader(folder).load_state_dict({"x": 1})


def _without(name):
    return lambda state: {k: v for k, v in state.items() if k != name}


def _with(**fields):
    return lambda state: dict(state, **fields)


# (how the state is spoilt, error, what the message says): every field of a state.
BAD_STATES = [
    (lambda state: [], TypeError, r"a loader state is a dict from loader.state_dict\(\), got list"),
    (lambda state: {}, ValueError, r"^not a loader state from loader.state_dict\(\) \(missing 'version', 'engine'"),
    (_without("cursor"), ValueError, r"\(missing 'cursor'\)"),
    (_with(extra=1), ValueError, r"\(unknown 'extra'\)"),
    (_with(version=2), ValueError, r"'version' must be 1, got 2"),
    (_with(engine="gpu"), ValueError, r"'engine' must be 'threads' or 'processes', got 'gpu'"),
    (_with(epoch=10**20), ValueError, r"'epoch' must be in \[0, 2\*\*63 - 1\], got 100000000000000000000"),
    (_with(epoch=-1), ValueError, r"'epoch' must be in \[0, 2\*\*63 - 1\], got -1"),
    (_with(epoch="0"), TypeError, r"'epoch' must be an int, got '0' \(str\)"),
    (_with(epoch=True), TypeError, r"'epoch' must be an int, got True \(bool\)"),
    (_with(batches=-1), ValueError, r"'batches' must be in \[0, 2\*\*63 - 1\], got -1"),
    (_with(batches=1.0), TypeError, r"'batches' must be an int, got 1.0 \(float\)"),
    (_with(samples=-4), ValueError, r"'samples' must be in \[0, 2\*\*63 - 1\], got -4"),
    (_with(cursor=10**9), ValueError, rf"'cursor' must be in \[0, {N}\], got 1000000000"),
    (_with(cursor=None), TypeError, r"'cursor' must be an int, got None \(NoneType\)"),
    (_with(size=-1), ValueError, r"'size' must be in \[0, 2\*\*63 - 1\], got -1"),
    (_with(size=N + 1), ValueError, rf"the state is of a dataset of {N + 1} samples; this loader has {N}"),
    (_with(world_size=0), ValueError, r"'world_size' must be in \[1, 2\*\*63 - 1\], got 0"),
    (_with(rank=2, world_size=2), ValueError, r"'rank' must be in \[0, 1\], got 2"),
    (_with(batch_size=0), ValueError, r"'batch_size' must be in \[1, 2\*\*63 - 1\], got 0"),
    (_with(num_workers=-1), ValueError, r"'num_workers' must be in \[0, 2\*\*63 - 1\], got -1"),
    (_with(seed=-1), ValueError, r"'seed' must be in \[0, 2\*\*64\), got -1"),
    (_with(seed="77"), TypeError, r"'seed' must be an int or None, got '77' \(str\)"),
    (_with(seed=SEED + 1), ValueError, rf"saved by a loader with seed={SEED + 1}; this one has seed={SEED}"),
    (_with(epoch_seed=2**64), ValueError, r"'epoch_seed' must be in \[0, 2\*\*64\), got 18446744073709551616"),
    (_with(epoch_seed=3), ValueError, rf"has both 'seed' \({SEED}\) and 'epoch_seed' \(3\)"),
    (_with(batches=5, samples=4), ValueError, r"positions contradict each other: batches=5, samples=4, cursor=4"),
    (_with(batches=0), ValueError, r"positions contradict each other: batches=0, samples=4, cursor=4"),
    (_with(cursor=0), ValueError, r"positions contradict each other: batches=1, samples=4, cursor=0"),
    (_with(samples=0, batches=0), ValueError, r"positions contradict each other: batches=0, samples=0, cursor=4"),
]


@pytest.fixture(scope="module")
def state(folder):
    """A seeded threads-engine state after one batch."""
    _, state = _take(_loader(folder, engine="threads", seed=SEED), 1)
    assert (state["batches"], state["samples"], state["cursor"]) == (1, 4, 4)
    return state


class TestStateValidation:
    """A state is checked field by field at load_state_dict, before anything changes."""

    @pytest.mark.parametrize("spoil,error,message", BAD_STATES)
    def test_bad_field(self, folder, state, spoil, error, message):
        loader = _loader(folder, engine="threads", seed=SEED)
        before = loader.state_dict()
        with pytest.raises(error, match=message):
            loader.load_state_dict(spoil(dict(state)))
        assert loader.state_dict() == before  # nothing loaded

    def test_unseeded_needs_its_epoch_seed(self, folder):
        _, state = _take(_loader(folder, engine="threads"), 1)
        loader = _loader(folder, engine="threads")
        with pytest.raises(ValueError, match=r"unseeded and mid-epoch, so it needs its 'epoch_seed'; got None"):
            loader.load_state_dict(dict(state, epoch_seed=None))
        loader.load_state_dict(state)  # the state as saved loads

    def test_set_epoch_range(self, folder):
        loader = _loader(folder, engine="threads", seed=SEED)
        with pytest.raises(ValueError, match=r"epoch must be an int >= 0 and < 2\*\*63, got 100000000000000000000"):
            loader.set_epoch(10**20)
        loader.set_epoch(2**63 - 1)

    def test_prefetcher_without_epochs(self):
        prefetcher = D.DevicePrefetcher([(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), torch.zeros(1))], "cpu")
        with pytest.raises(ValueError, match=r"\(missing 'batches'\)"):
            prefetcher.load_state_dict({"epoch": 0})
        with pytest.raises(ValueError, match=r"'epoch' must be an int >= 0 and < 2\*\*63, got 100000000000000000000"):
            prefetcher.load_state_dict({"epoch": 10**20, "batches": 0})
        with pytest.raises(TypeError, match=r"'batches' must be an int, got '1' \(str\)"):
            prefetcher.load_state_dict({"epoch": 0, "batches": "1"})
        with pytest.raises(ValueError, match=r"'batches' must be >= 0, got -1"):
            prefetcher.load_state_dict({"epoch": 0, "batches": -1})

    def test_epoch_sampler_state(self):
        sampler = D.EpochSampler(N)
        with pytest.raises(ValueError, match=rf"'cursor' must be an int in \[0, size={N}\], got 1000000000"):
            sampler.load_state_dict({"epoch": 0, "seed": 1, "cursor": 10**9})
        with pytest.raises(ValueError, match=r"missing 'seed'"):
            sampler.load_state_dict({"epoch": 0, "cursor": 0})
        with pytest.raises(ValueError, match=r"'epoch' must be an int >= 0 and < 2\*\*63"):
            sampler.load_state_dict({"epoch": 10**20, "seed": 1, "cursor": 0})
        with pytest.raises(TypeError, match=r"'seed' must be an int, got None"):
            sampler.load_state_dict({"epoch": 0, "seed": None, "cursor": 0})
        assert sampler.state_dict() == {"epoch": 0, "seed": 0, "cursor": 0}  # unchanged


# ------------------------------------------------------------------ bad input


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    """Good JPEGs mixed with every kind of bad input, as a list of paths (targets 0)."""
    root = tmp_path_factory.mktemp("bad")
    good = [_write(root / f"g{i}.jpg", encode_jpeg(photo_like(h, w, seed=i))) for i, (h, w) in enumerate(SIZES[:6])]
    progressive = make_jpeg("420-progressive", 48, 64, seed=3)
    files = {
        "empty.jpg": b"",
        "text.jpg": b"not a jpeg at all" * 8,
        "truncated.jpg": progressive[:len(progressive) // 3],
        "header-only.jpg": b"\xff\xd8\xff\xdb" + b"\x00" * 40,
        "cmyk.jpg": make_jpeg("cmyk", 40, 50, seed=4),
        "flipped.jpg": warning_flip(make_jpeg("420", 48, 64, seed=5)),
        "png.jpg": _png(45, 60),
    }
    paths = {name: _write(root / name, data) for name, data in files.items()}
    if hasattr(os, "mkfifo"):
        paths["fifo.jpg"] = str(root / "fifo.jpg")
        os.mkfifo(paths["fifo.jpg"])
    paths["dir.jpg"] = str(root / "dir.jpg")
    os.mkdir(paths["dir.jpg"])
    order = [good[0], paths["empty.jpg"], good[1], paths["cmyk.jpg"], paths["text.jpg"], paths["flipped.jpg"], good[2],
             paths["truncated.jpg"], paths["png.jpg"], good[3], paths["header-only.jpg"], paths["dir.jpg"], good[4],
             paths.get("fifo.jpg", good[5]), good[5]]
    return order


def _png(h, w):
    import io

    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.fromarray(photo_like(h, w, seed=9)).save(buf, "PNG")
    return buf.getvalue()


class TestBadInput:
    @pytest.mark.parametrize("workers", [0, 2])
    def test_skip_same_as_processes(self, bad_files, workers):
        def run(engine, workers):
            loader = _loader(bad_files, engine=engine, num_workers=workers, seed=SEED, on_error="skip", strict=True,
                             batch_size=3)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "fastprep: .* is a PNG file", UserWarning)
                out = _epochs(loader, 2)
            ds = loader.loader.dataset
            return out, ds.skipped, ds.fallbacks

        got, skipped, fallbacks = run("threads", workers)
        want, want_skipped, want_fallbacks = run("processes", workers)
        for e in range(2):
            _assert_same(got[e], want[e])
        assert skipped == want_skipped and fallbacks == want_fallbacks
        # empty, text, flipped and truncated (strict), header-only, dir, fifo
        bad = 7 if hasattr(os, "mkfifo") else 6
        assert skipped == 2 * bad and fallbacks >= 2  # the PNG, and any substitute that is one

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    @pytest.mark.parametrize("name", ["empty.jpg", "text.jpg", "truncated.jpg", "flipped.jpg", "dir.jpg", "fifo.jpg"])
    def test_raise_names_the_file(self, bad_files, tmp_path, engine, name):
        path = [p for p in bad_files if p.endswith(name)]
        if not path:
            pytest.skip("no FIFO on this platform")
        files = [bad_files[0], bad_files[2], path[0], bad_files[5]]
        loader = _loader(files, engine=engine, num_workers=1, shuffle=False, batch_size=2, strict=True)
        batches = []
        with pytest.raises(fio.DecodeError, match=rf"cannot decode '.*{name}' \(index 2\)"):
            for b in loader:
                batches.append(b)
        assert len(batches) == 1  # the batch before the bad one, then the error
        assert not _threads()

    @pytest.mark.parametrize("workers", [0, 2])
    def test_decode_warning_issued_in_the_consumer(self, bad_files, workers):
        flipped = [p for p in bad_files if p.endswith("flipped.jpg")]
        loader = _loader(flipped * 3, engine="threads", num_workers=workers, crop_size=(48, 64), seed=SEED)
        with pytest.warns(fio.DecodeWarning, match="Corrupt JPEG data") as record:
            got = _epochs(loader)[0]
        assert sum(issubclass(w.category, fio.DecodeWarning) for w in record) == 3
        with pytest.warns(fio.DecodeWarning, match="Corrupt JPEG data"):
            want = _epochs(_loader(flipped * 3, engine="processes", num_workers=0, crop_size=(48, 64), seed=SEED))[0]
        _assert_same(got, want)

    def test_fallback_counted_and_warned_once(self, bad_files):
        png = [p for p in bad_files if p.endswith("png.jpg")]
        loader = _loader(png * 3, engine="threads", num_workers=2, seed=SEED)
        with pytest.warns(UserWarning, match="is a PNG file; decoded in full") as record:
            got = _epochs(loader)[0]
        assert len(record) == 1 and loader.loader.dataset.fallbacks == 3
        with pytest.warns(UserWarning, match="is a PNG file; decoded in full"):
            want = _epochs(_loader(png * 3, engine="processes", num_workers=0, seed=SEED))[0]
        _assert_same(got, want)

    def test_exif_rotated_takes_the_fallback(self, tmp_path):
        import PIL.Image

        exif = PIL.Image.Exif()
        exif[0x0112] = 6
        path = str(tmp_path / "rot.jpg")
        PIL.Image.fromarray(photo_like(40, 56, seed=4)).save(path, "JPEG", quality=90, exif=exif.tobytes())
        kw = dict(seed=SEED, apply_exif_orientation=True, crop_size=(30, 20))
        with pytest.warns(UserWarning, match="EXIF-rotated JPEG"):
            got = _epochs(_loader([path] * 2, engine="threads", **kw))[0]
        with pytest.warns(UserWarning, match="EXIF-rotated JPEG"):
            want = _epochs(_loader([path] * 2, engine="processes", num_workers=0, **kw))[0]
        _assert_same(got, want)

    def test_max_pixels_refused(self, folder):
        loader = _loader(folder, engine="threads", max_pixels=1000, shuffle=False)
        with pytest.raises(fio.DecodeError, match=r"c00.x\.jpg' \(index 0\).*exceeds max_pixels=1000"):
            next(iter(loader))
        assert not _threads()


# ------------------------------------------------------------------ threads and memory


class _Failing(D.JpegFolder):
    """read_encoded raises ``error`` for one index, and can be slow."""

    def __init__(self, root, bad=None, error=None, delay=0.0, **kw):
        super().__init__(root, **kw)
        self.bad, self.error, self.delay = bad, error, delay

    def read_encoded(self, index):
        if self.delay:
            time.sleep(self.delay)
        if index == self.bad:
            raise self.error
        return super().read_encoded(index)


def _thread_loader(dataset, workers=2, batch_size=2):
    from fastprep.data.engine import native_pipeline

    sampler = D.EpochSampler(len(dataset), shuffle=False)
    loader = D.ThreadLoader(dataset, native_pipeline(dataset.transform), sampler, batch_size=batch_size,
                            num_workers=workers)
    return D.DevicePrefetcher(loader, "cpu", D.BatchConvert(require_uint8=True))


class TestThreads:
    def test_cpu_seconds_count_every_batch(self, folder):
        loader = _loader(folder, engine="threads", num_workers=2, seed=SEED, batch_size=3)
        thread_loader = loader.loader
        assert thread_loader.cpu_seconds() == dict(samples=0, batches=0, read=0.0, plan=0.0, build_python=0.0,
                                                   build_native=0.0)
        for _ in range(2):
            _epochs(loader)
        got = thread_loader.cpu_seconds()
        assert (got["samples"], got["batches"]) == (2 * N, 2 * -(-N // 3))
        assert all(got[k] > 0 for k in ("read", "plan", "build_python", "build_native")), got

    def test_reader_failure_raises_in_the_consumer(self, folder):
        ds = _Failing(folder, bad=5, error=RuntimeError("disk on fire"), transform=D.default_transform(CROP))
        got = []
        with pytest.raises(RuntimeError, match=r"reading '.*c05.x\.jpg' \(index 5\) failed: RuntimeError: "
                                               r"disk on fire"):
            for b in _thread_loader(ds):
                got.append(b)
        assert [t.tolist() for _, t in got] == [[0, 1], [2, 3]]  # every batch before the bad one
        assert not _threads()

    def test_read_os_error_is_a_decode_error(self, folder):
        ds = _Failing(folder, bad=3, error=OSError("gone"), transform=D.default_transform(CROP), on_error="skip")
        batches = list(_thread_loader(ds))
        assert sum(len(t) for _, t in batches) == N and ds.skipped == 1

    def test_early_break_stops_threads(self, folder):
        before = set(threading.enumerate())
        loader = _loader(folder, engine="threads", num_workers=2, batch_size=2)
        for k, _ in enumerate(loader):
            assert _threads()
            if k == 1:
                break
        assert set(threading.enumerate()) == before
        assert len(_epochs(loader)[0]) == -(-N // 2)  # a full epoch afterwards
        assert set(threading.enumerate()) == before

    def test_abandoned_iterator_stops_threads(self, folder):
        loader = _loader(folder, engine="threads", num_workers=2, batch_size=2)
        it = iter(loader)
        next(it)
        del it
        gc.collect()
        assert not _threads()

    def test_keyboard_interrupt_while_waiting(self, folder):
        """Ctrl-C while the consumer waits for the first batch: the KeyboardInterrupt reaches
        the loop and the threads stop. The signal is sent once a reader is inside its first
        (slow) read, so the consumer is waiting whatever the machine's load; Python's own
        SIGINT handler is installed for the test's duration, whatever an earlier test left."""
        reading = threading.Event()

        class _Slow(_Failing):
            def read_encoded(self, index):
                reading.set()
                return super().read_encoded(index)

        ds = _Slow(folder, delay=0.3, transform=D.default_transform(CROP))
        loader = _thread_loader(ds, batch_size=4)

        def interrupt():
            if reading.wait(10):
                time.sleep(0.1)
                os.kill(os.getpid(), signal.SIGINT)

        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        sender = threading.Thread(target=interrupt, daemon=True)
        start = time.monotonic()
        try:
            sender.start()
            with pytest.raises(KeyboardInterrupt):
                for _ in loader:
                    pass
        finally:
            sender.join(15)
            signal.signal(signal.SIGINT, previous)
        assert time.monotonic() - start < 5  # no hang: the readers finish the read in hand and stop
        assert not _threads()

    def test_keyboard_interrupt_in_the_loop_body(self, folder):
        loader = _loader(folder, engine="threads", num_workers=2, batch_size=2)
        with pytest.raises(KeyboardInterrupt):
            for _ in loader:
                raise KeyboardInterrupt
        gc.collect()
        assert not _threads()

    def test_no_shared_memory_and_flat_rss(self, folder):
        shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        loader = _loader(folder, engine="threads", num_workers=2, batch_size=3, recipe="imagenet-train")

        def rss_kib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

        _epochs(loader, 2)
        start = rss_kib()
        for _ in range(6):
            for _ in loader:
                pass
        grown = rss_kib() - start
        assert grown < 32 * 1024, f"RSS grew by {grown} KiB over 6 epochs"
        if os.path.isdir("/dev/shm"):
            assert set(os.listdir("/dev/shm")) <= shm
        assert not _threads()

    def test_uint8_ring_buffers_are_reused(self, folder):
        """Without fused conversion (the CUDA path), the prefetcher hands every ring buffer
        back and the builder reuses them: no one-off buffers."""
        ds = D.JpegFolder(folder, transform=D.default_transform(CROP))
        loader = _thread_loader(ds, batch_size=2)
        released = []
        original = D.DevicePrefetcher._release

        def spy(self, pooled, event=None):
            if pooled is not None:
                released.append((pooled.slot, pooled.images.data_ptr()))
            original(self, pooled, event)

        D.DevicePrefetcher._release = spy
        try:
            for _ in range(2):
                _epochs(loader, 1)
        finally:
            D.DevicePrefetcher._release = original
        assert len(released) == 2 * -(-N // 2)
        assert {slot for slot, _ in released} <= set(range(loader.loader.prefetch + 3))
        assert len(set(released)) <= loader.loader.prefetch + 3

    def test_fused_buffers_recycled_only_when_dropped(self, folder):
        kw = dict(seed=SEED, batch_size=2, recipe="imagenet-eval")
        loader = _loader(folder, engine="threads", **kw)
        assert loader.batch_transform is None and loader.loader.convert is not None
        held = [x for x, _ in loader]  # no copies: every batch still referenced
        want = [x for x, _ in _epochs(_loader(folder, engine="processes", num_workers=0, **kw))[0]]
        assert len({x.data_ptr() for x in held}) == len(held)
        assert all(torch.equal(a, b) for a, b in zip(held, want, strict=True))
        del held

    def test_leased_buffers(self):
        from fastprep.data.engine import _LeasedBuffers

        pool = _LeasedBuffers((4, 3, 5, 6), torch.bfloat16, True, slots=2)
        _, a = pool.acquire(4)
        assert a.dtype == torch.bfloat16 and a.shape == (4, 3, 5, 6)
        assert a.is_contiguous(memory_format=torch.channels_last)
        _, b = pool.acquire(3)  # `a` is alive: another buffer
        assert b.shape == (3, 3, 5, 6) and b.data_ptr() != a.data_ptr()
        ptr, view = a.data_ptr(), a[1:]
        del a  # a view keeps the lease
        _, c = pool.acquire(4)
        assert c.data_ptr() not in (ptr, b.data_ptr())
        del view
        _, d = pool.acquire(2)
        assert d.data_ptr() == ptr  # every tensor on it gone: reused

    @pytest.mark.parametrize("dtype,channels_last", [(torch.float16, False), (torch.bfloat16, True),
                                                     (torch.float32, True)])
    @pytest.mark.parametrize("pipeline", ["default", "imagenet-train"])
    def test_fused_conversion_bit_identical(self, folder, pipeline, dtype, channels_last):
        kw = dict(seed=SEED, dtype=dtype, channels_last=channels_last, **PIPELINES[pipeline])
        got = _epochs(_loader(folder, engine="threads", **kw))[0]
        want = _epochs(_loader(folder, engine="processes", num_workers=0, **kw))[0]
        _assert_same(got, want)
        assert all(x.is_contiguous(memory_format=torch.channels_last) == channels_last for x, _ in got)


# ------------------------------------------------------------------ engine choice


class TestEngineChoice:
    def test_defaults(self, folder):
        assert _loader(folder).engine == "threads"
        assert _loader(folder, recipe="imagenet-eval").engine == "threads"
        assert _loader(folder, num_workers=1, worker_init_fn=lambda w: None).engine == "processes"
        assert _loader(folder, transform=lambda data: data).engine == "processes"
        ds = D.JpegFolder(folder, transform=DecodeCenterCrop(CROP))
        assert _loader(ds, num_workers=0).engine == "processes"
        # asked for, a JpegDataset with a fastprep decode transform runs on threads, same batches
        threads = _loader(ds, engine="threads", shuffle=False)
        assert threads.engine == "threads"
        _assert_same(_epochs(threads)[0], _epochs(_loader(ds, engine="processes", num_workers=1, shuffle=False))[0])
        assert _loader(folder).loader.num_workers == D.engine.available_cpus()
        assert _loader(folder, engine="processes").loader.num_workers == 2

    def test_threads_refuses_what_it_cannot_run(self, folder):
        with pytest.raises(ValueError, match="engine='threads' cannot run this pipeline: the pipeline starts with "
                                             "function, not a fastprep decode transform .*use engine='processes'"):
            _loader(folder, engine="threads", transform=lambda data: data)
        with pytest.raises(ValueError, match="cannot run this pipeline: the pipeline starts with NoneType"):
            _loader(D.JpegFolder(folder), engine="threads")  # no transform to run natively
        with pytest.raises(ValueError, match="cannot run this pipeline: the pipeline starts with function"):
            _loader(D.JpegFolder(folder, transform=lambda data: data), engine="threads")
        loader = _loader(folder, transform=lambda data: data)
        assert loader.engine == "processes" and "starts with function" in loader.engine_reason
        with pytest.raises(ValueError, match="worker_init_fn configure worker processes; use engine='processes'"):
            _loader(folder, engine="threads", worker_init_fn=lambda w: None)
        with pytest.raises(ValueError, match="engine must be 'threads', 'processes' or None, got 'fibers'"):
            _loader(folder, engine="fibers")


class TestBottleneckStage:
    """bottleneck_stage from crafted stage_seconds readings, then from real runs held by
    one stage on purpose (slow reads; a slow consumer)."""

    ZERO = dict(consumer_wait=0.0, building=0.0, builder_wait_readers=0.0, builder_wait_consumer=0.0)

    def _after(self, **shares):
        return {k: shares.get(k, 0.0) * 10.0 for k in self.ZERO}

    def test_classification(self):
        from fastprep.data.engine import bottleneck_stage

        stage = lambda **s: bottleneck_stage(self.ZERO, self._after(**s), 10.0)[0]  # noqa: E731
        assert stage(consumer_wait=0.01, building=0.5, builder_wait_consumer=0.5) == "hand-over"
        assert stage(consumer_wait=0.6, building=0.3, builder_wait_readers=0.7) == "read"
        assert stage(consumer_wait=0.6, building=0.95, builder_wait_readers=0.05) == "decode"
        assert stage(consumer_wait=0.3, building=0.7, builder_wait_readers=0.25) == "decode"  # at the threshold
        text = bottleneck_stage(self.ZERO, self._after(consumer_wait=0.5, builder_wait_readers=0.4), 10.0)[1]
        assert "consumer waited 50%" in text and "waiting for the readers 40%" in text
        with pytest.raises(ValueError, match="window_s"):
            bottleneck_stage(self.ZERO, self.ZERO, 0.0)

    def _run(self, loader, consumer_sleep=0.0):
        """The stage over every batch but the first (whose wait is the engine's start-up)."""
        from fastprep.data.engine import bottleneck_stage

        engine = loader.loader
        it = iter(loader)
        next(it)
        before, t0 = engine.stage_seconds(), time.perf_counter()
        for _ in it:
            time.sleep(consumer_sleep)
        return bottleneck_stage(before, engine.stage_seconds(), time.perf_counter() - t0)

    def test_slow_reads_are_the_read_stage(self, folder):
        ds = _Failing(folder, delay=0.03, transform=D.default_transform(CROP))
        stage, text = self._run(_thread_loader(ds, batch_size=4))
        assert stage == "read", text

    def test_slow_consumer_is_the_hand_over(self, folder):
        ds = D.JpegFolder(folder, transform=D.default_transform(CROP))
        stage, text = self._run(_thread_loader(ds, batch_size=4), consumer_sleep=0.15)
        assert stage == "hand-over", text
