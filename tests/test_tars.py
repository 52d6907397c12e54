"""WebDataset tars written by other tools (webdataset's own ``TarWriter``, ``tarfile``) read
with random access: :class:`fastprep.data.TarDataset`.

References: webdataset 1.0.2 itself (its keys, its grouping, its order, its brace expansion
via the braceexpand package), the original image files' bytes, and the same images as a
folder read by ``make_loader`` (the same seed gives the same tensors, bit for bit)."""

import gzip
import io
import json
import os
import pickle
import random
import shutil
import stat
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

import fastprep.data as D
import fastprep.data.tars as T
import fastprep.io as fio
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.data.shards import MANIFEST_NAME
from fastprep.pack import pack_shards
from conftest import make_jpeg, moto_s3, png_bytes, use_s3_endpoint

wds = pytest.importorskip("webdataset")

CROP = 24
SEED = 1234
BUCKET = "tars"
FALLBACK_WARNING = "ignore:fastprep.*decoded in full:UserWarning"
pytestmark = pytest.mark.filterwarnings(FALLBACK_WARNING)


# Per sample: (webdataset __key__ given to TarWriter, image extension, image bytes). Keys
# with dots (webdataset ends the key at the first dot: "s4.v2" is read back as key "s4"
# with members "v2.jpg", "v2.cls"), ImageNet-style names with an upper-case extension, one
# PNG, several JPEG encodings.
SAMPLES = [
    ("n01440764_10026", "JPEG", lambda: encode_jpeg(photo_like(40, 56, 1))),
    ("n01440764_10027", "JPEG", lambda: make_jpeg("420-progressive", 50, 70, seed=2)),
    ("n01443537_1", "jpg", lambda: make_jpeg("gray", 33, 45, seed=3)),
    ("n01443537_2", "jpeg", lambda: make_jpeg("444", 36, 44, seed=4)),
    ("s4.v2", "jpg", lambda: encode_jpeg(photo_like(48, 37, 5))),
    ("dir/s5", "png", lambda: png_bytes(30, 41, 6)),
    ("dir/s6.final.v3", "jpg", lambda: make_jpeg("422", 61, 33, seed=7)),
    ("s7", "jpg", lambda: encode_jpeg(photo_like(52, 44, 8))),
    ("s8", "jpg", lambda: make_jpeg("cmyk", 40, 40, seed=9)),
    ("s9", "jpg", lambda: encode_jpeg(photo_like(45, 47, 10))),
    ("s10", "jpg", lambda: encode_jpeg(photo_like(39, 60, 11))),
    ("s11", "jpg", lambda: encode_jpeg(photo_like(44, 40, 12))),
]
PER_TAR = 4


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """The index cache folder of each test (never the user's ~/.cache)."""
    path = tmp_path / "fastprep-cache"
    monkeypatch.setenv("FASTPREP_CACHE", str(path))
    return path / "tar-index"


def _write_tars(base: Path, images: list[bytes]) -> list[Path]:
    """The samples written by webdataset's TarWriter into train-00000{0,1,2}.tar, target k
    for sample k."""
    base.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in range(0, len(SAMPLES), PER_TAR):
        path = base / f"train-{t // PER_TAR:06d}.tar"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            with wds.TarWriter(str(path), encoder=False) as sink:
                for k in range(t, min(t + PER_TAR, len(SAMPLES))):
                    key, ext, _ = SAMPLES[k]
                    sink.write({"__key__": key, ext: images[k], "cls": str(k).encode()})
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``folder/``: sample k as ``c{k:02d}/img.<ext>`` (one class per sample, so the folder's
    targets are 0..11, in the tars' order); ``tars/``: the same images written by webdataset's
    TarWriter (target k from the ``.cls`` member). Tests copy ``tars/`` before changing it."""
    base = tmp_path_factory.mktemp("tars")
    images = [make() for _, _, make in SAMPLES]
    for k, ((_, ext, _), image) in enumerate(zip(SAMPLES, images)):
        path = base / "folder" / f"c{k:02d}" / f"img.{ext.lower()}"
        path.parent.mkdir(parents=True)
        path.write_bytes(image)
    _write_tars(base / "tars", images)
    return base, images


@pytest.fixture
def copy(data, tmp_path):
    """A fresh copy of the tars (no cached index)."""
    dst = tmp_path / "copy"
    dst.mkdir()
    for tar in sorted((data[0] / "tars").glob("*.tar")):
        shutil.copy(tar, dst / tar.name)
    return dst


def _urls(folder) -> list[str]:
    return [str(p) for p in sorted(Path(folder).glob("*.tar"))]


def _wds_samples(urls) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # webdataset leaves its files to the GC
        return list(wds.WebDataset(urls, shardshuffle=False))


def _batches(source, **kwargs):
    kwargs.setdefault("crop_size", CROP)
    loader = D.make_loader(source, batch_size=4, device="cpu", seed=SEED, **kwargs)
    return [(x.clone(), y.clone()) for x, y in loader]


def _assert_same(got, ref):
    assert len(got) == len(ref)
    for (x, y), (rx, ry) in zip(got, ref):
        assert torch.equal(y, ry) and torch.equal(x, rx)


def _count_scans(monkeypatch) -> list[str]:
    scanned: list[str] = []
    real = T.scan_tar

    def scan(fileobj, tar, size):
        scanned.append(os.path.basename(tar))
        return real(fileobj, tar, size)

    monkeypatch.setattr(T, "scan_tar", scan)
    return scanned


def _tar_bytes(members) -> bytes:
    """A tar (PAX format, as tarfile writes) of ``(name, bytes or None for a folder)``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, tuple):  # ("link", target)
                info.type, info.linkname = tarfile.SYMTYPE, content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


class TestSamples:
    def test_webdataset_keys_order_bytes_targets(self, data):
        """Every sample webdataset yields, in its order, with its __url__ and __key__; the
        image bytes are the original file's; the target its .cls member's."""
        base, images = data
        urls = _urls(base / "tars")
        ds = D.TarDataset(urls)
        ref = _wds_samples(urls)
        assert len(ds) == len(ref) == len(SAMPLES) and ds.labelled
        for i, sample in enumerate(ref):
            image_ext = next(k for k in sample if not k.startswith("__") and not k.endswith("cls"))
            cls_ext = next(k for k in sample if k.endswith("cls"))
            assert ds.sample_key(i) == (sample["__url__"], sample["__key__"])
            data_, name = ds.read_encoded(i)
            assert name == f"{os.path.basename(sample['__url__'])}:{sample['__key__']}" == ds.files[i]
            assert data_.numpy().tobytes() == sample[image_ext] == images[i]
            assert ds.targets[i] == int(sample[cls_ext]) == i
        assert ds.sample_key(4)[1] == "s4" and ds.sample_key(6)[1] == "dir/s6"  # keys end at the first dot

    def test_native_batch_read(self, data, monkeypatch):
        """Local tars: a batch is one native call (read_tar_members), no sample through Python."""
        ds = D.TarDataset(data[0] / "tars")
        indices = list(range(len(ds)))[::-1] + [0, 0]
        calls = []
        monkeypatch.setattr(ds, "_read_or_error", lambda i: calls.append(i) or D.TarDataset._read_or_error(ds, i))
        for (got, name), i in zip(ds.read_encoded_batch(indices), indices):
            assert name == ds.files[i] and got.numpy().tobytes() == data[1][i]
        assert calls == []

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_make_loader_equals_the_folder(self, data, engine):
        """make_loader on the tars and on the folder of the same images: the same batches,
        bit for bit (same seed, shuffled), on either engine."""
        base, _ = data
        kwargs = {"engine": engine, "num_workers": 0 if engine == "processes" else 2}
        ref = _batches(str(base / "folder"), **kwargs)
        loader = D.make_loader(str(base / "tars"), batch_size=4, crop_size=CROP, device="cpu", seed=SEED, **kwargs)
        assert isinstance(loader.dataset, D.TarDataset)
        _assert_same([(x.clone(), y.clone()) for x, y in loader], ref)
        _assert_same(_batches(str(base / "tars"), recipe="imagenet-train", **kwargs),
                     _batches(str(base / "folder"), recipe="imagenet-train", **kwargs))

    def test_epoch_has_every_sample_once(self, data):
        for shuffle in (True, False):
            targets = torch.cat([y for _, y in _batches(str(data[0] / "tars"), shuffle=shuffle)])
            assert sorted(targets.tolist()) == list(range(len(SAMPLES)))

    def test_resume_and_ranks(self, data):
        source = str(data[0] / "tars")
        full = _batches(source, recipe="imagenet-eval")
        loader = D.make_loader(source, batch_size=4, device="cpu", seed=SEED, recipe="imagenet-eval")
        it = iter(loader)
        head = [tuple(t.clone() for t in next(it))]
        state = loader.state_dict()
        del it
        resumed = D.make_loader(source, batch_size=4, device="cpu", seed=SEED, recipe="imagenet-eval")
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        _assert_same(head + [(x.clone(), y.clone()) for x, y in resumed], full)
        # two ranks of an EpochSampler (what distributed=True builds): disjoint halves of the epoch
        seen = []
        for rank in range(2):
            sampler = D.EpochSampler(len(SAMPLES), seed=SEED, shuffle=True, rank=rank, world_size=2)
            seen.append(torch.cat([y for _, y in _batches(source, sampler=sampler)]).tolist())
        assert len(seen[0]) == len(seen[1]) == len(SAMPLES) // 2
        assert sorted(seen[0] + seen[1]) == list(range(len(SAMPLES)))

    def test_pickles(self, data):
        ds = D.TarDataset(data[0] / "tars")
        again = pickle.loads(pickle.dumps(ds))
        assert again.files == ds.files and torch.equal(again.read_encoded(5)[0], ds.read_encoded(5)[0])


class TestSources:
    def test_pattern_list_folder(self, data):
        base, _ = data
        folder = base / "tars"
        by_folder = D.TarDataset(folder)
        pattern = str(folder / "train-{000000..000002}.tar")
        for source in (pattern, _urls(folder), [Path(u) for u in _urls(folder)],
                       "::".join(_urls(folder)), str(folder / "train-00000{0,1}.tar") + "::" + _urls(folder)[2]):
            assert D.is_tar_source(source)
            ds = D.TarDataset(source)
            assert ds.files == by_folder.files and ds.targets == by_folder.targets and ds.tars == by_folder.tars
        assert isinstance(D.make_loader(pattern, device="cpu").dataset, D.TarDataset)
        assert isinstance(D.make_loader(_urls(folder), device="cpu").dataset, D.TarDataset)
        one = D.TarDataset(_urls(folder)[1])
        assert one.files == by_folder.files[PER_TAR:2 * PER_TAR]
        rev = D.TarDataset(_urls(folder)[::-1])  # a list keeps its order, as webdataset does
        assert rev.files == by_folder.files[2 * PER_TAR:] + by_folder.files[PER_TAR:2 * PER_TAR] + \
            by_folder.files[:PER_TAR]

    def test_what_goes_where(self, data, tmp_path):
        base, _ = data
        assert D.is_tar_source(base / "tars")
        assert not D.is_tar_source(base / "folder")  # an ImageFolder
        assert not D.is_tar_source(str(base / "folder" / "c00" / "img.jpeg"))
        mixed = tmp_path / "mixed"
        shutil.copytree(base / "tars", mixed)
        (mixed / "sub").mkdir()  # a visible sub-folder: not taken for a folder of tars
        assert not D.is_tar_source(mixed)
        with pytest.raises(ValueError, match="mixes .tar files with other files"):
            D.is_tar_source(_urls(base / "tars") + [str(base / "folder" / "c00" / "img.jpeg")])
        with pytest.raises(FileNotFoundError, match="no .tar files"):
            D.TarDataset(base / "folder")
        with pytest.raises(FileNotFoundError, match="train-000003.tar'? and 6 more .*train-000009.tar"):
            D.TarDataset(str(base / "tars" / "train-{000000..000009}.tar"))

    def test_pack_shards_still_go_to_shard_dataset(self, data, tmp_path):
        """A shard directory of fastprep.pack holds .tar files too: its manifest decides."""
        dst = tmp_path / "packed"
        pack_shards(data[0] / "folder", dst, shard_size=20_000, workers=1, progress=False)
        assert (dst / MANIFEST_NAME).is_file() and list(dst.glob("*.tar"))
        assert not D.is_tar_source(dst)
        assert type(D.make_loader(str(dst), device="cpu").dataset) is D.ShardDataset
        assert type(D.make_loader(_urls(dst), device="cpu").dataset) is D.TarDataset  # its tars, named
        _assert_same(_batches(_urls(dst)), _batches(str(dst)))

    def test_expand_braces_as_braceexpand(self):
        braceexpand = pytest.importorskip("braceexpand")
        patterns = ["train-{000000..000146}.tar", "a{1,2}b{x,y}", "{a{1,2}}", "{,a}", "{09..11}", "{-05..3..3}",
                    "{abc}", "x{a..e..2}", "{3..1}", "a\\{1,2\\}", "{a,b\\,c}", "{0..10..-3}", "{10..0..3}",
                    "{a..C}", "{1..1}", "{007..9}", "{}", "{,}", "{a,}", "{0..0010}", "s3://b/p/{a,b}/{0..2}.tar",
                    "{x{1..3},y}{A,B}", "plain.tar", "{1..3}{a}", "{{1,2},{3,4}}", "{Y..b}", "{z..A..5}"]
        for pattern in patterns:
            assert D.expand_braces(pattern) == list(braceexpand.braceexpand(pattern)), pattern
        for bad in ("{1..3", "{1..3}}", "}{1,2}"):
            with pytest.raises(ValueError, match="unbalanced"):
                D.expand_braces(bad)

    def test_key_rule_is_webdatasets(self):
        from webdataset.tariterators import base_plus_ext

        names = ["a/.x.jpg", ".x.jpg", "a.b/.x.jpg", "a//.x.jpg", "/.x.jpg", "a.", "a/b.c/d", "a.b.jpg",
                 "n01440764_10026.JPEG", "x/y/z.tar.gz", "noext"]
        rng = random.Random(0)
        names += ["".join(rng.choice("ab./") for _ in range(rng.randint(1, 8))) for _ in range(3000)]
        for name in names:
            assert T.webdataset_split(name) == base_plus_ext(name), name


class TestMembers:
    def test_keys_metadata_and_corners_as_webdataset(self, tmp_path):
        """Members that belong to no sample (``__index__``, ``__meta__/``, folders, links,
        names without an extension), a basename starting with a dot, long and non-ASCII names
        (PAX headers), dotted keys: the samples webdataset yields."""
        jpg = [encode_jpeg(photo_like(24 + k, 30, 40 + k)) for k in range(6)]
        long_key = "s/" + "l" * 120
        members = [("__index__", b"{}"), ("d", None), ("__meta__/x.jpg", jpg[0]), ("noext", b"x"),
                   ("n01440764_10026.JPEG", jpg[1]), ("n01440764_10026.cls", b"3\n"),
                   ("a.b.jpg", jpg[2]), ("a.b.cls", b" 4 "), ("link.jpg", ("link", "a.b.jpg")),
                   ("d/.hidden.jpg", jpg[3]), ("d/.hidden.cls", b"5"),
                   (long_key + ".jpg", jpg[4]), (long_key + ".cls", b"6"),
                   ("caf\u00e9.webp.jpg", jpg[5]), ("caf\u00e9.webp.cls", b"7")]
        path = tmp_path / "t" / "x.tar"
        path.parent.mkdir()
        path.write_bytes(_tar_bytes(members))
        ds = D.TarDataset(path.parent)
        ref = _wds_samples([str(path)])
        assert [ds.sample_key(i)[1] for i in range(len(ds))] == [s["__key__"] for s in ref] == \
            ["n01440764_10026", "a", "d/", long_key, "caf\u00e9"]
        assert ds.targets == [3, 4, 5, 6, 7]
        want = [jpg[1], jpg[2], jpg[3], jpg[4], jpg[5]]
        assert [d.numpy().tobytes() for d, _ in ds.read_encoded_batch(range(len(ds)))] == want
        assert [ds.read_encoded(i)[0].numpy().tobytes() for i in range(len(ds))] == want

    def test_targets_from_json(self, tmp_path):
        jpg = encode_jpeg(photo_like(24, 30, 1))
        members = [("a.jpg", jpg), ("a.json", b'{"label": 3, "cls": 9}'),
                   ("b.jpg", jpg), ("b.json", b"5"),
                   ("c.jpg", jpg), ("c.json", b'{"label": "cat", "cls": 2}'),
                   ("d.jpg", jpg), ("d.cls", b"1"), ("d.json", b'{"label": 7}')]  # .cls first
        (tmp_path / "j").mkdir()
        (tmp_path / "j" / "x.tar").write_bytes(_tar_bytes(members))
        assert D.TarDataset(tmp_path / "j").targets == [3, 5, 2, 1]

    def test_no_targets_anywhere_is_all_zero(self, tmp_path):
        jpg = encode_jpeg(photo_like(24, 30, 1))
        (tmp_path / "u").mkdir()
        (tmp_path / "u" / "x.tar").write_bytes(_tar_bytes([("a.jpg", jpg), ("a.json", b'{"caption": "x"}'),
                                                           ("b.jpg", jpg), ("b.txt", b"caption")]))
        ds = D.TarDataset(tmp_path / "u")
        assert not ds.labelled and ds.targets == [0, 0] and len(ds) == 2

    def test_some_without_target(self, tmp_path):
        jpg = encode_jpeg(photo_like(24, 30, 1))
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "x.tar").write_bytes(_tar_bytes([("a.jpg", jpg), ("a.cls", b"1"), ("b.jpg", jpg),
                                                           ("c.jpg", jpg), ("c.cls", b"2")]))
        with pytest.raises(ValueError, match=r"x.tar'?: sample 'b': no target"):
            D.TarDataset(tmp_path / "m")
        with pytest.warns(UserWarning, match="left out 1"):
            ds = D.TarDataset(tmp_path / "m", on_error="skip")
        assert ds.targets == [1, 2] and [p.key for p in ds.left_out] == ["b"]


class TestCache:
    def test_written_reused_invalidated(self, copy, monkeypatch, cache_dir):
        scanned = _count_scans(monkeypatch)
        first = D.TarDataset(copy)
        assert sorted(scanned) == ["train-000000.tar", "train-000001.tar", "train-000002.tar"]
        index = copy / T.INDEX_DIR / "train-000001.tar.json"
        assert index.is_file() and T.tar_index_path(str(copy / "train-000001.tar")) == str(index)
        assert json.loads(index.read_text())["stamp"]["size"] == (copy / "train-000001.tar").stat().st_size
        assert not cache_dir.exists()  # beside the tars when their folder is writable
        scanned.clear()
        again = D.TarDataset(copy)
        assert scanned == [] and again.files == first.files and again.targets == first.targets
        # a tar rewritten: other samples, another size -- scanned again, the others not
        images = [make() for _, _, make in SAMPLES]
        other = copy / "other"
        _write_tars(other, images[::-1])
        shutil.copy(other / "train-000001.tar", copy / "train-000001.tar")
        shutil.rmtree(other)
        changed = D.TarDataset(copy)
        assert scanned == ["train-000001.tar"]
        assert changed.read_encoded(PER_TAR)[0].numpy().tobytes() == images[::-1][PER_TAR]
        # the same size, a new mtime: scanned again
        scanned.clear()
        st = (copy / "train-000002.tar").stat()
        os.utime(copy / "train-000002.tar", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        D.TarDataset(copy)
        assert scanned == ["train-000002.tar"]
        # a damaged cache file is rebuilt, never trusted
        scanned.clear()
        (copy / T.INDEX_DIR / "train-000000.tar.json").write_text('{"format": "fastprep-tar-index", "keys": [1]')
        assert D.TarDataset(copy).files == changed.files and scanned == ["train-000000.tar"]

    def test_cache_folder_when_the_data_is_read_only(self, copy, monkeypatch, cache_dir):
        scanned = _count_scans(monkeypatch)
        real = T.write_atomic

        def write(path, data):  # what a read-only folder does (even to root, who could write there)
            if str(copy) in path:
                return False
            return real(path, data)

        monkeypatch.setattr(T, "write_atomic", write)
        os.chmod(copy, stat.S_IRUSR | stat.S_IXUSR)
        try:
            first = D.TarDataset(copy)
            again = D.TarDataset(copy)
        finally:
            os.chmod(copy, stat.S_IRWXU)
        assert len(scanned) == 3 and again.files == first.files
        cached = sorted(cache_dir.glob("*.json"))
        assert len(cached) == 3 and not (copy / T.INDEX_DIR / "train-000000.tar.json").exists()
        assert str(cache_dir / Path(T.tar_index_path(str(copy / "train-000000.tar"), beside=False)).name) in \
            map(str, cached)

    def test_scan_threads(self, copy, monkeypatch):
        """Tars without an index are scanned in threads; one index each."""
        import threading

        names = set()
        real = T.scan_tar
        monkeypatch.setattr(T, "scan_tar", lambda *a: names.add(threading.current_thread().name) or real(*a))
        D.TarDataset(copy, index_workers=3)
        assert all(n.startswith("fastprep-tar-index") for n in names) and names


class TestBadInput:
    def _member_offsets(self, tar: Path) -> list[tuple[str, int, int]]:
        with tarfile.open(tar) as t:
            return [(m.name, m.offset, m.offset_data) for m in t]

    def test_truncated_tar(self, copy, data):
        tar = copy / "train-000001.tar"
        members = self._member_offsets(tar)
        _, _, cls_start = next(m for m in members if m[0] == "dir/s6.final.v3.cls")
        _, _, image_start = next(m for m in members if m[0] == "dir/s6.final.v3.jpg")
        for cut, where in ((cls_start + 10, "cut after its member 'dir/s6.final.v3.cls'"),
                           (image_start + 10, "but its member 'dir/s6.final.v3.jpg' ends at byte")):
            with open(tar, "r+b") as f:
                f.truncate(cut)  # in the sample after s4 and dir/s5
            with pytest.raises(ValueError, match=rf"train-000001.tar'?: truncated: {cut} bytes, {where}.*"
                                                 "the 2 samples before it are intact"):
                D.TarDataset(copy)
            shutil.copy(data[0] / "tars" / tar.name, tar)
        with open(tar, "r+b") as f:
            f.truncate(image_start + 10)
        with pytest.warns(UserWarning, match="truncated"):
            ds = D.TarDataset(copy, on_error="skip")
        keys = [ds.sample_key(i)[1] for i in range(len(ds))]
        assert "dir/s6" not in keys and ds.targets == [0, 1, 2, 3, 4, 5, 8, 9, 10, 11]
        assert len(ds.left_out) == 1 and ds.left_out[0].key is None
        with pytest.warns(UserWarning, match="truncated"):
            batches = _batches(str(copy), on_error="skip")
        assert sorted(torch.cat([y for _, y in batches]).tolist()) == ds.targets

    def test_damaged_header(self, copy):
        tar = copy / "train-000000.tar"
        members = self._member_offsets(tar)
        header = next(m for m in members if m[0].startswith("n01443537_1."))[1]
        with open(tar, "r+b") as f:
            f.seek(header + 10)
            f.write(b"\x13")  # its checksum no longer matches
        with pytest.raises(ValueError, match=r"train-000000.tar'?: damaged: the block at byte"):
            D.TarDataset(copy)
        with pytest.warns(UserWarning, match="damaged"):
            ds = D.TarDataset(copy, on_error="skip")
        # the sample before the damage may have had members after it: left out too
        assert ds.targets == [0] + list(range(4, 12))

    def test_damaged_member_header_after_indexing(self, copy):
        """A tar changed after it was indexed (the cache kept: same size and mtime): the
        header check names the tar and the member, on_error='skip' replaces the sample."""
        ds = D.TarDataset(copy)
        tar = copy / "train-000002.tar"
        st = tar.stat()
        offset = int(ds._offsets[9])
        with open(tar, "r+b") as f:
            f.seek(offset - 512 + 20)
            f.write(b"\x01")
        os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns))
        ds = D.TarDataset(copy)
        err = ds.read_encoded_batch([9])[0][0]
        assert isinstance(err, OSError) and "bad checksum" in str(err) and "s9.jpg" in str(err)
        with pytest.raises(fio.DecodeError, match=r"train-000002.tar:s9"):
            _batches(str(copy))
        skipping = D.make_loader(str(copy), batch_size=4, crop_size=CROP, device="cpu", seed=SEED, on_error="skip")
        assert sum(len(y) for _, y in skipping) == len(SAMPLES)
        assert skipping.dataset.skipped == 1 and skipping.dataset.skipped_files[0].path == "train-000002.tar:s9"

    def test_not_a_tar_and_compressed(self, copy, data):
        (copy / "bogus.tar").write_bytes(b"this is not a tar file\n" * 40)
        with pytest.raises(ValueError, match=r"bogus.tar'?: not a readable tar file"):
            D.TarDataset(copy)
        with pytest.warns(UserWarning, match="left out 1"):
            ds = D.TarDataset(copy, on_error="skip")
        assert len(ds) == len(SAMPLES) and "bogus.tar" in ds.left_out[0].tar
        (copy / "bogus.tar").unlink()
        (copy / "zipped.tar").write_bytes(gzip.compress((copy / "train-000000.tar").read_bytes()))
        with pytest.raises(ValueError, match=r"zipped.tar'?: gzip-compressed"):
            D.TarDataset(copy)
        (copy / "zipped.tar").unlink()
        (copy / "empty.tar").write_bytes(b"")
        with pytest.raises(ValueError, match="empty.tar"):
            D.TarDataset(copy)

    def test_samples_without_image(self, tmp_path):
        jpg = encode_jpeg(photo_like(24, 30, 1))
        (tmp_path / "n").mkdir()
        (tmp_path / "n" / "x.tar").write_bytes(_tar_bytes([
            ("dataset.json", b'{"name": "demo"}'), ("a.jpg", jpg), ("a.cls", b"0"), ("b.txt", b"caption"),
            ("b.cls", b"1"), ("c.jpg", jpg), ("c.jpg.cls", b"2"), ("c.JPG", jpg), ("d.jpg", jpg), ("d.cls", b"x")]))
        with pytest.raises(ValueError, match="sample 'dataset': no image member") as e:
            D.TarDataset(tmp_path / "n")
        assert "sample 'b': no image member" in str(e.value) and "two members with extension .jpg" in str(e.value)
        assert "'d.cls' is not an integer class index" in str(e.value)
        with pytest.warns(UserWarning, match="left out 4"):
            ds = D.TarDataset(tmp_path / "n", on_error="skip")
        assert [ds.sample_key(i)[1] for i in range(len(ds))] == ["a"]
        assert [p.key for p in ds.left_out] == ["dataset", "b", "c", "d"]

    def test_member_that_is_not_an_image(self, tmp_path):
        jpg = encode_jpeg(photo_like(32, 32, 1))
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "x.tar").write_bytes(_tar_bytes([("a.jpg", jpg), ("a.cls", b"0"),
                                                           ("b.jpg", b"not an image at all"), ("b.cls", b"1")]))
        with pytest.raises(fio.DecodeError, match=r"x.tar:b"):
            _batches(str(tmp_path / "t"), shuffle=False)
        loader = D.make_loader(str(tmp_path / "t"), batch_size=2, crop_size=CROP, device="cpu", on_error="skip")
        assert [y.tolist() for _, y in loader] == [[0, 0]]
        assert loader.dataset.skipped_files[0].path == "x.tar:b"

    def test_fifo_is_never_read(self, copy):
        fifo = copy / "fifo.tar"
        os.mkfifo(fifo)
        assert [Path(t).name for t in D.TarDataset(copy).tars] == [p.name for p in sorted(copy.glob("train-*.tar"))]
        with pytest.raises(OSError, match="fifo.tar"):
            D.TarDataset([str(fifo)])


@pytest.fixture(scope="module")
def moto(data):
    """moto's S3 server with the tars under ``s3://tars/wds/`` and a copy to change under
    ``s3://tars/changing/``."""
    with moto_s3(BUCKET) as (endpoint, client):
        for tar in sorted((data[0] / "tars").glob("*.tar")):
            for prefix in ("wds", "changing"):
                client.put_object(Bucket=BUCKET, Key=f"{prefix}/{tar.name}", Body=tar.read_bytes())
        client.create_bucket(Bucket="a-bucket")  # "bucket" in a URL is not a missing bucket
        client.put_object(Bucket="a-bucket", Key="x/one.tar", Body=(data[0] / "tars" / "train-000001.tar").read_bytes())
        yield endpoint, client


@pytest.mark.parametrize("client", ["native", "obstore"])
class TestS3:
    @pytest.fixture(autouse=True)
    def on_moto(self, moto, monkeypatch, client):
        pytest.importorskip("obstore")
        use_s3_endpoint(monkeypatch, moto[0])
        if client == "obstore":  # the native client made unavailable (as on an https endpoint)
            import fastprep.data._native_s3 as native

            monkeypatch.setattr(native, "native_client", lambda *args, **kwargs: "made unavailable by the test")
        return moto

    def test_prefix_pattern_list(self, data, monkeypatch, cache_dir):
        base, images = data
        scanned = _count_scans(monkeypatch)
        url = f"s3://{BUCKET}/wds/"
        assert D.is_tar_source(url) and not D.is_tar_source(f"s3://{BUCKET}/")
        loader = D.make_loader(url, batch_size=4, crop_size=CROP, device="cpu", seed=SEED)
        ds = loader.dataset
        assert isinstance(ds, D.TarDataset) and ds.tars[0] == f"{url}train-000000.tar"
        local = D.TarDataset(base / "tars")
        assert ds.files == local.files and ds.targets == local.targets
        _assert_same([(x.clone(), y.clone()) for x, y in loader], _batches(str(base / "tars")))
        # one batch: one get_many with every range read in it
        calls = []
        store = ds.object_store
        real = store.get_many
        monkeypatch.setattr(store, "get_many", lambda requests: calls.append(len(requests)) or real(requests))
        got = ds.read_encoded_batch(range(len(ds)))
        assert calls == [len(ds)] and [d.numpy().tobytes() for d, _ in got] == images
        # the index: scanned once, cached in the cache folder (never written to the bucket)
        assert len(scanned) == 3 and len(list(cache_dir.glob("*.json"))) == 3
        scanned.clear()
        for source in (f"s3://{BUCKET}/wds/train-{{000000..000002}}.tar",
                       [f"s3://{BUCKET}/wds/train-00000{k}.tar" for k in range(3)]):
            again = D.TarDataset(source)
            assert again.files == ds.files and again.tars == ds.tars
        assert scanned == []

    def test_changed_object_is_scanned_again(self, data, moto, monkeypatch):
        base, images = data
        scanned = _count_scans(monkeypatch)
        url = f"s3://{BUCKET}/changing/"
        first = D.TarDataset(url)
        assert len(scanned) == 3 and first.read_encoded(PER_TAR)[0].numpy().tobytes() == images[PER_TAR]
        other = base.parent / f"other-{os.getpid()}"
        _write_tars(other, images[::-1])
        moto[1].put_object(Bucket=BUCKET, Key="changing/train-000001.tar",
                           Body=(other / "train-000001.tar").read_bytes())
        try:
            scanned.clear()
            changed = D.TarDataset(url)
            assert scanned == ["train-000001.tar"]
            assert changed.read_encoded(PER_TAR)[0].numpy().tobytes() == images[::-1][PER_TAR]
        finally:
            moto[1].put_object(Bucket=BUCKET, Key="changing/train-000001.tar",
                               Body=(base / "tars" / "train-000001.tar").read_bytes())
            shutil.rmtree(other)

    def test_bucket_names(self, data):
        assert D.is_tar_source("s3://a-bucket/x/")
        ds = D.TarDataset("s3://a-bucket/x/")
        assert ds.files == [f.replace("train-000001", "one") for f in D.TarDataset(data[0] / "tars").files
                            if f.startswith("train-000001")]
        with pytest.raises(FileNotFoundError, match="bucket 'no-such-bucket' does not exist"):
            D.make_loader("s3://no-such-bucket/wds/", device="cpu")

    def test_missing(self, data):
        with pytest.raises(FileNotFoundError, match="train-000003.tar'? and 4 more .*train-000007.tar"):
            D.TarDataset(f"s3://{BUCKET}/wds/train-{{000000..000007}}.tar")
        with pytest.raises(FileNotFoundError, match="no .tar objects"):
            D.TarDataset(f"s3://{BUCKET}/nothing/")
