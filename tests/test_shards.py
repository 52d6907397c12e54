"""WebDataset shards: ``python -m fastprep.pack SRC DST --format wds`` and
:class:`fastprep.data.ShardDataset` (layout, order, the webdataset library reading them,
random access equal to the folder's samples, fsspec URLs, resuming, bad input)."""

import contextlib
import gc
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import fastprep.data as D
import fastprep.io as fio
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.data.shards import MANIFEST_NAME, split_member_name
from fastprep.pack import pack_shards
from fastprep.pack.shards import parse_size, sample_key
from conftest import make_jpeg, png_bytes

CROP = 24
SEED = 1234
FALLBACK_WARNING = "ignore:fastprep.*decoded in full:UserWarning"


def _tree(root):
    """An ImageFolder tree: 3 classes, nested folders, a PNG, names with dots, a progressive
    JPEG, a JPEG that cannot be transcoded, files that are not samples."""
    files = {
        "cat/a.jpg": encode_jpeg(photo_like(40, 56, 1)),
        "cat/b.v2.final.JPEG": make_jpeg("420-progressive", 50, 70, seed=2),
        "cat/deep/c.jpg": make_jpeg("gray", 33, 45, seed=3),
        "cat/notes.txt": b"not an image\n",
        "dog/100%.jpg": make_jpeg("444", 36, 44, seed=4),
        "dog/d.png": png_bytes(30, 41, 5),
        "dog/e.jpeg": make_jpeg("422", 48, 37, seed=6),
        "emu/f.jpg": make_jpeg("cmyk", 40, 40, seed=7),
        "emu/g.jpg": encode_jpeg(photo_like(61, 33, 8)),
        "emu/h.jpg": encode_jpeg(photo_like(52, 44, 9)),
        "README": b"beside the class folders: not a sample\n",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root, files


@pytest.fixture
def tree(tmp_path):
    return _tree(tmp_path / "src")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """(src, dst): the tree packed into shards of at most 20 kB (several shards)."""
    base = tmp_path_factory.mktemp("packed")
    src, _ = _tree(base / "src")
    pack_shards(src, base / "dst", shard_size=20_000, workers=1, progress=False)
    return src, base / "dst"


def _members(tar_path):
    with tarfile.open(tar_path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]


def _run_pack(capsys, *args):
    """``python -m fastprep.pack ARGS`` in this process: (exit code, stdout, stderr)."""
    from fastprep.pack.__main__ import main

    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _shard_files(dst):
    return sorted(p.name for p in dst.iterdir())


class TestLayout:
    def test_keys(self):
        assert sample_key("cat/a.jpg") == "cat/a"
        assert sample_key(os.path.join("cat", "x.v2.jpg")) == "cat/x%2Ev2"
        assert sample_key("d.x/100%.a.jpg") == "d.x/100%25%2Ea"  # dots in folders are fine for WebDataset
        assert split_member_name(sample_key("cat/b.v2.final.JPEG") + ".jpg") == ("cat/b%2Ev2%2Efinal", "jpg")
        assert split_member_name("a/b.c.jpg") == ("a/b", "c.jpg")
        assert split_member_name("a/.hidden") == (None, None)

    def test_parse_size(self):
        assert parse_size("1GB") == 10**9 and parse_size("1GiB") == 2**30 and parse_size("500 MB") == 5 * 10**8
        assert parse_size("123") == 123 and parse_size(7) == 7 and parse_size("1.5kb") == 1500
        for bad in ("", "1 parsec", "-1", "0", "GB"):
            with pytest.raises(ValueError, match="shard size"):
                parse_size(bad)

    def test_shards_members_manifest(self, packed):
        src, dst = packed
        folder = D.JpegFolder(src)
        manifest = json.loads((dst / MANIFEST_NAME).read_text())
        assert manifest["format"] == "fastprep-webdataset" and manifest["version"] == 1
        assert manifest["classes"] == folder.classes == ["cat", "dog", "emu"]
        assert manifest["num_samples"] == len(folder) == 9
        names = [e["name"] for e in manifest["shards"]]
        assert len(names) > 1 and names == [f"shard-{i:06d}.tar" for i in range(len(names))]
        assert _shard_files(dst) == sorted(names + [MANIFEST_NAME] + [n[:-4] + ".idx.json" for n in names])
        # members: <key>.<ext> then <key>.cls, in the folder's sorted order across the shards
        members = []
        for entry in manifest["shards"]:
            got = _members(dst / entry["name"])
            assert len(got) == 2 * entry["num_samples"] and entry["bytes"] == os.path.getsize(dst / entry["name"])
            assert entry["num_samples"] == 1 or entry["bytes"] <= 20_000
            members += got
        expected_keys = [sample_key(os.path.relpath(p, src)) for p in folder.files]
        assert [split_member_name(n)[0] for n, _ in members[0::2]] == expected_keys
        assert [n for n, _ in members[1::2]] == [k + ".cls" for k in expected_keys]
        assert [int(d) for _, d in members[1::2]] == folder.targets
        for (name, data), path in zip(members[0::2], folder.files):
            original = Path(path).read_bytes()
            if path.endswith(".png"):
                assert name.endswith(".png") and data == original  # non-JPEG: own extension, unchanged
            else:
                assert name.endswith(".jpg")
                assert fio.jpeg_info(data).restart_roi  # transcoded...
                assert torch.equal(fio.decode_jpeg(data, "UNCHANGED"), fio.decode_jpeg(original, "UNCHANGED"))

    def test_dataset_order_targets_bytes(self, packed):
        src, dst = packed
        folder, shards = D.JpegFolder(src), D.ShardDataset(dst)
        assert len(shards) == len(folder) and shards.targets == folder.targets and shards.classes == folder.classes
        assert shards.class_to_idx == folder.class_to_idx
        tars = {e: dict(_members(e)) for e in map(str, sorted(dst.glob("*.tar")))}
        for i in range(len(shards)):
            data, name = shards.read_encoded(i)
            shard, key = name.split(":", 1)
            assert shards.files[i] == name and key == sample_key(os.path.relpath(folder.files[i], src))
            ext = "png" if folder.files[i].endswith(".png") else "jpg"
            assert data.dtype == torch.uint8 and data.dim() == 1
            assert data.numpy().tobytes() == tars[str(dst / shard)][f"{key}.{ext}"]

    def test_webdataset_reads_them(self, packed):
        wds = pytest.importorskip("webdataset")
        src, dst = packed
        shards = D.ShardDataset(dst)
        urls = [str(p) for p in sorted(dst.glob("shard-*.tar"))]
        with warnings.catch_warnings():
            # webdataset 1.0.2 leaves its tar files for the garbage collector to close
            warnings.simplefilter("ignore", ResourceWarning)
            samples = list(wds.WebDataset(urls, shardshuffle=False))
            decoded = list(wds.WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg;png", "cls"))
            gc.collect()
        assert len(samples) == len(shards)
        for i, sample in enumerate(samples):
            data, name = shards.read_encoded(i)
            assert sample["__key__"] == name.split(":", 1)[1]
            assert int(sample["cls"]) == shards.targets[i]
            image = sample.get("jpg", sample.get("png"))
            assert image == data.numpy().tobytes()
        # the library's own decoding: pixels of the original files, classes as ints
        folder = D.JpegFolder(src)
        for (img, cls), path, target in zip(decoded, folder.files, folder.targets):
            ref = np.array(Image.open(path).convert("RGB"))
            assert cls == target and np.array_equal(img, ref), path

    def test_summary_lists_what_is_left_out(self, tmp_path, tree, capsys):
        src, _ = tree
        (src / "emu" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 100)
        code, out, err = _run_pack(capsys, src, tmp_path / "dst", "--format", "wds", "--quiet", "-j", "2")
        assert code == 0, err
        assert "not in the shards (2)" in out and "README" in out and "cat/notes.txt" in out
        assert "emu/broken.jpg" in out and "stored as-is" in out
        ds = D.ShardDataset(tmp_path / "dst")
        assert len(ds) == 10
        i = ds.files.index("shard-000000.tar:emu/broken")
        assert ds.read_encoded(i)[0].numpy().tobytes() == (src / "emu" / "broken.jpg").read_bytes()
        code, out, _ = _run_pack(capsys, src, tmp_path / "dst2", "--format", "wds", "--quiet", "--on-error", "skip")
        assert code == 0 and "left out" in out
        assert len(D.ShardDataset(tmp_path / "dst2")) == 9

    def test_valid_jpeg_that_cannot_be_packed_is_stored_as_is(self, tmp_path, tree):
        src, _ = tree
        progressive = make_jpeg("420-progressive", 40, 48, seed=11)
        sos = progressive.index(b"\xff\xda")
        end = sos + 2 + int.from_bytes(progressive[sos + 2:sos + 4], "big")
        while progressive[end] != 0xFF or progressive[end + 1] == 0 or 0xD0 <= progressive[end + 1] <= 0xD7:
            end += 1
        dc_only = progressive[:end] + b"\xff\xd9"  # valid: stops after its first (DC) scan
        (src / "emu" / "dc.jpg").write_bytes(dc_only)
        for on_error in ("copy", "skip"):
            summary = pack_shards(src, tmp_path / on_error, workers=1, progress=False, on_error=on_error)
            assert [rel for rel, _ in summary.kept] == ["emu/dc.jpg"] and not summary.failed
            ds = D.ShardDataset(tmp_path / on_error)
            assert ds.read_encoded(ds.files.index("shard-000000.tar:emu/dc"))[0].numpy().tobytes() == dc_only
        assert [rel for rel, _ in pack_shards(src, tmp_path / "copy", progress=False).kept] == ["emu/dc.jpg"]

    def test_progress_bar_and_cli_errors(self, tmp_path, tree, capsys):
        src, _ = tree
        code, out, err = _run_pack(capsys, src, tmp_path / "dst", "--format", "wds", "--shard-size", "10kB", "-j", "1")
        assert code == 0 and "fastprep.pack" in err and "shards written: " in out, err
        code, _, err = _run_pack(capsys, src, tmp_path / "x", "--shard-size", "1GB")
        assert code == 2 and "--format wds" in err
        code, _, err = _run_pack(capsys, src, tmp_path / "x", "--format", "wds", "--shard-size", "lots")
        assert code == 2 and "shard size" in err
        code, _, err = _run_pack(capsys, src, src / "cat" / "packed", "--format", "wds", "--quiet")
        assert code == 2 and "inside src" in err

    def test_key_collision_refused(self, tmp_path, tree):
        src, _ = tree
        (src / "dog" / "e.png").write_bytes(png_bytes(20, 20, 1))
        with pytest.raises(ValueError, match=r"'dog/e.jpeg' and 'dog/e.png' would share the WebDataset key 'dog/e'"):
            pack_shards(src, tmp_path / "dst", progress=False)
        assert not (tmp_path / "dst").exists()

    def test_flat_folder(self, tmp_path):
        src = tmp_path / "flat"
        src.mkdir()
        for i in range(3):
            (src / f"{i}.jpg").write_bytes(encode_jpeg(photo_like(30, 30, i)))
        pack_shards(src, tmp_path / "dst", workers=1, progress=False)
        ds = D.ShardDataset(tmp_path / "dst")
        assert ds.classes == [] and ds.targets == [0, 0, 0] and ds.files[2] == "shard-000000.tar:2"


def _batches(source, **kwargs):
    torch.manual_seed(0)
    loader = D.make_loader(source, batch_size=4, crop_size=CROP, device="cpu", seed=SEED, **kwargs)
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.filterwarnings(FALLBACK_WARNING)
class TestSameSamplesAsTheFolder:
    @pytest.mark.parametrize("engine", ["processes", "threads"])
    def test_make_loader(self, packed, engine):
        src, dst = packed
        assert D.is_shard_dir(dst) and not D.is_shard_dir(src)
        ref = _batches(src, num_workers=0, shuffle=True, engine="processes")
        for workers in (0, 2):
            got = _batches(dst, num_workers=workers, shuffle=True, engine=engine)
            assert len(got) == len(ref)
            for (x, y), (rx, ry) in zip(got, ref):
                assert torch.equal(x, rx) and torch.equal(y, ry)

    def test_recipe_per_sample(self, packed):
        src, dst = packed
        transform = D.RECIPES["imagenet-train"]({})
        folder = D.JpegFolder(src, transform=transform, seed=SEED)
        shards = D.ShardDataset(dst, transform=transform, seed=SEED)
        for epoch in (0, 3):
            folder.set_epoch(epoch)
            shards.set_epoch(epoch)
            for i in torch.randperm(len(folder), generator=torch.Generator().manual_seed(epoch)).tolist():
                (a, ta), (b, tb) = folder[i], shards[i]
                assert ta == tb and torch.equal(a, b), i

    def test_fsspec_url_and_pickle(self, packed):
        pytest.importorskip("fsspec")
        src, dst = packed
        local = D.ShardDataset(dst)
        url = D.ShardDataset(f"file://{dst}")
        assert D.is_shard_dir(f"file://{dst}") and url.shards[0] == f"file://{dst}/shard-000000.tar"
        assert url.files == local.files and url.targets == local.targets
        for i in range(len(local)):
            assert torch.equal(url.read_encoded(i)[0], local.read_encoded(i)[0])
        again = pickle.loads(pickle.dumps(url))
        assert torch.equal(again.read_encoded(4)[0], local.read_encoded(4)[0])
        ref = _batches(src, num_workers=0)
        got = _batches(f"file://{dst}", num_workers=0)
        assert all(torch.equal(x, rx) and torch.equal(y, ry) for (x, y), (rx, ry) in zip(got, ref))

    def test_scanned_index_equals_written(self, packed, tmp_path):
        _, dst = packed
        copy = tmp_path / "copy"
        shutil.copytree(dst, copy)
        written = {p.name: json.loads(p.read_text()) for p in copy.glob("*.idx.json")}
        for p in copy.glob("*.idx.json"):
            p.unlink()
        ds = D.ShardDataset(copy)  # scans the tar headers, caches the indexes
        ref = D.ShardDataset(dst)
        assert ds.files == ref.files and ds.targets == ref.targets
        assert all(torch.equal(ds.read_encoded(i)[0], ref.read_encoded(i)[0]) for i in range(len(ds)))
        for name, index in written.items():
            cached = json.loads((copy / name).read_text())
            del index["pack"]
            assert cached == index


def _pack(src, dst, **kwargs):
    return pack_shards(src, dst, shard_size=20_000, workers=1, progress=False, **kwargs)


def _snapshot(dst):
    return {p.name: p.read_bytes() for p in sorted(dst.iterdir())}


class TestResume:
    def test_interrupted_run_resumes(self, tmp_path, tree):
        src, _ = tree
        fresh = tmp_path / "fresh"
        first = _pack(src, fresh)
        assert first.shards >= 3 and first.shards_reused == 0 and first.up_to_date == 0
        expected = _snapshot(fresh)
        # what an interruption leaves: the first shards complete, a partial one, no manifest
        dst = tmp_path / "dst"
        shutil.copytree(fresh, dst)
        (dst / MANIFEST_NAME).unlink()
        last = first.shards - 1
        (dst / f"shard-{last:06d}.idx.json").unlink()
        (dst / f"shard-{last:06d}.tar").rename(dst / f"shard-{last:06d}.tar.123.fastprep-pack-tmp")
        (dst / f"shard-{last - 1:06d}.tar").write_bytes(b"partial")  # its index says otherwise: redone too
        summary = _pack(src, dst)
        assert summary.shards_reused == last - 1 and summary.shards == 2
        assert summary.up_to_date == sum(len(json.loads((fresh / f"shard-{i:06d}.idx.json").read_text())["keys"])
                                         for i in range(last - 1))
        assert _snapshot(dst) == expected
        # nothing to do the second time
        again = _pack(src, dst)
        assert again.shards == 0 and again.shards_reused == first.shards and again.up_to_date == 9
        assert _snapshot(dst) == expected

    def test_changes_redo_from_the_first_changed_shard(self, tmp_path, tree):
        src, _ = tree
        dst = tmp_path / "dst"
        first = _pack(src, dst)
        before = _snapshot(dst)
        (src / "emu" / "g.jpg").write_bytes(encode_jpeg(photo_like(20, 20, 99)))  # in a later shard
        summary = _pack(src, dst)
        assert 0 < summary.shards_reused < first.shards
        after = _snapshot(dst)
        for i in range(summary.shards_reused):
            assert after[f"shard-{i:06d}.tar"] == before[f"shard-{i:06d}.tar"]
        assert after != before
        check = D.ShardDataset(dst)
        i = check.files.index(next(f for f in check.files if f.endswith(":emu/g")))
        assert check.read_encoded(i)[0].numpy().tobytes() == \
            fio.transcode_jpeg((src / "emu" / "g.jpg").read_bytes())
        # fewer samples: stale shards beyond the new end are deleted
        for rel in ("emu/f.jpg", "emu/g.jpg", "emu/h.jpg"):
            (src / rel).unlink()
        summary = _pack(src, dst)
        assert len(D.ShardDataset(dst)) == 6
        names = json.loads((dst / MANIFEST_NAME).read_text())["shards"]
        assert _shard_files(dst) == sorted([MANIFEST_NAME] + [e["name"] for e in names] + [e["index"] for e in names])
        # other options (or force): everything redone
        assert _pack(src, dst, restart_interval=1).shards_reused == 0
        assert _pack(src, dst, restart_interval=1, force=True).shards_reused == 0
        assert _pack(src, dst, restart_interval=1).shards_reused == len(names)


def _read_all(ds):
    return [ds[i] for i in range(len(ds))]


def _edit_json(path, edit):
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))


def _unpin(dst):
    """Remove the shards' digests from the manifest, as an older fastprep.pack wrote it."""
    _edit_json(dst / MANIFEST_NAME, lambda m: [e.pop("digest") for e in m["shards"]])


@pytest.fixture
def copy(packed, tmp_path):
    """A private copy of the packed shards, to damage."""
    dst = tmp_path / "shards"
    shutil.copytree(packed[1], dst)
    return dst


class TestBadInput:
    def test_truncated_shard(self, copy):
        manifest = json.loads((copy / MANIFEST_NAME).read_text())
        entry = manifest["shards"][1]
        index = json.loads((copy / entry["index"]).read_text())
        assert entry["num_samples"] >= 2
        cut = index["offsets"][-1] + index["sizes"][-1] // 2  # inside the shard's last image
        with open(copy / entry["name"], "r+b") as f:
            f.truncate(cut)
        with pytest.warns(UserWarning, match=f"truncated shards: .*{entry['name']}' \\(\\d+ of 10240 bytes, 1 of "
                          f"{entry['num_samples']} samples past the end\\)"):
            ds = D.ShardDataset(copy)
        bad = manifest["shards"][0]["num_samples"] + entry["num_samples"] - 1
        key = index["keys"][-1]
        ds.read_encoded(bad - 1)  # before the cut: fine
        with pytest.raises(fio.DecodeError, match=f"{entry['name']}:{key}.*truncated"):
            ds[bad]
        with pytest.warns(UserWarning, match="truncated"):
            skipping = D.ShardDataset(copy, on_error="skip")
        assert len(_read_all(skipping)) == len(ds) and skipping.skipped == 1

    def test_damaged_header(self, copy):
        entry = json.loads((copy / MANIFEST_NAME).read_text())["shards"][0]
        index = json.loads((copy / entry["index"]).read_text())
        with open(copy / entry["name"], "r+b") as f:
            f.seek(index["offsets"][1] - 512 + 50)
            f.write(b"\x13")
        ds = D.ShardDataset(copy)
        with pytest.raises(fio.DecodeError, match=f"{entry['name']}:{index['keys'][1]}.*checksum"):
            ds[1]

    def test_non_jpeg_member(self, tmp_path, tree):
        src, _ = tree
        (src / "dog" / "zz.jpg").write_bytes(b"not a jpeg, whatever the name says" * 4)
        pack_shards(src, tmp_path / "dst", workers=1, progress=False)
        ds = D.ShardDataset(tmp_path / "dst", transform=D.default_transform(CROP, 0))
        i = ds.files.index("shard-000000.tar:dog/zz")
        with pytest.raises(fio.DecodeError, match="shard-000000.tar:dog/zz"):
            ds[i]
        skipping = D.ShardDataset(tmp_path / "dst", transform=D.default_transform(CROP, 0), on_error="skip")
        assert skipping[i][0].shape == (3, CROP, CROP) and skipping.skipped == 1
        strict = D.ShardDataset(tmp_path / "dst", transform=D.default_transform(CROP, 0), jpeg_only=True)
        with pytest.raises(fio.DecodeError, match=r"shard-000000.tar:dog/d.*not a JPEG \(PNG"):
            strict[strict.files.index("shard-000000.tar:dog/d")]

    def test_member_without_image_and_foreign_tar(self, tmp_path):
        """A tar written by another tool (indexed by a header scan): a sample without an
        image fails per on_error, naming the shard and the key."""
        root = tmp_path / "foreign"
        root.mkdir()
        members = [("s/0.jpg", encode_jpeg(photo_like(30, 30, 0))), ("s/0.cls", b"1"),
                   ("s/1.txt", b"caption only"), ("s/1.cls", b"0"),
                   ("s/2.JPG", encode_jpeg(photo_like(30, 30, 2))), ("s/2.json", b"{}"), ("s/2.cls", b" 1\n")]
        with tarfile.open(root / "x.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        manifest = {"format": "fastprep-webdataset", "version": 1, "classes": ["a", "b"], "num_samples": 3,
                    "shards": [{"name": "x.tar", "index": "x.idx.json", "num_samples": 3,
                                "bytes": os.path.getsize(root / "x.tar")}]}
        (root / MANIFEST_NAME).write_text(json.dumps(manifest))
        with pytest.warns(UserWarning, match=r"shards indexed by a scan that nothing could check: '.*x\.tar'"):
            ds = D.ShardDataset(root, transform=D.default_transform(CROP, 0))
        assert ds.files == ["x.tar:s/0", "x.tar:s/1", "x.tar:s/2"] and ds.targets == [1, 0, 1]
        assert (root / "x.idx.json").exists()
        assert ds[0][0].shape == (3, CROP, CROP) and ds[2][1] == 1
        with pytest.raises(fio.DecodeError, match="x.tar:s/1.*no image member"):
            ds[1]
        skipping = D.ShardDataset(root, transform=D.default_transform(CROP, 0), on_error="skip")
        assert len(_read_all(skipping)) == 3 and skipping.skipped == 1
        # a .cls that is not an integer: refused when the index is built
        (root / "x.idx.json").unlink()
        with tarfile.open(root / "x.tar", "w") as tar:
            info = tarfile.TarInfo("s/0.cls")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"cat"))
        _edit_json(root / MANIFEST_NAME, lambda m: m["shards"][0].update(bytes=os.path.getsize(root / "x.tar")))
        with pytest.raises(ValueError, match="x.tar: 's/0.cls' is not an integer class index"):
            D.ShardDataset(root)

    def test_missing_shard(self, copy):
        (copy / "shard-000001.tar").unlink()
        with pytest.raises(FileNotFoundError, match=f"shard missing: '{copy / 'shard-000001.tar'}'"):
            D.ShardDataset(copy)
        with pytest.raises(FileNotFoundError, match=f"shard missing: 'file://{copy}/shard-000001.tar'"):
            D.ShardDataset(f"file://{copy}")
        with pytest.raises(FileNotFoundError, match="not a shard directory"):
            D.ShardDataset(copy / "nowhere")

    @pytest.mark.parametrize("damage, message", [
        (lambda m, d: m.update(num_samples=m["num_samples"] + 1), "num_samples="),
        (lambda m, d: m.update(version=2), "format version 2"),
        (lambda m, d: m.update(format="something"), "not a fastprep-webdataset manifest"),
        (lambda m, d: m["shards"][0].update(name="../shard-000000.tar"), "bad shard entry"),
        (lambda m, d: m["shards"][0].update(num_samples=m["shards"][0]["num_samples"] + 1,
                                            ) or m.update(num_samples=m["num_samples"] + 1),
         "manifest lists .* samples"),
        (lambda m, d: m["shards"][0].update(bytes=m["shards"][0]["bytes"] - 512), "has .* bytes, the manifest records"),
        (lambda m, d: shutil.copy(d / m["shards"][0]["index"], d / "other.idx.json")
         and m["shards"][1].update(index="other.idx.json"), "it indexes 'shard-000000.tar', not"),
        (lambda m, d: _edit_json(d / m["shards"][0]["index"], lambda i: i["offsets"].reverse()), "out of order"),
        (lambda m, d: _edit_json(d / m["shards"][0]["index"], lambda i: i["sizes"].__setitem__(-1, 10**9)),
         "outside the shard"),
        (lambda m, d: _edit_json(d / m["shards"][0]["index"], lambda i: i["targets"].__setitem__(0, 3)),
         "class index is >="),
        (lambda m, d: (d / m["shards"][0]["index"]).write_text("{"), "not valid JSON"),
        (lambda m, d: m["shards"][0].update(digest="md5:0"), "has digest 'md5:0'; expected 'sha256:'"),
    ])
    def test_manifest_does_not_match(self, copy, damage, message):
        manifest = json.loads((copy / MANIFEST_NAME).read_text())
        damage(manifest, copy)
        (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
        with pytest.raises(ValueError, match=message):
            D.ShardDataset(copy)

    def test_stale_index_raises_when_read(self, copy):
        """An index whose offsets point at another member of the same size: the tar header
        before the data names the other member (a ValueError: not skipped). With the
        manifest's pins the edited index is refused at open (TestPins); without them
        (older manifests, shards of other tools) when the sample is read."""
        _unpin(copy)
        index_path = copy / "shard-000000.idx.json"
        index = json.loads(index_path.read_text())
        index["keys"][0], index["keys"][1] = index["keys"][1], index["keys"][0]
        index_path.write_text(json.dumps(index))
        ds = D.ShardDataset(copy, on_error="skip")
        with pytest.raises(ValueError, match="does not match shard .*the tar header names"):
            ds[0]

    def test_scan_finds_other_counts(self, copy):
        (copy / "shard-000000.idx.json").unlink()
        def one_more(m):
            m["shards"][0]["num_samples"] += 1
            m["num_samples"] += 1

        _edit_json(copy / MANIFEST_NAME, one_more)
        with pytest.raises(ValueError, match="holds .* samples, the manifest records"):
            D.ShardDataset(copy)
        (copy / "shard-000001.tar").write_bytes(b"\x01" * 2048)
        (copy / "shard-000001.idx.json").unlink()
        _edit_json(copy / MANIFEST_NAME, lambda m: m["shards"][1].update(bytes=2048))
        with pytest.raises(ValueError, match="shard-000001.tar: not a readable tar file|holds"):
            D.ShardDataset(copy)


def _complete_copy_smaller(src, dst):
    """Write at ``dst`` the tar ``src`` without the zero padding after its end-of-archive
    blocks: the same complete shard, fewer bytes."""
    with tarfile.open(src) as tar:
        end = max(m.offset_data + -(-m.size // 512) * 512 for m in tar)
    dst.write_bytes(src.read_bytes()[:end + 1024])
    assert dst.stat().st_size < src.stat().st_size


class TestPins:
    """The manifest pins each shard (``digest``: index_digest of its member index), so a
    rescan tells another shard from a truncated one and an edited index is refused."""

    def test_pack_writes_pins_and_open_reads_no_shard(self, packed, monkeypatch):
        from fastprep.data.shards import index_digest, scan_shard

        _, dst = packed
        manifest = json.loads((dst / MANIFEST_NAME).read_text())
        for entry in manifest["shards"]:
            index = json.loads((dst / entry["index"]).read_text())
            with open(dst / entry["name"], "rb") as f:
                scanned = scan_shard(f, entry["name"])
            assert entry["digest"] == index_digest(index) == index_digest(scanned)
            assert entry["digest"].startswith("sha256:") and len(entry["digest"]) == 7 + 64
        digests = {e["digest"] for e in manifest["shards"]}
        assert len(digests) == len(manifest["shards"])
        # opening checks indexes against pins without opening a shard
        from fastprep.data import shards as module

        opened = []
        for method in ("open", "read_range"):
            monkeypatch.setattr(module.Storage, method, lambda self, name, *a, **k: opened.append(name))
        assert len(D.ShardDataset(dst)) == 9 and opened == []

    def test_digest_covers_every_column(self):
        from fastprep.data.shards import index_digest

        index = {"keys": ["a", "b"], "extensions": ["jpg", None], "offsets": [512, 2048], "sizes": [10, 0],
                 "targets": [0, 1], "pack": {"ignored": True}}
        pin = index_digest(index)

        def reference(ix):  # docs/pack.md's definition
            blobs = ["\0".join(ix["keys"]).encode(), "\0".join(e or "/" for e in ix["extensions"]).encode()]
            blobs += [b"".join(v.to_bytes(8, "little") for v in ix[c]) for c in ("offsets", "sizes", "targets")]
            return "sha256:" + hashlib.sha256(b"".join(len(b).to_bytes(8, "little") + b for b in blobs)).hexdigest()

        assert pin == reference(index) == index_digest({k: v for k, v in index.items() if k != "pack"})
        with pytest.raises(ValueError, match="offsets must be ints that fit in an int64"):
            index_digest({**index, "offsets": [512, 2**64]})
        for column, value in (("keys", ["b", "a"]), ("extensions", ["jpg", "jpg"]), ("offsets", [512, 2560]),
                              ("sizes", [11, 0]), ("targets", [0, 0])):
            assert index_digest({**index, column: value}) != pin, column

    @pytest.mark.parametrize("keep_index", [False, True])
    @pytest.mark.parametrize("smaller", [False, True])
    def test_swapped_shard(self, copy, keep_index, smaller):
        """shard-000001.tar overwritten by a copy of shard-000002.tar (both hold 2 samples)."""
        if smaller:
            _complete_copy_smaller(copy / "shard-000002.tar", copy / "shard-000001.tar")
        else:
            shutil.copy(copy / "shard-000002.tar", copy / "shard-000001.tar")
        if not keep_index:
            (copy / "shard-000001.idx.json").unlink()
            message = (r"shard '.*shard-000001\.tar' is not the shard the manifest pins: it holds 2 samples "
                       r"\('dog/e' to 'emu/f'\) in \d+ bytes, digest sha256:[0-9a-f]{64}; the manifest records 2 "
                       r"samples in 10240 bytes, digest sha256:")
        elif smaller:
            message = (r"shard '.*shard-000001\.tar' \(\d+ of 10240 bytes\) is not the shard its index describes: "
                       r"the tar header gives \d+ bytes, the index \d+")
        else:  # same size, index kept: found when a sample is read (the tar header names another member)
            ds = D.ShardDataset(copy, on_error="skip")
            with pytest.raises(ValueError, match=r"does not match shard .*shard-000001.tar.*the tar header gives \d+ "
                                                 r"bytes, the index \d+"):
                ds[3]
            return
        for on_error in ("raise", "skip"):
            with pytest.raises(ValueError, match=message):
                D.ShardDataset(copy, on_error=on_error)
        assert not (copy / "shard-000001.idx.json").exists() or keep_index  # nothing cached from the wrong shard

    def test_shard_listed_twice(self, copy):
        def twice(m):
            m["shards"].append(dict(m["shards"][1]))
            m["num_samples"] += m["shards"][1]["num_samples"]

        _edit_json(copy / MANIFEST_NAME, twice)
        with pytest.raises(ValueError, match=r"'shard-000001\.tar' is the name of shard entry 1 and the name of "
                                             r"shard entry 4: every shard and index must be listed once"):
            D.ShardDataset(copy)

    def test_no_classes_with_targets(self, copy, tmp_path, tree):
        _edit_json(copy / MANIFEST_NAME, lambda m: m.update(classes=[]))
        with pytest.raises(ValueError, match=r"the manifest lists no classes \(an unlabelled, flat folder: every "
                                             r"target 0\) but sample 'dog/100%25' has target 1"):
            D.ShardDataset(copy)
        # a flat folder: no classes, every target 0
        flat = tmp_path / "flat"
        flat.mkdir()
        for rel in ("cat/a.jpg", "emu/g.jpg"):
            shutil.copy(tree[0] / rel, flat / rel.replace("/", "-"))
        _pack(flat, tmp_path / "flat-wds")
        ds = D.ShardDataset(tmp_path / "flat-wds")
        assert ds.classes == [] and ds.targets == [0, 0] and ds.files == ["shard-000000.tar:cat-a",
                                                                          "shard-000000.tar:emu-g"]

    def test_changed_target_in_index(self, copy):
        _edit_json(copy / "shard-000000.idx.json", lambda i: i["targets"].__setitem__(0, 2))  # 0 -> 2 of 3 classes
        with pytest.raises(ValueError, match=r"index '.*shard-000000\.idx\.json' is not the index the manifest pins "
                                             r"for shard '.*shard-000000\.tar': its digest is sha256:[0-9a-f]{64}, "
                                             r"the manifest's sha256:[0-9a-f]{64} \(an edited index"):
            D.ShardDataset(copy)
        (copy / "shard-000000.idx.json").unlink()  # as the message says: rebuilt from the shard, which is intact
        assert D.ShardDataset(copy).targets[0] == 0

    def test_truncated_shard_without_index(self, copy):
        index = json.loads((copy / "shard-000001.idx.json").read_text())
        with open(copy / "shard-000001.tar", "r+b") as f:
            f.truncate(index["offsets"][-1] + index["sizes"][-1] // 2)
        (copy / "shard-000001.idx.json").unlink()
        with pytest.raises(ValueError, match=r"shard '.*shard-000001\.tar' is truncated \(\d+ of 10240 bytes\) and "
                                             r"its index 'shard-000001\.idx\.json' is missing: its samples cannot "
                                             r"be located \(.*\); restore it \(or its index\), or re-pack"):
            D.ShardDataset(copy, on_error="skip")
        with open(copy / "shard-000001.tar", "r+b") as f:  # cut between the two samples
            f.truncate(index["offsets"][-1] - 512)
        with pytest.raises(ValueError, match=r"is truncated .* \(its tar ends after 1 samples\)"):
            D.ShardDataset(copy)

    def test_unpinned_manifest_reads_as_before(self, copy):
        """A manifest without digests (an older fastprep.pack): a rescanned shard is read as
        it is, with a warning that nothing could check it."""
        _unpin(copy)
        shutil.copy(copy / "shard-000002.tar", copy / "shard-000001.tar")
        (copy / "shard-000001.idx.json").unlink()
        with pytest.warns(UserWarning, match=r"shards indexed by a scan that nothing could check: "
                                             r"'.*shard-000001\.tar' \(the manifest pins no 'digest'"):
            ds = D.ShardDataset(copy)
        assert ds.files[3:7] == ["shard-000001.tar:dog/e", "shard-000001.tar:emu/f", "shard-000002.tar:dog/e",
                                 "shard-000002.tar:emu/f"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            D.ShardDataset(copy)  # the index is cached now: no rescan, no warning

    def test_repack_pins_an_older_directory(self, tmp_path, tree):
        src, _ = tree
        dst = tmp_path / "dst"
        first = _pack(src, dst)
        pinned = (dst / MANIFEST_NAME).read_bytes()
        _unpin(dst)
        again = _pack(src, dst)
        assert again.shards_reused == first.shards and again.shards == 0
        assert (dst / MANIFEST_NAME).read_bytes() == pinned


@contextlib.contextmanager
def _fifo(path):
    """Put a FIFO at ``path``. Should a reader open it (a regression), a writer thread lets
    that open return at once with EOF, so the test fails on its message instead of hanging."""
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    stop = threading.Event()

    def writer():
        while not stop.wait(0.01):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # succeeds only while a reader waits
            except OSError:
                pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()


_NOT_REGULAR = [("fifo", r"a FIFO"), ("directory", r"a directory"), ("device", r"a character device")]


def _not_regular(path, kind, stack):
    """Replace the file at ``path`` by a FIFO, a directory or a character device (a symlink to /dev/null)."""
    if kind == "fifo":
        return stack.enter_context(_fifo(path))
    path.unlink()
    if kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
class TestNotRegularFiles:
    """A FIFO, directory or device where a shard, an index or the manifest should be: a
    clear error, never a read that blocks."""

    @pytest.mark.parametrize("kind, what", _NOT_REGULAR)
    @pytest.mark.parametrize("url", [False, True])
    def test_shard_replaced_after_open(self, copy, kind, what, url):
        root = f"file://{copy}" if url else copy
        if url:
            pytest.importorskip("fsspec")
        ds = D.ShardDataset(root)
        skipping = D.ShardDataset(root, on_error="skip")
        shard = ds.files.index("shard-000001.tar:dog/100%25")
        with contextlib.ExitStack() as stack:
            _not_regular(copy / "shard-000001.tar", kind, stack)
            message = rf"'{'file://' if url else ''}{copy}/shard-000001\.tar' is not a regular file \({what}\)"
            with pytest.raises(OSError, match=message):
                ds.read_encoded(shard)
            with pytest.raises(fio.DecodeError, match=rf"'shard-000001\.tar:dog/100%25' \(index 3\): {message}"):
                ds[shard]
            _same_entries(ds.read_encoded_batch(range(len(ds))), _single_entries(ds, range(len(ds))))
            assert len(_read_all(skipping)) == len(ds) and skipping.skipped == 2  # both samples of the shard

    @pytest.mark.parametrize("kind, what", _NOT_REGULAR)
    @pytest.mark.parametrize("name", ["shard-000001.tar", "shard-000001.idx.json", MANIFEST_NAME])
    def test_at_open(self, copy, kind, what, name):
        with contextlib.ExitStack() as stack:
            _not_regular(copy / name, kind, stack)
            with pytest.raises(OSError, match=rf"'{copy / name}' is not a regular file \({what}\)"):
                D.ShardDataset(copy)
            if name == MANIFEST_NAME:
                assert not D.is_shard_dir(copy)

    def test_rescan_and_resume(self, tmp_path, tree, copy):
        (copy / "shard-000001.idx.json").unlink()
        with contextlib.ExitStack() as stack:  # the index is missing: the shard would be scanned
            _not_regular(copy / "shard-000001.tar", "fifo", stack)
            with pytest.raises(OSError, match=r"shard-000001\.tar' is not a regular file \(a FIFO\)"):
                D.ShardDataset(copy)
        src, _ = tree
        dst = tmp_path / "dst"
        first = _pack(src, dst)
        expected = _snapshot(dst)
        with contextlib.ExitStack() as stack:  # a resumed pack reads the indexes: from this one on, redone
            _not_regular(dst / "shard-000001.idx.json", "fifo", stack)
            summary = _pack(src, dst)
        assert summary.shards_reused == 1 and summary.shards == first.shards - 1
        assert _snapshot(dst) == expected


# Run by test_loaders_never_block_on_a_fifo_shard in a session of its own: loaders built on a
# shard directory, then shard-000001.tar replaced by a FIFO; one JSON line per (engine, on_error).
_LOADER_SCRIPT = r"""
import json, os, signal, sys, warnings
warnings.simplefilter("ignore")
import fastprep.data as D

dst = sys.argv[1]
loaders = {(engine, on_error): D.make_loader(dst, batch_size=4, crop_size=24, device="cpu", seed=0, engine=engine,
                                             num_workers=2, on_error=on_error)
           for engine in ("threads", "processes") for on_error in ("raise", "skip")}
os.unlink(os.path.join(dst, "shard-000001.tar"))
os.mkfifo(os.path.join(dst, "shard-000001.tar"))
# The processes engine's broken-off epoch last: its workers are not forked into another loader's.
for engine, on_error in [("threads", "raise"), ("threads", "skip"), ("processes", "skip"), ("processes", "raise")]:
    loader = loaders[engine, on_error]
    result = {"engine": engine, "on_error": on_error}
    try:
        result["samples"] = sum(len(y) for _, y in loader)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    result["skipped"] = loader.loader.dataset.skipped
    print(json.dumps(result), flush=True)
# Killed with the last loader's workers alive: they must notice and exit on their own.
os.kill(os.getpid(), signal.SIGKILL)
"""


def _session_processes(sid: int) -> list[str]:
    """The live (not zombie) processes of session ``sid``: ``"pid state command"``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(f"{entry} {fields[0]} {stat[:stat.rindex(')') + 1]}")
    return found


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.isdir("/proc"), reason="needs os.mkfifo and /proc")
def test_loaders_never_block_on_a_fifo_shard(copy):
    """Both engines, both on_error modes, a FIFO swapped in after the loaders were built: the
    run ends (a hang fails after the timeout), and once its main process is killed no worker
    is left behind (blocked workers used to outlive it as orphans)."""
    import fastprep

    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(fastprep.__file__))}  # this fastprep
    proc = subprocess.Popen([sys.executable, "-c", _LOADER_SCRIPT, str(copy)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole session: the blocked workers too
        out, err = proc.communicate()
        pytest.fail(f"the loaders blocked on the FIFO shard (killed after 120 s); finished: {out}")
    finally:
        deadline = time.monotonic() + 20
        while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for line in left:
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, err
    assert not left, f"processes left behind by the killed loader: {left}"
    results = {(r["engine"], r["on_error"]): r for r in map(json.loads, out.splitlines())}
    assert sorted(results) == [("processes", "raise"), ("processes", "skip"), ("threads", "raise"),
                               ("threads", "skip")]
    for engine in ("threads", "processes"):
        raised, skipped = results[engine, "raise"], results[engine, "skip"]
        assert raised["error"].startswith("DecodeError") and "samples" not in raised, raised
        assert re.search(r"'shard-000001\.tar:dog/(100%25|d)' \(index [34]\): '.*shard-000001\.tar' is not a "
                         r"regular file \(a FIFO\)", raised["error"]), raised
        assert skipped.get("samples") == 9 and skipped["skipped"] == 2, skipped


def _same_entries(batch, single):
    """read_encoded_batch's entries equal read_encoded's (bytes and name, or error type and text)."""
    assert len(batch) == len(single)
    for (got, got_name), (want, want_name) in zip(batch, single):
        assert got_name == want_name
        if isinstance(want, Exception):
            assert type(got) is type(want) and str(got) == str(want)
        else:
            assert torch.equal(got, want)


def _single_entries(ds, indices):
    out = []
    for i in indices:
        try:
            out.append(ds.read_encoded(i))
        except (fio.DecodeError, OSError, ValueError) as e:
            out.append((e, ""))
    return out


class TestBatchRead:
    """``ShardDataset.read_encoded_batch``: one native call per batch (read_tar_members)
    with the same bytes and the same errors as ``read_encoded``, sample by sample."""

    def test_good_shards_read_natively(self, packed, monkeypatch):
        ds = D.ShardDataset(packed[1])
        indices = list(range(len(ds)))[::-1] + [0, 0]  # across shards, backwards, repeated
        want = _single_entries(ds, indices)
        calls = []
        monkeypatch.setattr(ds, "_read_or_error", lambda i: calls.append(i) or D.ShardDataset._read_or_error(ds, i))
        _same_entries(ds.read_encoded_batch(indices), want)
        assert calls == []  # no sample needed the Python path
        assert ds.read_encoded_batch([]) == []

    def test_bad_input_same_errors(self, copy):
        manifest = json.loads((copy / MANIFEST_NAME).read_text())
        first, second = manifest["shards"][0], manifest["shards"][1]
        index0 = json.loads((copy / first["index"]).read_text())
        index1 = json.loads((copy / second["index"]).read_text())
        with open(copy / first["name"], "r+b") as f:  # damaged header of sample 1
            f.seek(index0["offsets"][1] - 512 + 50)
            f.write(b"\x13")
        with open(copy / second["name"], "r+b") as f:  # truncated inside the second shard's last image
            f.truncate(index1["offsets"][-1] + index1["sizes"][-1] // 2)
        index0["keys"][0], index0["keys"][1] = index0["keys"][1], index0["keys"][0]  # a stale index
        (copy / first["index"]).write_text(json.dumps(index0))
        _unpin(copy)  # else refused at open
        with pytest.warns(UserWarning, match="truncated"):
            ds = D.ShardDataset(copy)
        indices = list(range(len(ds)))
        single = _single_entries(ds, indices)
        kinds = [type(e).__name__ for e, _ in single if isinstance(e, Exception)]
        assert "OSError" in kinds and "ValueError" in kinds, kinds
        _same_entries(ds.read_encoded_batch(indices), single)
        (copy / "shard-000001.tar").unlink()  # gone after the dataset opened
        (copy / "shard-000001.tar").mkdir()  # and a directory in its place: never read
        _same_entries(ds.read_encoded_batch(indices), _single_entries(ds, indices))

    def test_sample_without_image(self, tmp_path):
        root = tmp_path / "foreign"
        root.mkdir()
        with tarfile.open(root / "x.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            for key, name, data in [("s/0", "s/0.jpg", encode_jpeg(photo_like(30, 30, 0))),
                                    ("s/1", "s/1.txt", b"caption"),
                                    ("s/" + "l" * 120, "s/" + "l" * 120 + ".jpg", encode_jpeg(photo_like(20, 20, 1))),
                                    ("s/caf\u00e9", "s/caf\u00e9.jpg", encode_jpeg(photo_like(20, 24, 2)))]:
                for member, content in ((name, data), (key + ".cls", b"0")):
                    info = tarfile.TarInfo(member)
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
        manifest = {"format": "fastprep-webdataset", "version": 1, "classes": ["a"], "num_samples": 4,
                    "shards": [{"name": "x.tar", "index": "x.idx.json", "num_samples": 4,
                                "bytes": os.path.getsize(root / "x.tar")}]}
        (root / MANIFEST_NAME).write_text(json.dumps(manifest))
        with pytest.warns(UserWarning, match="nothing could check"):
            ds = D.ShardDataset(root)
        batch = ds.read_encoded_batch(range(4))
        _same_entries(batch, _single_entries(ds, range(4)))
        assert isinstance(batch[1][0], OSError) and "no image member" in str(batch[1][0])


class TestReadTarMembers:
    """The native header check against ``shards.check_header`` on real tar headers (GNU,
    PAX and ustar with a prefix) and under random damage."""

    def _tar(self, path, fmt, names):
        datas = {}
        with tarfile.open(path, "w", format=fmt) as tar:
            for k, name in enumerate(names):
                data = bytes(range(256)) * (k + 1) + b"x" * k
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 1_700_000_000 + k
                tar.addfile(info, io.BytesIO(data))
                datas[name] = data
        members = []
        with tarfile.open(path) as tar:
            for m in tar:
                members.append((m.name, m.offset_data, m.size))
        return datas, members

    @pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
    def test_headers(self, tmp_path, fmt):
        from fastprep.data.shards import check_header

        names = ["a.jpg", "dir/sub/b.jpg", "p" * 60 + "/" + "q" * 90 + ".jpg", "x" * 98 + ".j", ""]
        names = [n for n in names if n] + (["caf\u00e9.jpg", "r" * 120 + ".jpg"] if fmt != tarfile.USTAR_FORMAT else [])
        path = tmp_path / "t.tar"
        datas, members = self._tar(path, fmt, names)
        raw = path.read_bytes()
        rng = np.random.default_rng(5)
        cases = []  # (member passed, offset, size, python verdict, bytes)
        for name, offset, size in members:
            passed = name if name.isascii() else ""
            cases.append((passed, offset, size, raw))
            cases.append((passed, offset, size + 1, raw))  # the index's size disagrees
            other = members[0][0] if name != members[0][0] else members[1][0]
            cases.append((other, offset, size, raw))  # the index names another member
            for _ in range(12):  # one damaged header byte
                damaged = bytearray(raw)
                damaged[offset - 512 + int(rng.integers(0, 512))] ^= int(rng.integers(1, 256))
                cases.append((passed, offset, size, bytes(damaged)))
        accepted = 0
        for k, (member, offset, size, data) in enumerate(cases):
            shard = tmp_path / f"case{k}.tar"
            shard.write_bytes(data)
            datas_out, codes = torch.ops.fastprep.read_tar_members([str(shard)], [offset], [size], [member])
            python_ok = check_header(data[offset - 512:offset], member or "\u00e9", size) is None
            assert (codes.tolist() == [0]) == python_ok, (k, member, offset, size)
            if python_ok:
                accepted += 1
                assert bytes(datas_out[0].numpy()) == data[offset:offset + size]
        assert accepted >= len(members)

    def test_bounds_and_files(self, tmp_path):
        path = tmp_path / "t.tar"
        _, members = self._tar(path, tarfile.GNU_FORMAT, ["a.jpg"])
        name, offset, size = members[0]
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        cases = [(str(path), offset, size, name, 0), (str(path), offset, 10**9, name, 1),
                 (str(path), 0, size, name, 1), (str(path), offset, -1, name, 1),
                 (str(path), os.path.getsize(path) + 512, 0, name, 1),
                 (str(tmp_path / "missing.tar"), offset, size, name, 1),
                 (str(tmp_path), offset, size, name, 1), (str(fifo), offset, size, name, 1)]
        datas, codes = torch.ops.fastprep.read_tar_members(*[[c[k] for c in cases] for k in range(4)])
        assert codes.tolist() == [c[4] for c in cases]
        assert [d.numel() for d in datas] == [size] + [0] * (len(cases) - 1)
        with pytest.raises(RuntimeError, match="same length"):
            torch.ops.fastprep.read_tar_members([str(path)], [offset], [], [name])


def test_header_checksum_signed_and_unsigned():
    """``check_header``'s checksum verdict against the standard library's (``tarfile``'s
    ``calc_chksums``: the unsigned and the signed sums): headers with bytes above 127, each
    checksum field written as the unsigned sum, the signed sum, and a wrong one."""
    from fastprep.data.shards import check_header

    rng = np.random.default_rng(11)
    for k in range(60):
        header = bytearray(rng.integers(0, 256, 512, dtype=np.uint8).tobytes())
        header[124:136] = b"%011o\0" % 7
        header[156:157] = b"0"
        unsigned, signed = tarfile.calc_chksums(bytes(header))
        for stored in (unsigned, signed, signed - 1 if k % 2 else unsigned + 3):
            header[148:156] = b"%06o\0 " % stored
            verdict = check_header(bytes(header), "", 7)
            assert (verdict != "checksum") == (stored in tarfile.calc_chksums(bytes(header))), (k, stored)
