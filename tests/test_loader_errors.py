"""What the consumer of ``make_loader`` sees when files are bad, on both engines.

* An error arrives at the ``next()`` of its own batch, after every batch before it
  (``DevicePrefetcher`` stages one batch ahead, but holds a failure back until its turn).
* Its first line names the file and its index, the same on both engines (the processes
  engine's worker errors are re-raised with the worker's message first), without an
  object address.
* ``on_error="skip"``: ``dataset.skipped`` counts the samples replaced in the batches
  delivered, and ``dataset.skipped_files`` names them, identically on both engines.
* ``transform=``: a pipeline on decoded images is decoded by the loader (``OnDecoded``);
  a dataset's own transform that needs one is refused before any worker starts;
  torchvision's error on the encoded bytes says what ``transform=`` receives;
  batches are RGB unless ``BatchOutput`` says otherwise; images of another shape are named.

References: the epoch's order written out (``epoch_permutation``), the files' own bytes,
and the decode transforms run per sample in the test. Each sample's target is its index
(one class folder per file), so a batch names the samples it holds.
"""

import io
import os

import pytest
import torch
from torchvision.transforms import v2

import fastprep.data as D
from fastprep import io as fio
from fastprep._seeding import epoch_permutation, keyed_default_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.pack import format_summary, pack_folder
from fastprep.transforms import Compose, DecodeCenterCrop, DecodeRandomResizedCrop, RandomMask

from conftest import make_jpeg

CROP = 16
SEED = 5
N = 12
ENGINES = ["threads", "processes"]


def _folder(root, n=N, replace=None) -> list[str]:
    """``n`` class folders ``cNN/x.jpg`` (sample i has target i); ``replace``: index -> bytes."""
    replace = replace or {}
    paths = []
    for i in range(n):
        path = os.path.join(root, f"c{i:02d}", "x.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(replace[i] if i in replace else encode_jpeg(photo_like(20 + i % 5, 24 + i % 3, seed=i)))
        paths.append(path)
    return paths


def _loader(source, engine, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("crop_size", CROP)
    kw.setdefault("device", "cpu")
    kw.setdefault("shuffle", False)
    kw.setdefault("num_workers", 2)
    if engine == "processes" and kw["num_workers"] > 0:
        kw.setdefault("multiprocessing_context", "fork")
    return D.make_loader(source, engine=engine, **kw)


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


# ------------------------------------------------------------------ the error at its batch


class TestErrorAtItsBatch:
    @pytest.mark.parametrize("engine", ENGINES)
    @pytest.mark.parametrize("bad", [1, 5, 10])  # in batch 0, 1 and 2 (batches of 4)
    def test_the_batches_before_the_bad_file_then_its_error(self, tmp_path, engine, bad):
        paths = _folder(tmp_path, replace={bad: b"not a JPEG at all"})
        got = []
        with pytest.raises(fio.DecodeError) as info:
            for _, targets in _loader(str(tmp_path), engine):
                got.append(targets.tolist())
        assert got == [list(range(4 * k, 4 * k + 4)) for k in range(bad // 4)]
        assert _first_line(info.value).startswith(f"cannot decode {paths[bad]!r} (index {bad}): not a JPEG")

    def test_same_message_on_both_engines(self, tmp_path):
        _folder(tmp_path, replace={6: b"\xff\xd8\xff\xe0 truncated"})
        messages = []
        for engine in ENGINES:
            with pytest.raises(fio.DecodeError) as info:
                list(_loader(str(tmp_path), engine))
            messages.append(str(info.value))
        assert messages[0] == messages[1]

    @pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA"))])
    def test_prefetcher_stages_ahead_and_holds_a_failure_back(self, device):
        """The next batch is still fetched and staged before the current one is handed
        out (the overlap on CUDA); its failure is raised only when its turn comes."""
        pulled = []

        class Batches:
            def __iter__(self):
                for k in range(3):
                    pulled.append(k)
                    yield torch.full((1, 3, 2, 2), k, dtype=torch.uint8), torch.tensor([k])
                pulled.append("failed")
                raise RuntimeError("batch 3 is bad")

        it = iter(D.DevicePrefetcher(Batches(), device))
        assert next(it)[1].tolist() == [0] and pulled == [0, 1]
        assert next(it)[1].tolist() == [1] and pulled == [0, 1, 2]
        assert next(it)[1].tolist() == [2] and pulled == [0, 1, 2, "failed"]
        with pytest.raises(RuntimeError, match="batch 3 is bad"):
            next(it)


# ------------------------------------------------------------------ what the error says


class TestErrorNamesTheFile:
    @pytest.mark.parametrize("on_error", ["raise", "skip"])
    def test_gif_named_jpg_no_object_address(self, tmp_path, on_error):
        """Pillow names its file object by address (``<_io.BytesIO object at 0x...>``),
        different in each process; the error names the file instead, the same on both
        engines."""
        paths = _folder(tmp_path, replace={6: b"GIF89a" + bytes(40)})
        messages = []
        for engine in ENGINES:
            loader = _loader(str(tmp_path), engine, on_error=on_error)
            if on_error == "raise":
                with pytest.raises(fio.DecodeError) as info:
                    list(loader)
                messages.append(str(info.value))
            else:
                list(loader)
                (record,) = loader.dataset.skipped_files
                assert record.index == 6 and record.path == paths[6]
                messages.append(record.reason)
        assert messages[0] == messages[1]
        assert "0x" not in messages[0] and "object at" not in messages[0]
        assert "starts like a GIF file" in messages[0]
        if on_error == "raise":
            assert messages[0].startswith(f"cannot decode {paths[6]!r} (index 6): ")

    @pytest.mark.parametrize("workers", [0, 2])
    def test_grayscale_in_a_user_pipeline_named_at_collate(self, tmp_path, workers):
        paths = _folder(tmp_path, replace={5: make_jpeg("gray", 24, 24, seed=3)})
        transform = v2.Compose([DecodeCenterCrop(CROP, mode="UNCHANGED")])  # gray stays 1 channel
        with pytest.raises(ValueError) as info:
            list(_loader(str(tmp_path), "processes", transform=transform, num_workers=workers))
        assert _first_line(info.value).startswith(
            f"{paths[5]!r} (index 5): the per-sample transform gave (1, {CROP}, {CROP}) torch.uint8, the batch's "
            f"other images are (3, {CROP}, {CROP}) torch.uint8")
        assert "grayscale" in str(info.value)

    def test_worker_error_keeps_its_type_and_traceback(self, tmp_path):
        paths = _folder(tmp_path, replace={2: b""})
        with pytest.raises(fio.DecodeError) as info:
            list(_loader(str(tmp_path), "processes", num_workers=1))
        assert _first_line(info.value).startswith(f"cannot decode {paths[2]!r} (index 2)")
        cause = info.value.__cause__
        assert isinstance(cause, fio.DecodeError)  # torch's re-raise, with the worker's traceback
        assert str(cause).startswith("Caught DecodeError in DataLoader worker process 0.")
        assert "Traceback (most recent call last)" in str(cause)


# ------------------------------------------------------------------ skips


@pytest.fixture(scope="module")
def skip_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("skips")
    paths = _folder(root, TestSkipped.SIZE, {i: b"text, not an image %d" % i for i in TestSkipped.BAD})
    return str(root), paths


class TestSkipped:
    BAD = (2, 5, 9, 13, 17, 22)
    SIZE = 24

    @pytest.mark.parametrize("stop", [1, 3, None])  # batches taken before breaking out; None: all
    def test_count_and_files_of_the_delivered_batches(self, skip_folder, stop):
        root, paths = skip_folder
        out = {}
        for engine in ENGINES:
            loader = _loader(root, engine, seed=SEED, on_error="skip", shuffle=True)
            got = []
            for k, (images, targets) in enumerate(loader):
                got.append((images.clone(), targets.clone()))
                if k + 1 == stop:
                    break
            out[engine] = got, loader.dataset.skipped, loader.dataset.skipped_files
        (got, skipped, files), (want, want_skipped, want_files) = out["threads"], out["processes"]
        assert len(got) == len(want) and all(torch.equal(a, b) and torch.equal(s, t)
                                             for (a, s), (b, t) in zip(got, want))
        delivered = epoch_permutation(SEED, 0, self.SIZE)[:4 * len(got)].tolist()
        expected = [(i, paths[i]) for i in delivered if i in self.BAD]
        assert skipped == want_skipped == len(expected)
        assert [(r.index, r.path) for r in files] == expected
        assert files == want_files
        assert all(r.reason.startswith("not a JPEG") for r in files)

    def test_first_max_kept_every_one_counted(self, skip_folder):
        root, paths = skip_folder
        loader = _loader(root, "threads", on_error="skip")
        loader.dataset.MAX_SKIPPED_FILES = 2
        list(loader)
        assert loader.dataset.skipped == len(self.BAD)
        assert [(r.index, r.path) for r in loader.dataset.skipped_files] == [(i, paths[i]) for i in self.BAD[:2]]
        loader.dataset.reset_skipped()
        assert loader.dataset.skipped == 0 and loader.dataset.skipped_files == []

    def test_dataset_alone_counts_when_replaced(self, skip_folder):
        root, paths = skip_folder
        ds = D.JpegFolder(root, transform=DecodeCenterCrop(CROP), on_error="skip")
        ds[1], ds[2]
        assert ds.skipped == 1 and [r[:2] for r in ds.skipped_files] == [(2, paths[2])]

    @pytest.mark.parametrize("engine", ENGINES)
    def test_loader_dataset_is_the_dataset(self, skip_folder, engine):
        root, _ = skip_folder
        loader = _loader(root, engine)
        assert loader.dataset is loader.loader.dataset and isinstance(loader.dataset, D.JpegFolder)
        assert loader.dataset.skipped == 0


# ------------------------------------------------------------------ transform=


class _TorchvisionOnBytes:
    """A user transform that runs a torchvision transform on what it receives."""

    def __call__(self, data):
        return v2.RandomResizedCrop(CROP)(data)


class TestTransform:
    def test_input_kind(self):
        import torchvision.transforms as v1

        from fastprep.transforms._compile import input_kind as _transform_input_kind

        encoded = [DecodeRandomResizedCrop(8), D.default_transform(8),
                   v2.Compose([DecodeCenterCrop(8), RandomMask(0.5)]),
                   v2.RandomChoice([DecodeCenterCrop(8), DecodeRandomResizedCrop(8)]),
                   torch.nn.Sequential(DecodeCenterCrop(8), v2.RandomHorizontalFlip())]
        decoded = [v2.RandomResizedCrop(8), v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]),
                   v1.Compose([v1.RandomCrop(8)]), RandomMask(0.5), v2.RandomApply([v2.ColorJitter(0.1)]),
                   v2.RandomChoice([DecodeCenterCrop(8), v2.CenterCrop(8)])]
        unknown = [lambda data: data, _TorchvisionOnBytes(), v2.Lambda(lambda x: x), Compose([]),
                   v2.Compose([fio.decode_jpeg, v2.RandomResizedCrop(8)])]
        assert [_transform_input_kind(t) for t in encoded] == ["encoded"] * len(encoded)
        assert [_transform_input_kind(t) for t in decoded] == ["decoded"] * len(decoded)
        assert [_transform_input_kind(t) for t in unknown] == ["unknown"] * len(unknown)

    def test_torchvision_pipeline_in_a_dataset_refused_before_workers_start(self, tmp_path):
        _folder(tmp_path)
        transform = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32)])
        with pytest.raises(ValueError) as info:
            D.make_loader(D.JpegFolder(str(tmp_path), transform=transform), engine="processes", num_workers=2,
                          multiprocessing_context="fork")
        message = str(info.value)
        assert message.startswith("transform= receives each file's encoded bytes (a uint8 1-D tensor)")
        assert "OnDecoded(transform)" in message and "make_loader(transform=...)" in message

    @pytest.mark.parametrize("engine", ENGINES)
    def test_torchvision_pipeline_decoded_by_the_loader(self, tmp_path, engine):
        paths = _folder(tmp_path)
        transform = v2.Compose([v2.RandomResizedCrop(CROP), v2.RandomHorizontalFlip()])
        loader = _loader(str(tmp_path), engine, transform=transform, seed=5, batch_size=len(paths))
        images, _ = next(iter(loader))
        want = []
        for i, path in enumerate(paths):
            with keyed_default_rng(sample_key(5, 0, i)):
                want.append(transform(fio.decode_jpeg(fio.read_file(path))))
        torch.testing.assert_close(images, torch.stack(want).float() / 255, rtol=0, atol=0)

    def test_torchvision_error_from_a_worker_says_what_transform_receives(self, tmp_path):
        paths = _folder(tmp_path)
        with pytest.raises(TypeError) as info:
            list(_loader(str(tmp_path), "processes", transform=_TorchvisionOnBytes()))
        assert _first_line(info.value).startswith(f"{paths[0]!r} (index 0): Input tensor should have at least two "
                                                  "dimensions")
        assert "transform= receives each file's encoded bytes (a uint8 1-D tensor)" in str(info.value)

    @pytest.mark.parametrize("engine", ENGINES)
    def test_rgb_by_default(self, tmp_path, engine):
        paths = _folder(tmp_path)
        reference = torch.stack([DecodeCenterCrop(CROP)(p) for p in paths]).float() / 255
        got = torch.cat([x for x, _ in _loader(str(tmp_path), engine, transform=DecodeCenterCrop(CROP))])
        torch.testing.assert_close(got, reference, rtol=0, atol=1e-6)
        yuv = torch.cat([x for x, _ in _loader(str(tmp_path), engine, transform=DecodeCenterCrop(CROP),
                                               output=D.BatchOutput(color="yuv"))])
        torch.testing.assert_close(yuv, D.BatchYuvScale()(reference * 255), rtol=0, atol=1e-5)


# ------------------------------------------------------------------ noise


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_only_on_a_terminal():
    from fastprep._progress import progress_bar

    log = io.StringIO()
    bar = progress_bar(3, desc="work", stream=log)
    assert bar.disable
    bar.update(3)
    bar.close()
    assert log.getvalue() == ""
    tty = _Terminal()
    bar = progress_bar(3, desc="work", stream=tty)
    assert not bar.disable
    bar.update(3)
    bar.close()
    assert "work" in tty.getvalue() and "3/3" in tty.getvalue()


def test_pack_summary_names_the_files_it_copied(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.jpg").write_bytes(encode_jpeg(photo_like(16, 16, seed=1)))
    for name in ("notes.txt", "b.png", "c.gif"):
        (src / "a" / name).write_bytes(b"not a jpeg " + name.encode())
    summary = pack_folder(src, tmp_path / "dst", workers=1, progress=False)
    assert summary.copied == 3 and summary.not_jpeg == ["a/b.png", "a/c.gif", "a/notes.txt"]
    text = format_summary(summary, max_listed=2)
    assert "copied unchanged (shards: stored as they are) (3):\n  a/b.png: not a JPEG\n  a/c.gif: not a JPEG\n" \
           "  ... and 1 more" in text


# ------------------------------------------------------------------ interpreter exit


def _run_script(path, text):
    import subprocess
    import sys

    path.write_text(text)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_exit_mid_epoch_is_quiet(tmp_path):
    """A threads-engine loader left mid-epoch, its prefetcher decoding in a daemon thread: the
    interpreter exits with status 0 and nothing on stderr (the engine stops its threads at
    exit; an op that still ends after that is parked by the exit gate, csrc/exit_gate.h)."""
    folder = tmp_path / "imgs" / "a"
    folder.mkdir(parents=True)
    big = make_jpeg("420", 1536, 2048)  # batches that take long enough to be mid-decode at exit
    for i in range(48):
        (folder / f"{i}.jpg").write_bytes(big)
    code = (
        "import fastprep.data as D\n"
        f"loader = D.make_loader({str(tmp_path / 'imgs')!r}, batch_size=16, num_workers=1, device='cpu', seed=0)\n"
        "it = iter(loader)\n"
        "next(it)\n"
        "print('leaving', flush=True)\n")
    for _ in range(3):  # the abort was a race: give it a few chances
        assert _run_script(tmp_path / "left.py", code) == (0, "leaving\n", "")


def test_exit_handlers_after_the_gate_still_run_ops(tmp_path):
    """The exit gate parks other threads' ops, never the exiting thread's: an atexit handler
    registered before fastprep was imported (so run after its gate closes) still decodes."""
    jpeg = tmp_path / "x.jpg"
    jpeg.write_bytes(make_jpeg("420", 40, 60))
    code = (
        "import atexit\n"
        "def last():\n"
        "    from fastprep import io as fio\n"
        f"    image = fio.decode_jpeg(fio.read_file({str(jpeg)!r}))\n"
        "    print('decoded', tuple(image.shape), flush=True)\n"
        "atexit.register(last)\n"
        "import fastprep.io\n"
        "print('leaving', flush=True)\n")
    assert _run_script(tmp_path / "late.py", code) == (0, "leaving\ndecoded (3, 40, 60)\n", "")
