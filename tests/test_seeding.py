"""Sample-keyed randomness (``seed=``) and the distributed options of ``make_loader``.

The reference for a sample's output: torch's default generator seeded with
``sample_key(seed, epoch, index)``, then the default per-sample transform called on the
file's bytes, then the batch conversion -- computed here one sample at a time, in the
main process, independent of any DataLoader.
"""

import hashlib

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import SequentialSampler

import fastprep.data as D
from fastprep import io as fio
from fastprep._seeding import check_seed, keyed_default_rng, sample_key, sample_keys
from fastprep.bench.synthetic import encode_jpeg, photo_like

CROP = 24
SEED = 1234
SIZES = [(40, 56), (48, 37), (33, 60), (52, 44), (61, 33), (35, 70), (50, 50), (44, 29), (30, 41)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("keyed")
    for i, (h, w) in enumerate(SIZES):
        sub = root / ("a" if i % 2 else "b")
        sub.mkdir(exist_ok=True)
        (sub / f"{i:02d}.jpg").write_bytes(encode_jpeg(photo_like(h, w, seed=i)))
    return str(root)


def _digest(t):
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def _epoch_digests(loader, epochs=2):
    """Per epoch: sorted digests of every delivered sample (a multiset)."""
    out = []
    for _ in range(epochs):
        ds = []
        for images, _ in loader:
            ds += [_digest(images[k]) for k in range(images.shape[0])]
        out.append(sorted(ds))
    return out


def _reference(folder, epoch, seed=SEED, crop=CROP, ratio=0.25):
    """index -> digest of the float sample, one sample at a time (see module doc)."""
    files = D.JpegFolder(folder).files
    transform = D.default_transform(crop, ratio)
    conv = D.BatchYuvScale()
    ref = {}
    for i, path in enumerate(files):
        torch.manual_seed(sample_key(seed, epoch, i))
        img = transform(fio.read_file(path))
        ref[i] = _digest(conv(img[None].clone())[0])
    return ref


class TestSampleKey:
    def test_fixed_values_and_range(self):
        # regression anchors for the hash (changing it changes every keyed run's output)
        keys = [sample_key(0, 0, 0), sample_key(1, 0, 0), sample_key(0, 1, 0), sample_key(0, 0, 1)]
        assert len(set(keys)) == 4
        assert all(0 <= k < 2**64 for k in keys)
        assert sample_key(2**64 - 1, 10**9, 2**40) == sample_key(2**64 - 1, 10**9, 2**40)

    def test_splitmix64_chain(self):
        # the documented chain, written out here: SplitMix64's finaliser over seed, then
        # epoch, then index, each step adding the golden-ratio increment modulo 2**64
        m = 2**64 - 1

        def mix(z):
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
            return z ^ (z >> 31)

        def reference(seed, epoch, index):
            h = mix((seed + 0x9E3779B97F4A7C15) & m)
            h = mix(((h ^ epoch) + 0x9E3779B97F4A7C15) & m)
            return mix(((h ^ index) + 0x9E3779B97F4A7C15) & m)

        cases = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (2**64 - 1, 10**9, 2**40), (12345, 7, 99)]
        assert [sample_key(*c) for c in cases] == [reference(*c) for c in cases]
        indices = [0, 5, 2**40, 3, 3]
        assert sample_keys(2**64 - 1, 4, indices) == [reference(2**64 - 1, 4, i) for i in indices]
        assert sample_keys(1, 2, []) == []

    def test_no_collisions_on_a_grid(self):
        keys = {sample_key(s, e, i) for s in range(3) for e in range(20) for i in range(500)}
        assert len(keys) == 3 * 20 * 500

    def test_bits_balanced(self):
        # each output bit set about half the time over consecutive indices (avalanche)
        keys = np.array([sample_key(7, 3, i) for i in range(4000)], dtype=np.uint64)
        bits = ((keys[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(float)
        assert np.all(np.abs(bits.mean(0) - 0.5) < 0.04)

    def test_check_seed(self):
        assert check_seed(None) is None and check_seed(5) == 5
        with pytest.raises(TypeError, match="seed must be an int"):
            check_seed(1.5)
        with pytest.raises(TypeError, match="seed must be an int"):
            check_seed(True)
        with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\), got -1"):
            check_seed(-1)

    def test_keyed_rng_equals_manual_seed_and_restores_stream(self):
        torch.manual_seed(99)
        expected_next = torch.randint(0, 2**30, (4,))
        torch.manual_seed(99)
        with keyed_default_rng(sample_key(1, 2, 3)):
            inside = torch.randint(0, 2**30, (4,))
        assert torch.equal(torch.randint(0, 2**30, (4,)), expected_next)  # stream untouched
        g = torch.Generator().manual_seed(sample_key(1, 2, 3))
        assert torch.equal(inside, torch.randint(0, 2**30, (4,), generator=g))

    def test_keyed_rng_restores_on_error(self):
        torch.manual_seed(5)
        state = torch.get_rng_state()
        with pytest.raises(RuntimeError, match="boom"):
            with keyed_default_rng(1):
                torch.rand(3)
                raise RuntimeError("boom")
        assert torch.equal(torch.get_rng_state(), state)


class TestKeyedDataset:
    def test_sample_equals_reference_any_position(self, folder):
        ds = D.JpegFolder(folder, transform=D.default_transform(CROP, 0.25), seed=SEED)
        conv = D.BatchYuvScale()
        for epoch in (0, 3):
            ds.set_epoch(epoch)
            ref = _reference(folder, epoch)
            for i in [5, 0, 8, 5, 2]:  # any order, repeated: same output
                img, _ = ds[i]
                assert _digest(conv(img[None].clone())[0]) == ref[i]

    def test_default_mode_draws_from_global_rng(self, folder):
        ds = D.JpegFolder(folder, transform=D.default_transform(CROP, 0.25))
        assert ds.seed is None
        torch.manual_seed(3)
        a = ds[1][0]
        torch.manual_seed(3)
        b = D.default_transform(CROP, 0.25)(fio.read_file(ds.files[1]))
        assert torch.equal(a, b)
        torch.manual_seed(3)
        ds[1]
        assert not torch.equal(ds[1][0], a)  # the stream advanced

    def test_errors(self, folder):
        with pytest.raises(TypeError, match="seed must be an int"):
            D.JpegFolder(folder, seed="1")
        ds = D.JpegFolder(folder)
        with pytest.raises(ValueError, match="epoch must be an int >= 0, got -1"):
            ds.set_epoch(-1)
        with pytest.raises(ValueError, match="seed= is for a folder"):
            D.make_loader(ds, seed=1)


# (engine, num_workers, start method, persistent workers)
# (spawn is slow: each worker re-imports torch; one persistent 2-worker loader covers it)
CONFIGS = [("processes", 0, None, False), ("processes", 1, "fork", False), ("processes", 2, "fork", True),
           ("processes", 2, "spawn", True), ("threads", 0, None, False), ("threads", 2, None, False)]


# A module-level function: since pytest 9.1 a class-scoped fixture defined as a method is
# deprecated (PytestRemovedIn10Warning, an error under filterwarnings = error).
@pytest.fixture(scope="class")
def reference(folder):
    """Per-epoch sorted sample digests of a one-process, seeded run (epochs 0 and 1)."""
    return [sorted(_reference(folder, e).values()) for e in range(2)]


class TestKeyedLoader:

    @pytest.mark.parametrize("engine,workers,context,persistent", CONFIGS)
    def test_same_batches_for_any_workers(self, folder, reference, engine, workers, context, persistent):
        loader = D.make_loader(folder, batch_size=4, num_workers=workers, crop_size=CROP, device="cpu",
                               seed=SEED, multiprocessing_context=context, persistent_workers=persistent,
                               engine=engine)
        got = _epoch_digests(loader, epochs=2)
        assert got == reference
        assert not set(got[0]) & set(got[1])  # a new epoch, new windows and masks

    def test_resume_at_epoch(self, folder, reference):
        loader = D.make_loader(folder, batch_size=4, num_workers=0, crop_size=CROP, device="cpu", seed=SEED)
        loader.set_epoch(1)
        assert _epoch_digests(loader, epochs=1) == [reference[1]]
        assert loader.epoch == 2


class TestSamplerAndDistributed:
    def test_sampler_order_and_epochs(self, folder):
        class Recorder(SequentialSampler):
            epochs = []

            def set_epoch(self, e):
                self.epochs.append(e)

        ds = D.JpegFolder(folder)
        sampler = Recorder(range(len(ds.files) - 1))
        loader = D.make_loader(folder, batch_size=3, num_workers=0, crop_size=CROP, device="cpu",
                               mask_ratio=0, sampler=sampler, shuffle=True)
        for _ in range(2):
            targets = torch.cat([t for _, t in loader])
            assert targets.tolist() == ds.targets[:-1]
        assert Recorder.epochs == [0, 1]

    def test_distributed_needs_process_group(self, folder):
        with pytest.raises(RuntimeError, match="initialised process group"):
            D.make_loader(folder, distributed=True, num_workers=0, device="cpu")
        with pytest.raises(ValueError, match="either sampler= or distributed=True"):
            D.make_loader(folder, distributed=True, sampler=[0, 1], num_workers=0, device="cpu")

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_distributed_single_rank(self, folder, tmp_path, engine):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
        try:
            loader = D.make_loader(folder, batch_size=4, num_workers=0, crop_size=CROP, device="cpu",
                                   seed=SEED, distributed=True, engine=engine)
            sampler = loader.loader.sampler
            assert isinstance(sampler, D.EpochSampler)
            assert (sampler.rank, sampler.world_size, sampler.seed) == (0, 1, SEED)
            orders = []
            for epoch in range(2):
                loader.set_epoch(epoch)
                assert sampler.epoch == epoch  # set now: list(sampler) is this epoch's order
                order = list(sampler)
                targets = torch.cat([t for _, t in loader]).tolist()
                assert targets == [loader.loader.dataset.targets[i] for i in order]
                orders.append(order)
            assert sorted(orders[0]) == list(range(len(SIZES)))
            assert orders[0] != orders[1]  # reshuffled per epoch
        finally:
            dist.destroy_process_group()

    def test_rank_distinct_worker_seeds(self, folder, tmp_path, monkeypatch):
        """Default RNG mode: ranks that called torch.manual_seed alike still give their
        workers different base seeds (the epoch's worker generator mixes in the rank), and
        share one order (its seed is 0 on every rank)."""
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
        try:
            monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
            seeds, orders = [], []
            for rank in (0, 1):
                monkeypatch.setattr(dist, "get_rank", lambda group=None, r=rank: r)
                loader = D.make_loader(folder, num_workers=1, device="cpu", distributed=True,
                                       engine="processes")
                sampler = loader.loader.sampler
                assert sampler.rank == rank and sampler.world_size == 2
                torch.manual_seed(0)
                iter(loader)  # sets the epoch up (workers start at the first next())
                seeds.append(loader.loader.generator.initial_seed())
                orders.append(sampler.global_order().tolist())
            assert seeds[0] != seeds[1]
            assert orders[0] == orders[1]
        finally:
            dist.destroy_process_group()
