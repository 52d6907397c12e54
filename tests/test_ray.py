"""fastprep.ray: the per-sample work on Ray Data tasks equals the DataLoader path.

Runs a local Ray instance (``ray.init(num_cpus=2)``), started once for the module; the
first dataset execution starts Ray's worker processes (seconds on a small machine).
Skipped when Ray is not installed (the ``ray`` extra; CI installs it).
"""

import hashlib
import logging
import os
import re
import signal
import sys
import time

import numpy as np
import pytest
import torch

ray = pytest.importorskip(
    "ray", reason="Ray Data not installed (the ray extra: pip install --no-build-isolation -e '.[ray]')")
pytest.importorskip("ray.data")

from torchvision.transforms import v2  # noqa: E402

import fastprep.data as D  # noqa: E402
from fastprep import io as fio  # noqa: E402
from fastprep.bench.synthetic import encode_jpeg, photo_like  # noqa: E402
from fastprep.data.native import Unsupported, native_pipeline  # noqa: E402
from fastprep.ray import DecodeBatch, RayLoader, image_columns, read_jpegs  # noqa: E402
from fastprep.transforms import DecodeRandomResizedCrop, MultiView, OnDecoded  # noqa: E402

# Ray's own deprecation notices (raised inside ray.*) are not ours to fix; nor is torch's
# once-per-process notice when Ray Data's iter_torch_batches turns a read-only Arrow buffer into
# a tensor in its own collate thread (whether a block arrives read-only depends on Ray's
# batching, so it shows in some runs only).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*", "ignore::FutureWarning:ray.*",
                                        "ignore:The given NumPy array is not writable:UserWarning")

CROP = 24
SEED = 77
SIZES = [(40, 56), (48, 37), (33, 60), (52, 44), (61, 33), (35, 70), (50, 50), (44, 29), (30, 41), (37, 38)]


def _digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _sample_digests(batches):
    """Sorted ``"digest/digest/...:target"`` of every delivered sample, one digest per view:
    ``(images, targets)`` batches, or a MultiView's ``(views, targets)``."""
    out = []
    for images, targets in batches:
        views = images if isinstance(images, list) else [images]
        assert all(v.shape[0] == len(targets) for v in views)
        out += ["/".join(_digest(v[k]) for v in views) + f":{int(targets[k])}" for k in range(len(targets))]
    return sorted(out)


def _trivialaugment(lanczos=False):
    """A v2 ImageNet recipe, unchanged: float output (ToDtype + Normalize). Lanczos: refused by
    the native engine (the per-sample path)."""
    mode = v2.InterpolationMode.LANCZOS if lanczos else v2.InterpolationMode.BILINEAR
    return v2.Compose([v2.RandomResizedCrop(CROP, interpolation=mode), v2.RandomHorizontalFlip(),
                       v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(D.IMAGENET_MEAN, D.IMAGENET_STD)])


def _three_views(native=True):
    """A 3-view MultiView (uint8): a fastprep decode view and two v2 views of another size.
    ``native=False``: the last view resizes with Lanczos, which the native engine refuses."""
    mode = v2.InterpolationMode.BILINEAR if native else v2.InterpolationMode.LANCZOS
    return MultiView([DecodeRandomResizedCrop(CROP, flip_p=0.5),
                      v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()]),
                      v2.Compose([v2.RandomResizedCrop(16, interpolation=mode),
                                  v2.ColorJitter(0.4, 0.4, 0.2, 0.1), v2.RandomGrayscale(0.3)])])


def _not_called(data):
    raise AssertionError("the per-sample transform ran; the native pipeline should have")


def _make_folder(root, corrupt=False):
    for i, (h, w) in enumerate(SIZES):
        sub = root / ("a" if i % 3 else "b")
        sub.mkdir(exist_ok=True, parents=True)
        (sub / f"{i:02d}.jpg").write_bytes(encode_jpeg(photo_like(h, w, seed=i)))
    if corrupt:
        (root / "a" / "99-broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    return str(root)


def _shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _ray_pids():
    pids = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cmd.startswith(b"ray::") or b"/ray/" in cmd and (b"raylet" in cmd or b"gcs_server" in cmd):
            pids.add(int(pid))
    return pids


@pytest.fixture(scope="module")
def ray_local():
    shm_before, pids_before = _shm(), _ray_pids()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()
    deadline = time.monotonic() + 30
    while _ray_pids() - pids_before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_pids() - pids_before, "Ray processes left after ray.shutdown()"
    assert not {n for n in _shm() - shm_before if "ray" in n.lower() or "plasma" in n.lower()}


def _dataloader_digests(folder, epoch):
    """Multiset of the make_loader output for ``epoch`` (sample-keyed, one process)."""
    loader = D.make_loader(folder, batch_size=4, num_workers=0, crop_size=CROP, device="cpu", seed=SEED)
    loader.set_epoch(epoch)
    return sorted(_digest(x[k]) for x, _ in loader for k in range(x.shape[0]))


class TestDecodeBatch:
    """The map_batches callable, called directly (no Ray scheduling)."""

    def _batch(self, folder, indices):
        files = D.JpegFolder(folder).files
        return {"bytes": np.array([fio.read_file(files[i]).numpy().tobytes() for i in indices], dtype=object),
                "label": np.zeros(len(indices), dtype=np.int64), "index": np.array(indices, dtype=np.int64),
                "path": np.array([files[i] for i in indices], dtype=object)}

    def test_keyed_output_equals_dataset(self, tmp_path):
        folder = _make_folder(tmp_path)
        ds = D.JpegFolder(folder, transform=D.default_transform(CROP, 0.25), seed=SEED)
        ds.set_epoch(2)
        out = DecodeBatch(crop_size=CROP, seed=SEED, epoch=2)(self._batch(folder, [3, 0, 7]))
        assert out["image"].dtype == "uint8" and out["image"].shape == (3, 3, CROP, CROP)
        for k, i in enumerate([3, 0, 7]):
            assert torch.equal(torch.from_numpy(out["image"][k]), ds[i][0])
        assert out["index"].tolist() == [3, 0, 7]

    @pytest.mark.parametrize("transform", ["default", "recipe"])
    def test_lists_and_falls_back_as_the_dataset(self, tmp_path, transform):
        # A PNG among the JPEGs: Ray lists it as JpegFolder does and decodes it through the
        # same full-decode fallback, drawing the same parameters (native and per-sample paths).
        from PIL import Image

        folder = _make_folder(tmp_path)
        Image.fromarray(photo_like(45, 52, seed=99)).save(tmp_path / "b" / "50-photo.png")
        tf = (D.default_transform(CROP, 0.25) if transform == "default"
              else D.RECIPES["imagenet-train"]({}))
        ds = D.JpegFolder(folder, transform=tf, seed=SEED)
        paths = RayLoader(folder).paths  # no Ray needed for the listing
        assert paths == ds.files and any(p.endswith(".png") for p in paths)
        png = next(i for i, p in enumerate(ds.files) if p.endswith(".png"))
        indices = [0, png, 3]
        with pytest.warns(UserWarning, match="PNG file; decoded in full by Pillow"):
            out = DecodeBatch(tf, seed=SEED)(self._batch(folder, indices))
        assert out["index"].tolist() == indices
        with pytest.warns(UserWarning, match="PNG"):
            want = [ds[i][0] for i in indices]
        for k, w in enumerate(want):
            assert torch.equal(torch.from_numpy(out["image"][k]), w)
        with pytest.raises(fio.DecodeError, match="not a JPEG"):
            DecodeBatch(tf, seed=SEED, jpeg_only=True)(self._batch(folder, indices))

    @pytest.mark.parametrize("native", [True, False])
    def test_v2_float_recipe_equals_dataset(self, tmp_path, monkeypatch, native):
        """An unchanged v2 recipe ending in ToDtype + Normalize is wrapped in OnDecoded (as
        make_loader does) and gives float32 rows equal to the dataset's per-sample call: one
        native call per batch where the threads engine takes the recipe, per sample otherwise."""
        folder = _make_folder(tmp_path)
        recipe = _trivialaugment(lanczos=not native)
        ds = D.JpegFolder(folder, transform=OnDecoded(recipe), seed=SEED)
        ds.set_epoch(1)
        decode = DecodeBatch(recipe, seed=SEED, epoch=1)
        assert isinstance(decode.transform, OnDecoded) and decode.transform.pipeline is recipe
        if native:
            monkeypatch.setattr(decode, "transform", _not_called)
        else:
            with pytest.raises(Unsupported, match="lanczos"):
                native_pipeline(OnDecoded(recipe))
        out = decode(self._batch(folder, [4, 1, 8]))
        assert sorted(out) == ["image", "index", "label"]
        assert out["image"].dtype == np.float32 and out["image"].shape == (3, 3, CROP, CROP)
        for k, i in enumerate([4, 1, 8]):
            assert torch.equal(torch.from_numpy(out["image"][k]), ds[i][0])

    @pytest.mark.parametrize("native", [True, False])
    def test_multiview_columns_equal_dataset(self, tmp_path, monkeypatch, native):
        """A 3-view MultiView gives the columns image_0..image_2, view v of each sample in
        image_v, equal to the dataset's per-sample call (native and per-sample paths); a batch
        whose samples were all dropped still has every column, of the views' shapes."""
        folder = _make_folder(tmp_path, corrupt=True)
        files = D.JpegFolder(folder).files
        bad = next(i for i, f in enumerate(files) if "broken" in f)
        mv = _three_views(native)
        assert image_columns(mv) == ["image_0", "image_1", "image_2"] and image_columns(D.default_transform()) == [
            "image"]
        ds = D.JpegFolder(folder, transform=mv, seed=SEED)
        decode = DecodeBatch(mv, seed=SEED, on_error="skip")
        if native:
            monkeypatch.setattr(decode, "transform", _not_called)
        else:
            with pytest.raises(Unsupported, match="view 2: .*lanczos"):
                native_pipeline(mv)
        indices = [2, 9, bad, 5]
        out = decode(self._batch(folder, indices))
        assert sorted(out) == ["image_0", "image_1", "image_2", "index", "label"]
        assert out["index"].tolist() == [2, 9, 5]
        for k, i in enumerate([2, 9, 5]):
            want = ds[i][0]
            for v in range(3):
                assert torch.equal(torch.from_numpy(out[f"image_{v}"][k]), want[v]), (i, v)
        empty = DecodeBatch(mv, seed=SEED, on_error="skip")(self._batch(folder, [bad]))
        want_shapes = [(0, 3, CROP, CROP), (0, 3, 16, 16), (0, 3, 16, 16)] if native else [(0, 3, 1, 1)] * 3
        assert [empty[f"image_{v}"].shape for v in range(3)] == want_shapes

    def test_on_error(self, tmp_path):
        folder = _make_folder(tmp_path, corrupt=True)
        files = D.JpegFolder(folder).files
        bad = next(i for i, f in enumerate(files) if "broken" in f)
        batch = self._batch(folder, [0, bad, 1])
        with pytest.raises(fio.DecodeError, match="99-broken.jpg"):
            DecodeBatch(crop_size=CROP)(batch)
        out = DecodeBatch(crop_size=CROP, on_error="skip")(batch)
        assert out["index"].tolist() == [0, 1]
        empty = DecodeBatch(crop_size=CROP, on_error="skip")(self._batch(folder, [bad]))
        assert empty["image"].shape == (0, 3, CROP, CROP)
        with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'x'"):
            DecodeBatch(on_error="x")


class TestRayLoader:
    def test_matches_dataloader_bit_for_bit(self, ray_local, tmp_path):
        folder = _make_folder(tmp_path)
        rows = read_jpegs(folder)
        assert rows.count() == len(SIZES)
        loader = RayLoader(folder, batch_size=4, crop_size=CROP, seed=SEED, device="cpu", map_batch_size=3)
        assert loader.actors() == 2  # the default: one decode task per CPU of ray.init(num_cpus=2)
        loader.set_epoch(1)
        got = sorted(_digest(x[k]) for x, _ in loader for k in range(x.shape[0]))
        assert got == _dataloader_digests(folder, 1)
        assert loader.skipped == 0 and loader.epoch == 2

    def test_v2_float_recipe_matches_make_loader(self, ray_local, tmp_path):
        """``transform=`` an unchanged v2 TrivialAugmentWide recipe with ToDtype + Normalize:
        delivered as it is (cast to dtype, not YUV-converted), the same multiset of samples as
        make_loader's, pixel for pixel."""
        folder = _make_folder(tmp_path)
        recipe = _trivialaugment()
        loader = RayLoader(folder, batch_size=4, transform=recipe, seed=SEED, device="cpu", map_batch_size=3,
                           dtype=torch.float16)
        batches = list(loader)
        assert all(x.dtype == torch.float16 and x.shape[1:] == (3, CROP, CROP) for x, _ in batches)
        want = D.make_loader(folder, batch_size=4, transform=recipe, seed=SEED, device="cpu", dtype=torch.float16)
        assert want.engine == "threads", want.engine_reason
        assert _sample_digests(batches) == _sample_digests(want)

    def test_multiview_matches_make_loader(self, ray_local, tmp_path):
        """A 3-view MultiView: RayLoader yields (list of 3 per-view batches, targets), each view
        RGB / 255 as make_loader delivers ``transform=``, the same multiset of samples."""
        folder = _make_folder(tmp_path)
        loader = RayLoader(folder, batch_size=4, transform=_three_views(), seed=SEED, device="cpu", map_batch_size=3)
        assert loader.columns == ["image_0", "image_1", "image_2"]
        loader.set_epoch(1)
        batches = list(loader)
        for views, _ in batches:
            assert isinstance(views, list) and [tuple(v.shape[1:]) for v in views] == [(3, CROP, CROP), (3, 16, 16),
                                                                                        (3, 16, 16)]
            assert all(v.dtype == torch.float32 for v in views)
        want = D.make_loader(folder, batch_size=4, transform=_three_views(), seed=SEED, device="cpu")
        want.set_epoch(1)
        assert want.engine == "threads", want.engine_reason
        assert _sample_digests(batches) == _sample_digests(want)

    def test_epoch_logs_no_error(self, ray_local, tmp_path, capfd, caplog):
        """An ordinary epoch logs nothing at error level: neither Ray core (its C++ lines,
        ``[time E pid tid] file:line: ...``, on this process's stderr) nor Python logging.
        Ray Data's actor pool logged one such line per actor and epoch (actor constructor
        arguments in the object store, with restarts on); RayLoader runs tasks."""
        folder = _make_folder(tmp_path)
        loader = RayLoader(folder, batch_size=4, crop_size=CROP, seed=SEED, device="cpu", map_batch_size=3)
        with caplog.at_level(logging.ERROR):
            assert sum(x.shape[0] for x, _ in loader) == len(SIZES)
        err = capfd.readouterr().err
        assert not re.search(r"^\[[^\]]* E \d+ \d+\]", err, re.M), err
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

    def test_concurrency_checked(self, tmp_path):
        folder = _make_folder(tmp_path)
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="concurrency must be a positive int or None"):
                RayLoader(folder, concurrency=bad)
        with pytest.raises(ValueError, match="num_cpus must be > 0"):
            RayLoader(folder, num_cpus=0)
        assert RayLoader(folder, concurrency=3, num_cpus=0.5).actors() == 3

    def test_worker_killed_once_and_bad_file(self, ray_local, tmp_path):
        """One decode task's process is SIGKILLed mid-epoch: Ray re-runs the task in another
        (Ray Data's tasks: max_retries=-1); every good sample arrives exactly once, with
        the keyed output, and the corrupt file is dropped and counted."""
        folder = _make_folder(tmp_path / "data", corrupt=True)
        marker = str(tmp_path / "killed")
        loader = RayLoader(folder, batch_size=4, crop_size=CROP, seed=SEED, concurrency=2, device="cpu",
                           map_batch_size=2, on_error="skip", transform=_KillOnce(D.default_transform(CROP, 0.25),
                                                                                   marker))
        got = sorted(_digest(x[k]) for x, _ in loader for k in range(x.shape[0]))
        assert os.path.exists(marker)  # the kill happened
        files = D.JpegFolder(folder).files
        bad = [i for i, f in enumerate(files) if "broken" in f]
        assert loader.skipped_indices == bad
        good = [f for f in files if "broken" not in f]
        assert got == _dataloader_digests_of(good, files, 0)


class TestShards:
    def test_read_webdataset_reads_packed_shards(self, ray_local, tmp_path):
        """``ray.data.read_webdataset`` reads ``fastprep.pack --format wds`` shards as they
        are: keys, classes and (Ray's own decoding) the original files' pixels."""
        from PIL import Image

        from fastprep.pack import pack_shards

        folder = _make_folder(tmp_path / "data")
        pack_shards(folder, tmp_path / "shards", shard_size=5000, workers=1, progress=False)
        shards = D.ShardDataset(tmp_path / "shards")
        assert len(shards.shards) > 1
        rows = ray.data.read_webdataset(str(tmp_path / "shards"), file_extensions=["tar"]).take_all()
        by_key = {row["__key__"]: row for row in rows}
        assert len(rows) == len(by_key) == len(shards)
        files = D.JpegFolder(folder).files
        for i, name in enumerate(shards.files):
            row = by_key[name.split(":", 1)[1]]
            assert row["cls"] == shards.targets[i]
            with Image.open(files[i]) as img:
                assert np.array_equal(row["jpg"], np.asarray(img.convert("RGB")))


def _dataloader_digests_of(good, files, epoch):
    """The samples of ``good`` as RayLoader(transform=default_transform) delivers them: RGB / 255
    (make_loader's rule: YUV for the default pipeline only)."""
    ds = D.JpegDataset(files, transform=D.default_transform(CROP, 0.25), seed=SEED)
    ds.set_epoch(epoch)
    return sorted(_digest(ds[files.index(f)][0].float() / 255) for f in good)


class _KillOnce:
    """A per-sample transform that SIGKILLs its own process the first time it runs anywhere."""

    def __init__(self, transform, marker):
        self.transform, self.marker = transform, marker

    def __call__(self, data):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return self.transform(data)
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


# Ray's workers cannot import this test module: ship _KillOnce by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_unseeded_workers_draw_distinct_streams(tmp_path):
    """Without a seed each DecodeBatch (one per Ray worker process and epoch) reseeds its process's generator
    from os.urandom: two instances in fresh states give different windows/masks."""
    folder = _make_folder(tmp_path)
    batch = TestDecodeBatch()._batch(folder, [0, 1, 2])
    state = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        a = DecodeBatch(crop_size=CROP)(batch)["image"]
        torch.manual_seed(0)  # what a fresh process would start from, before the constructor
        b = DecodeBatch(crop_size=CROP)(batch)["image"]
    finally:
        torch.set_rng_state(state)
    assert not np.array_equal(a, b)
