"""``s3://`` sources (docs/storage.md): a class-folder of images (:class:`fastprep.data.ObjectFolder`)
and WebDataset shards (:class:`fastprep.data.ShardDataset`) read from an S3 API implementation
started here on a free localhost port (moto's server), and from the project's own local server
(:class:`fastprep.bench.s3server.LocalS3Server`) injecting 503s and reset connections. The
reference is the same tree read from disk: the same classes and order as torchvision's
ImageFolder, the same batches bit for bit; resuming mid-epoch, missing buckets and objects,
retries and their budget, credentials kept out of pickles and state. Every test runs once per
client: the native one (``storage.client="auto"`` on these plain-http endpoints) and obstore
(the native client made unavailable, as on an https endpoint)."""

import os
import pickle
import shutil
import time
from pathlib import Path

import pytest
import torch

import fastprep.data as D
import fastprep.data.engine as engine_module
import fastprep.io as fio
from fastprep.bench.s3server import LocalS3Server
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.pack import pack_folder, pack_shards
from conftest import S3_SECRET, make_jpeg, moto_s3, png_bytes, use_s3_endpoint

obstore = pytest.importorskip("obstore")
moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET = "train"
SECRET = S3_SECRET
FALLBACK_WARNING = "ignore:fastprep.*decoded in full:UserWarning"
pytestmark = pytest.mark.filterwarnings(FALLBACK_WARNING)


TREE = {
    "cat/a.jpg": lambda: encode_jpeg(photo_like(40, 56, 1)),
    "cat/b.v2.JPEG": lambda: make_jpeg("420-progressive", 50, 70, seed=2),
    "cat/deep/c.jpg": lambda: make_jpeg("gray", 33, 45, seed=3),
    "cat deep/z.jpg": lambda: encode_jpeg(photo_like(44, 40, 10)),  # sorts between cat/ and cat/deep/
    "cat/notes.txt": lambda: b"not an image\n",
    "dog/100%.jpg": lambda: make_jpeg("444", 36, 44, seed=4),
    "dog/d.png": lambda: png_bytes(30, 41, 5),
    "dog/e.jpeg": lambda: make_jpeg("422", 48, 37, seed=6),
    "emu/f.jpg": lambda: make_jpeg("cmyk", 40, 40, seed=7),
    "emu/g.jpg": lambda: encode_jpeg(photo_like(61, 33, 8)),
    "emu/h.jpg": lambda: encode_jpeg(photo_like(52, 44, 9)),
    "emu/i.jpg": lambda: encode_jpeg(photo_like(45, 47, 11)),
    "README": lambda: b"beside the class folders: not a sample\n",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A folder holding ``folder/`` (an ImageFolder tree), ``packed/`` (it packed by
    ``fastprep.pack``: restart intervals and their index), ``shards/`` (it packed into
    shards of at most 20 kB) and ``wpacked/`` (larger images packed, for window reads)."""
    base = tmp_path_factory.mktemp("s3data")
    for rel, make in TREE.items():
        path = base / "folder" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make())
    pack_folder(base / "folder", base / "packed", workers=1, progress=False)
    for k in range(7):  # large enough that crop windows are decoded from some of their intervals
        path = base / "wfolder" / f"c{k % 2}" / f"{k}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_jpeg(photo_like(240 + 37 * k, 320 + 23 * k, 20 + k)))
    (base / "wfolder" / "c1" / "gray.jpg").write_bytes(make_jpeg("gray", 200, 260, seed=30))
    (base / "wfolder" / "c0" / "444.jpg").write_bytes(make_jpeg("444", 210, 250, seed=31))
    pack_folder(base / "wfolder", base / "wpacked", workers=1, progress=False)
    pack_shards(base / "folder", base / "shards", shard_size=20_000, workers=1, progress=False)
    return base


@pytest.fixture(autouse=True, params=["native", "obstore"])
def client(request, monkeypatch):
    """The client that reads: ``auto`` picks the native one here; for ``obstore`` it is made
    unavailable (in this process: a worker process of the processes engine picks its own)."""
    if request.param == "obstore":
        import fastprep.data._native_s3 as native

        monkeypatch.setattr(native, "native_client", lambda *args, **kwargs: "made unavailable by the test")
    return request.param


def _use_endpoint(monkeypatch, endpoint):
    use_s3_endpoint(monkeypatch, endpoint)


@pytest.fixture(scope="module")
def moto(data):
    """moto's S3 server on a free localhost port, the data uploaded to bucket ``train``."""
    with moto_s3(BUCKET) as (endpoint, client):
        for path in sorted(data.rglob("*")):
            if path.is_file():
                client.put_object(Bucket=BUCKET, Key=path.relative_to(data).as_posix(), Body=path.read_bytes())
        yield endpoint


@pytest.fixture
def on_moto(moto, monkeypatch):
    _use_endpoint(monkeypatch, moto)
    return moto


@pytest.fixture
def local_server(data, monkeypatch):
    """Start a LocalS3Server on ``data`` (bucket ``train``) with the given faults."""
    servers = []

    def start(**kwargs):
        server = LocalS3Server(str(data), BUCKET, lifetime_s=60, **kwargs).start()
        servers.append(server)
        _use_endpoint(monkeypatch, server.endpoint)
        return server

    yield start
    for server in servers:
        server.stop()


def _batches(source, **kwargs):
    kwargs.setdefault("num_workers", 2)
    kwargs.setdefault("engine", "threads")
    loader = D.make_loader(source, batch_size=3, crop_size=24, device="cpu", seed=7, shuffle=True, **kwargs)
    return [(x.clone(), y.clone()) for x, y in loader]


def _assert_same(got, ref):
    assert len(got) == len(ref)
    for (x, y), (rx, ry) in zip(got, ref):
        assert torch.equal(y, ry) and torch.equal(x, rx)


LAYOUTS = {"folder": ("folder", D.ObjectFolder), "packed": ("packed", D.ObjectFolder),
           "shards": ("shards", D.ShardDataset)}


class TestMoto:
    def test_listing_is_imagefolders(self, data, on_moto):
        """Classes, order and targets as torchvision's ImageFolder lists the tree on disk."""
        from torchvision.datasets import ImageFolder

        ref = ImageFolder(str(data / "folder"))
        ds = D.ObjectFolder(f"s3://{BUCKET}/folder/")
        assert ds.classes == ref.classes == ["cat", "cat deep", "dog", "emu"]
        assert [(os.path.relpath(p, data / "folder").replace(os.sep, "/"), t) for p, t in ref.samples] == \
            list(zip(ds.names, ds.targets))
        assert ds.files[0] == f"s3://{BUCKET}/folder/cat/a.jpg"

    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    def test_batches_equal_local(self, data, on_moto, layout):
        folder, cls = LAYOUTS[layout]
        url = f"s3://{BUCKET}/{folder}"
        ref = _batches(str(data / folder))
        loader = D.make_loader(url, batch_size=3, crop_size=24, device="cpu", seed=7, num_workers=2)
        assert isinstance(loader.dataset, cls)
        for epoch in range(2):  # each epoch its own order, the local tree's
            loader.set_epoch(epoch)
            got = [(x.clone(), y.clone()) for x, y in loader]
            if epoch == 0:
                _assert_same(got, ref)
            else:
                local = D.make_loader(str(data / folder), batch_size=3, crop_size=24, device="cpu", seed=7,
                                      num_workers=2)
                local.set_epoch(1)
                _assert_same(got, [(x.clone(), y.clone()) for x, y in local])

    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    def test_resume_mid_epoch(self, data, on_moto, layout):
        url = f"s3://{BUCKET}/{LAYOUTS[layout][0]}"
        full = _batches(url, recipe="imagenet-train")
        loader = D.make_loader(url, batch_size=3, device="cpu", seed=7, shuffle=True, recipe="imagenet-train",
                               num_workers=2)
        it = iter(loader)
        head = [(x.clone(), y.clone()) for x, y in (next(it), next(it))]
        state = loader.state_dict()
        del it
        assert SECRET not in repr(state) and "testing" not in repr(state)
        resumed = D.make_loader(url, batch_size=3, device="cpu", seed=7, shuffle=True, recipe="imagenet-train",
                                num_workers=2)
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        _assert_same(head + [(x.clone(), y.clone()) for x, y in resumed], full)

    def test_processes_engine(self, data, on_moto):
        """DataLoader workers: spawned from a forkserver (obstore's threads do not survive
        fork), each with its own client; the local tree's batches."""
        ref = _batches(str(data / "shards"), engine="processes")
        got = _batches(f"s3://{BUCKET}/shards", engine="processes")
        _assert_same(got, ref)

    def test_the_client_that_reads(self, data, on_moto, client):
        store = D.ObjectStore(f"s3://{BUCKET}/folder")
        assert store.client_name == ("native" if client == "native" else "obstore (made unavailable by the test)")
        assert store.read_all("cat/a.jpg") == (data / "folder/cat/a.jpg").read_bytes()
        assert store.stats["requests"] == 1

    def test_forked_client_refused(self, on_moto, monkeypatch):
        import fastprep.data.objects as objects

        store = D.ObjectStore(f"s3://{BUCKET}/folder", D.StorageOptions(client="obstore"))
        monkeypatch.setattr(objects, "_runtime_pid", os.getpid() + 1)  # as in a child forked after it ran
        with pytest.raises(RuntimeError, match="forked after obstore ran"):
            store.read_all("cat/a.jpg")

    def test_missing_bucket_fails_fast_naming_it(self, on_moto):
        for url in ("s3://no-such-bucket/folder/", "s3://no-such-bucket/shards"):
            start = time.monotonic()
            with pytest.raises(FileNotFoundError, match="no-such-bucket"):
                D.make_loader(url, device="cpu")
            assert time.monotonic() - start < 15  # no retry loop on a 404

    def test_missing_prefix_and_object(self, on_moto):
        with pytest.raises(FileNotFoundError, match=f"s3://{BUCKET}/nothing-here/"):
            D.make_loader(f"s3://{BUCKET}/nothing-here/", device="cpu")
        store = D.ObjectStore(f"s3://{BUCKET}/folder")
        with pytest.raises(FileNotFoundError, match=f"object missing: 's3://{BUCKET}/folder/cat/zzz.jpg'"):
            store.read_all("cat/zzz.jpg")
        assert bytes(store.read_range("cat/a.jpg", 2, 5)) == bytes(store.read_all("cat/a.jpg"))[2:7]

    def test_pickle_has_no_credentials(self, on_moto):
        ds = D.ObjectFolder(f"s3://{BUCKET}/folder/")
        ds.read_encoded(0)  # the client exists now
        blob = pickle.dumps(ds)
        assert SECRET.encode() not in blob and SECRET not in repr(ds)
        again = pickle.loads(blob)
        assert torch.equal(again.read_encoded(3)[0], ds.read_encoded(3)[0])
        shards = D.ShardDataset(f"s3://{BUCKET}/shards")
        shards.read_encoded(0)
        assert SECRET.encode() not in pickle.dumps(shards)


class TestAddressing:
    """AWS-style addressing and regions against moto's server."""

    def test_virtual_hosted(self, data, moto, monkeypatch, tmp_path, client):
        """botocore's ``addressing_style = virtual``: the native client puts the bucket in front of
        the endpoint's host (``train.localhost``, loopback by RFC 6761) and requests ``/key``; moto
        takes the bucket from the Host header. obstore lists (path-style). The batches are the
        local tree's."""
        port = moto.rsplit(":", 1)[1]
        _use_endpoint(monkeypatch, f"http://localhost:{port}")
        (tmp_path / "config").write_text("[default]\ns3 =\n    addressing_style = virtual\n")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        for folder in ("folder", "shards"):
            url = f"s3://{BUCKET}/{folder}/"
            store = D.ObjectStore(url)
            if client == "native":
                assert (store.native().host, store.native().base) == (f"{BUCKET}.localhost:{port}", "/")
            files = sorted(p for p in (data / folder).rglob("*") if p.is_file())
            names = [p.relative_to(data / folder).as_posix() for p in files]
            # the bytes against the files themselves, whole and a range of each
            assert store.get_many([(n, None, None) for n in names]) == [p.read_bytes() for p in files]
            assert store.get_many([(n, 3, 40) for n in names]) == [p.read_bytes()[3:43] for p in files]
            _assert_same(_batches(url), _batches(str(data / folder)))

    def test_bucket_region_from_the_endpoint(self, data, moto, monkeypatch, tmp_path, client):
        """No region configured: requests are signed for the region the server names for the
        bucket (``x-amz-bucket-region``), here a bucket made in eu-west-2."""
        from fastprep.data._native_s3 import region_of

        if client == "obstore":
            pytest.skip("the region is the native client's to find")
        boto3.client("s3", endpoint_url=moto, region_name="eu-west-2", aws_access_key_id="testing",
                     aws_secret_access_key=SECRET).create_bucket(
            Bucket="eu-data", CreateBucketConfiguration={"LocationConstraint": "eu-west-2"})
        _use_endpoint(monkeypatch, moto)
        monkeypatch.delenv("AWS_REGION")
        (tmp_path / "config").write_text("")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        assert region_of(moto, "eu-data") == "eu-west-2" and region_of(moto, BUCKET) == "us-east-1"
        monkeypatch.setenv("AWS_REGION", "ap-south-1")  # configured: it wins on an S3-compatible endpoint
        assert region_of(moto, "eu-data") == "ap-south-1"


class TestFaults:
    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    def test_503_and_resets_same_batches(self, data, local_server, layout):
        """A 503 on every 7th request, a reset connection on every 11th: the same batches,
        no sample lost or served twice."""
        folder = LAYOUTS[layout][0]
        ref = _batches(str(data / folder))
        server = local_server(fail_every=7, reset_every=11, page_size=4)  # the listing takes pages too
        got = _batches(f"s3://{BUCKET}/{folder}")
        _assert_same(got, ref)
        stats = server.stats
        assert stats["failed_503"] > 0 and stats["resets"] > 0

    def test_paginated_listing(self, data, local_server):
        server = local_server(page_size=2)
        ds = D.ObjectFolder(f"s3://{BUCKET}/folder/")
        assert server.stats["lists"] >= len(ds) // 2
        assert ds.names == [os.path.relpath(p, data / "folder").replace(os.sep, "/")
                            for p in D.JpegFolder(data / "folder").files]

    def test_retry_budget_names_the_url(self, data, local_server):
        local_server(fail_keys={"folder/dog/e.jpeg", "shards/shard-000000.tar"})
        storage = D.StorageOptions(retries=1, timeout_s=5)
        with pytest.raises(fio.DecodeError, match=rf"s3://{BUCKET}/folder/dog/e.jpeg.*after 1 retries.*503"):
            _batches(f"s3://{BUCKET}/folder", storage=storage)
        with pytest.raises(fio.DecodeError, match=rf"s3://{BUCKET}/shards/shard-000000.tar.*after 1 retries"):
            _batches(f"s3://{BUCKET}/shards", storage=storage)

    def test_requests_in_flight_bounded(self, data, local_server):
        """A batch's reads are in flight together, never more than max_in_flight."""
        server = local_server(latency_s=0.05)
        ds = D.ObjectFolder(f"s3://{BUCKET}/folder/", storage=D.StorageOptions(max_in_flight=4))
        server.reset_stats()
        got = ds.read_encoded_batch(range(len(ds)))
        assert [bytes(x.numpy()) for x, _ in got] == [(data / "folder" / n).read_bytes() for n in ds.names]
        assert 2 <= server.stats["max_in_flight"] <= 4 and ds.store.stats["max_in_flight"] == 4

    def test_timeout_names_the_url(self, data, local_server):
        local_server(latency_s=30)  # a server that does not answer in time
        store = D.ObjectStore(f"s3://{BUCKET}/folder", D.StorageOptions(timeout_s=0.5, retries=0))
        start = time.monotonic()
        with pytest.raises(OSError, match=rf"cannot read 's3://{BUCKET}/folder/cat/a.jpg'"):
            store.read_all("cat/a.jpg")
        assert time.monotonic() - start < 10  # bounded: no hang

    def test_skip_names_the_object(self, data, local_server):
        local_server(fail_keys={"folder/dog/e.jpeg"})
        loader = D.make_loader(f"s3://{BUCKET}/folder", batch_size=3, crop_size=24, device="cpu", seed=7,
                               on_error="skip", storage=D.StorageOptions(retries=0))
        n = sum(len(y) for _, y in loader)
        assert n == len(loader.dataset)
        skipped = loader.dataset.skipped_files
        assert [s.path for s in skipped] == [f"s3://{BUCKET}/folder/dog/e.jpeg"]
        assert "503" in skipped[0].reason


class TestWindowReads:
    """``StorageOptions(window_reads=True)``: packed files read by window (header and index,
    then the window's intervals), the local packed tree's batches."""

    WINDOWS = D.StorageOptions(window_reads=True)

    @pytest.fixture(autouse=True)
    def small_prefix(self, monkeypatch):
        """A prefix shorter than the headers: their rest is read in a second request."""
        import fastprep.data.objects as objects

        monkeypatch.setattr(objects, "WINDOW_PREFIX", 300)

    @pytest.mark.parametrize("read_ahead", [True, False])
    def test_same_batches_with_faults_fewer_bytes(self, data, local_server, read_ahead):
        """The headers read ahead in the epoch's order, or each batch's when it is taken."""
        ref = _batches(str(data / "wpacked"))
        server = local_server(fail_every=7, reset_every=11)
        storage = D.StorageOptions(window_reads=True, read_ahead=read_ahead)
        loader = D.make_loader(f"s3://{BUCKET}/wpacked", batch_size=3, crop_size=24, device="cpu", seed=7,
                               shuffle=True, num_workers=2, storage=storage)
        assert loader.dataset.window_reads
        _assert_same([(x.clone(), y.clone()) for x, y in loader], ref)
        assert server.stats["failed_503"] > 0 and server.stats["resets"] > 0
        stats = loader.dataset.store.stats
        # every sample read by window would be one header read and 1-2 ranges; whole files one GET
        assert stats["requests"] > 2 * len(loader.dataset)
        assert stats["bytes"] < 0.6 * sum(loader.dataset.sizes)

    def test_resume_mid_epoch(self, data, local_server):
        local_server()
        url, kwargs = f"s3://{BUCKET}/wpacked", dict(batch_size=2, device="cpu", seed=7, shuffle=True,
                                                    recipe="imagenet-train", num_workers=2)
        full = [(x.clone(), y.clone()) for x, y in D.make_loader(str(data / "wpacked"), **kwargs)]
        loader = D.make_loader(url, storage=self.WINDOWS, **kwargs)
        it = iter(loader)
        head = [(x.clone(), y.clone()) for x, y in (next(it), next(it))]
        state = loader.state_dict()
        del it
        resumed = D.make_loader(url, storage=self.WINDOWS, **kwargs)
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        _assert_same(head + [(x.clone(), y.clone()) for x, y in resumed], full)

    def test_files_not_packed_are_read_whole(self, data, local_server):
        """PNG, CMYK, progressive, files without an interval index: the local tree's batches."""
        ref = _batches(str(data / "folder"))
        local_server(fail_every=7)
        _assert_same(_batches(f"s3://{BUCKET}/folder", storage=self.WINDOWS), ref)

    def test_a_missing_object_names_its_url(self, data, local_server):
        local_server(fail_keys={"wpacked/c1/3.jpg"})
        storage = D.StorageOptions(window_reads=True, retries=1, timeout_s=5)
        with pytest.raises(fio.DecodeError, match=rf"s3://{BUCKET}/wpacked/c1/3.jpg.*after 1 retries.*503"):
            _batches(f"s3://{BUCKET}/wpacked", storage=storage)

    def test_option_checked(self):
        with pytest.raises(TypeError, match="window_reads must be True, False or 'auto', got 'yes'"):
            D.StorageOptions(window_reads="yes")
        with pytest.raises(ValueError, match="window_min_bytes must be an int >= 0, got -1"):
            D.StorageOptions(window_min_bytes=-1)

    @pytest.mark.parametrize("read_ahead", [True, False])
    def test_by_default_large_files_by_window(self, data, local_server, monkeypatch, read_ahead):
        """``window_reads="auto"`` (the default): files of at least ``window_min_bytes`` by
        window, smaller ones whole in one GET each; the local tree's batches."""
        ref = _batches(str(data / "wpacked"))
        sizes = sorted(p.stat().st_size for p in (data / "wpacked").rglob("*.jpg"))
        least = sizes[len(sizes) // 2]  # half of the files at least this large
        server = local_server(fail_every=7)
        storage = D.StorageOptions(window_min_bytes=least, read_ahead=read_ahead)
        assert storage.window_reads == "auto"
        loader = D.make_loader(f"s3://{BUCKET}/wpacked", batch_size=3, crop_size=24, device="cpu", seed=7,
                               shuffle=True, num_workers=2, storage=storage)
        assert loader.dataset.window_reads
        _assert_same([(x.clone(), y.clone()) for x, y in loader], ref)
        assert server.stats["failed_503"] > 0
        server.stop()
        local_server()  # no faults: the counts of one epoch, against every file read by window
        monkeypatch.setattr(engine_module, "_NEXT_EPOCH_BATCHES", 0)  # none of the next epoch's reads in them
        counts = {}
        for option in ("auto", True):
            storage = D.StorageOptions(window_reads=option, window_min_bytes=least, read_ahead=read_ahead)
            loader = D.make_loader(f"s3://{BUCKET}/wpacked", batch_size=3, crop_size=24, device="cpu", seed=7,
                                   shuffle=True, num_workers=2, storage=storage)
            loader.dataset.store.reset_stats()
            _assert_same([(x.clone(), y.clone()) for x, y in loader], ref)
            counts[option] = loader.dataset.store.stats
        sizes = loader.dataset.sizes
        small = [size for size in sizes if size < least]
        # a small file is one GET of all of it in place of a header read and the window's ranges
        assert counts["auto"]["requests"] <= counts[True]["requests"] - len(small)
        assert counts["auto"]["bytes"] > counts[True]["bytes"]
        assert counts["auto"]["bytes"] < sum(sizes) - 0.3 * (sum(sizes) - sum(small))

    def test_by_default_small_files_whole(self, data, local_server):
        """No file reaches ``window_min_bytes``: the folder is read as with ``window_reads=False``,
        one GET a file, every byte (counted per batch: read ahead, the next epoch's first reads
        would go out as this one ends)."""
        local_server()
        loader = D.make_loader(f"s3://{BUCKET}/wpacked", batch_size=3, crop_size=24, device="cpu", seed=7,
                               num_workers=2, storage=D.StorageOptions(read_ahead=False))
        assert not loader.dataset.window_reads
        loader.dataset.store.reset_stats()  # what make_loader read to set itself up
        local = D.make_loader(str(data / "wpacked"), batch_size=3, crop_size=24, device="cpu", seed=7, num_workers=2)
        _assert_same([(x.clone(), y.clone()) for x, y in loader], [(x.clone(), y.clone()) for x, y in local])
        stats = loader.dataset.store.stats
        assert stats["requests"] == len(loader.dataset) and stats["bytes"] == sum(loader.dataset.sizes)


def test_window_layout_of_damaged_headers():
    """A packed header cut short or with bytes changed parses to a layout or to None, never
    raises; the intact one parses, with intervals that tile the image as the frame says."""
    import random

    from fastprep.data.windows import WindowLayout, header_end

    packed = fio.transcode_jpeg(encode_jpeg(photo_like(200, 260, 3)))
    scan = header_end(packed)
    layout = WindowLayout.parse(packed, scan)
    assert layout is not None and (layout.height, layout.width) == (200, 260) and layout.fits(len(packed))
    assert layout.intervals(0, 0, 200, 260, 8) is None  # the whole image: not spliced
    assert WindowLayout.parse(encode_jpeg(photo_like(20, 30, 1)), header_end(encode_jpeg(photo_like(20, 30, 1)))) \
        is None  # no restart interval, no index
    rng = random.Random(0)
    for _ in range(300):
        head = bytearray(packed[:scan])
        for _ in range(rng.randint(1, 4)):
            head[rng.randrange(2, scan)] = rng.randrange(256)
        end = header_end(head)
        if end > 0:
            got = WindowLayout.parse(head, end)
            assert got is None or isinstance(got, WindowLayout)


def test_header_end():
    """Where the scan starts, from a prefix; how many bytes a short prefix needs."""
    from fastprep.data.windows import header_end

    jpeg = encode_jpeg(photo_like(20, 30, 1))
    sos = jpeg.index(b"\xff\xda")
    scan = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    assert header_end(jpeg) == header_end(jpeg[:scan]) == scan
    assert header_end(jpeg[:sos + 3]) == -(sos + 4) and header_end(jpeg[:sos + 4]) == -scan
    assert header_end(b"\x89PNG\r\n\x1a\n") == 0 and header_end(b"\xff") == -4


class TestReadAhead:
    def test_reads_ahead_of_the_batch(self, data, local_server, monkeypatch):
        """The epoch's reads are issued in its order ahead of the readers: more requests in
        flight than the two reader threads' batches hold, the local tree's batches; without
        read-ahead, at most those two batches."""
        ref = _batches(str(data / "shards"))
        local_server(latency_s=0.1)
        monkeypatch.setattr(engine_module, "_NEXT_EPOCH_BATCHES", 0)  # the counts are this epoch's alone
        for read_ahead in (True, False):
            loader = D.make_loader(f"s3://{BUCKET}/shards", batch_size=3, crop_size=24, device="cpu", seed=7,
                                   num_workers=2, storage=D.StorageOptions(read_ahead=read_ahead))
            store = loader.dataset.object_store
            store.reset_stats()  # counted from here: the epoch's reads, not the opening's
            _assert_same([(x.clone(), y.clone()) for x, y in loader], ref)
            stats = store.stats
            if read_ahead:  # every request of the epoch in flight at once (0.1 s each, fewer than 128)
                assert stats["max_in_flight"] == stats["requests"] > 6
            else:  # two reader threads, a batch of 3 each, one request per sample
                assert stats["max_in_flight"] <= 6 and stats["requests"] == len(loader.dataset)

    def test_left_epoch_stops_its_reads(self, data, local_server):
        """An epoch left after one batch closes its read-ahead (no hang); the next epoch is
        the local tree's."""
        local_server(latency_s=0.02)
        loader = D.make_loader(f"s3://{BUCKET}/folder", batch_size=3, crop_size=24, device="cpu", seed=7,
                               num_workers=2)
        start = time.monotonic()
        for _ in loader:
            break
        assert time.monotonic() - start < 10
        loader.set_epoch(1)
        local = D.make_loader(str(data / "folder"), batch_size=3, crop_size=24, device="cpu", seed=7, num_workers=2)
        local.set_epoch(1)
        _assert_same([(x.clone(), y.clone()) for x, y in loader], [(x.clone(), y.clone()) for x, y in local])


    def test_processes_engine_reads_a_batch_at_once(self, data, local_server):
        """A DataLoader worker's batch: its requests in flight together (the server sees as many
        at once as a batch has samples, where one at a time would be one), the local tree's
        batches, for a class folder and shards."""
        server = local_server(latency_s=0.1)
        for folder in ("folder", "shards"):
            ref = _batches(str(data / folder), engine="processes", num_workers=1)
            server.reset_stats()
            _assert_same(_batches(f"s3://{BUCKET}/{folder}", engine="processes", num_workers=1), ref)
            assert server.stats["max_in_flight"] >= 3  # a batch's; read a sample at a time: 1


    def test_a_call_takes_slots_as_they_come_free(self, data, local_server, client):
        """A native call on a store of 4 slots that starts while another call holds 3 of them
        sends a request at a time at first, and more at once when they come free (not all 8
        of its requests through the one slot it found)."""
        import threading

        if client != "native":
            pytest.skip("the slots are the native client's")
        local_server(latency_s=0.3)
        store = D.ObjectStore(f"s3://{BUCKET}/folder", D.StorageOptions(max_in_flight=4))
        names = [n for n in sorted(TREE) if n.endswith(".jpg")][:8]
        store.fetch_native([(names[0], None, None)])  # the slots exist now
        slots = store._slots[1]
        for _ in range(3):  # another call's
            slots.acquire()
        threading.Timer(0.1, lambda: [slots.release() for _ in range(3)]).start()  # while the first wave waits
        answers, counts = store.fetch_native([(n, None, None) for n in names])
        assert [bytes(a.numpy()) for a in answers] == [(data / "folder" / n).read_bytes() for n in names]
        assert counts["requests"] == 8 and counts["max_in_flight"] == 4


    @pytest.mark.parametrize("seed", [7, None])
    def test_reads_run_on_across_epochs(self, data, local_server, monkeypatch, seed):
        """A seeded loader starts the next epoch's reads as an epoch ends (its first batches
        only, until it begins), and the next epoch takes them over; an epoch other than the
        one read ahead (``set_epoch``) drops them and reads its own. An unseeded loader's next
        order is not known before it begins: no reads ahead of it. Every epoch is the local
        tree's."""
        local_server(latency_s=0.02)
        kwargs = dict(batch_size=2, crop_size=24, device="cpu", num_workers=2)
        loader = D.make_loader(f"s3://{BUCKET}/shards", seed=seed, **kwargs)
        dataset, engine = loader.dataset, loader.loader
        issued: list[list[int]] = []  # the indices of each ReadAhead
        read_ahead = dataset.read_ahead

        def spy(indices, **kw):
            issued.append(list(indices))
            return read_ahead(indices, **kw)

        monkeypatch.setattr(dataset, "read_ahead", spy)
        for epoch in (0, 1, 5):
            loader.set_epoch(epoch)
            got = [(x.clone(), y.clone()) for x, y in loader]
            if seed is None:  # the order of an unseeded epoch: the one it drew
                continue
            local = D.make_loader(str(data / "shards"), seed=seed, **kwargs)
            local.set_epoch(epoch)
            _assert_same(got, [(x.clone(), y.clone()) for x, y in local])
        if seed is None:
            assert [len(i) for i in issued] == [len(dataset)] * 3 and engine._next_ahead is None
            return
        order = {}
        for epoch in (0, 1, 2, 5, 6):
            sampler = D.EpochSampler(len(dataset), seed=seed)
            sampler.set_epoch(epoch)
            order[epoch] = sampler.indices()
        # epoch 0's reads; epoch 1's, started as epoch 0 ended and taken over; epoch 2's, started as
        # epoch 1 ended and dropped (epoch 5 came next); epoch 5's; epoch 6's, started as it ended
        assert issued == [order[0], order[1], order[2], order[5], order[6]]
        assert engine._next_ahead[0] == 6 and engine._next_ahead[2].ahead == engine_module._NEXT_EPOCH_BATCHES * 2


class TestBlockShuffle:
    def test_block_order(self):
        """Blocks of consecutive indices in a keyed order, each block's indices together
        (in an order of their own); keyed by (seed, epoch)."""
        from fastprep._seeding import block_permutation

        for size, block in ((20, 4), (23, 5), (7, 16), (9, 1)):
            order = block_permutation(3, 1, size, block).tolist()
            assert sorted(order) == list(range(size))
            runs, k = [], 0
            while k < size:  # the order cut where the block changes
                j = k
                while j < size and order[j] // block == order[k] // block:
                    j += 1
                runs.append(order[k:j])
                k = j
            assert len(runs) == -(-size // block)  # each block in one run
            for run in runs:
                b = run[0] // block
                assert sorted(run) == list(range(b * block, min(size, (b + 1) * block)))
        assert torch.equal(block_permutation(3, 1, 200, 4), block_permutation(3, 1, 200, 4))
        assert not torch.equal(block_permutation(3, 1, 200, 4), block_permutation(3, 2, 200, 4))
        assert not torch.equal(block_permutation(3, 1, 200, 4), block_permutation(4, 1, 200, 4))
        with pytest.raises(ValueError, match="shuffle_block"):
            D.EpochSampler(10, shuffle_block=0)
        with pytest.raises(ValueError, match="shuffle_block"):
            D.make_loader([__file__], sampler=[0], shuffle_block=4, device="cpu")

    def test_coalesced_with_faults_same_batches(self, data, local_server, monkeypatch):
        """shards read in blocks of 4 neighbours: fewer requests than samples (a block's
        neighbours in one shard are one range read), with 503s and resets the local tree's
        batches."""
        kwargs = dict(batch_size=4, crop_size=24, device="cpu", seed=7, num_workers=2, shuffle_block=4)
        ref = [(x.clone(), y.clone()) for x, y in D.make_loader(str(data / "shards"), **kwargs)]
        plain = D.make_loader(str(data / "shards"), **{**kwargs, "shuffle_block": 1})
        assert torch.cat([y for _, y in ref]).tolist() != torch.cat([y for _, y in plain]).tolist()
        local_server(fail_every=7, reset_every=11)
        monkeypatch.setattr(engine_module, "_NEXT_EPOCH_BATCHES", 0)  # the counts are this epoch's alone
        loader = D.make_loader(f"s3://{BUCKET}/shards", **kwargs)
        store = loader.dataset.object_store
        store.reset_stats()
        _assert_same([(x.clone(), y.clone()) for x, y in loader], ref)
        # per batch, one read per shard it touches (this tree's samples are a few kB: a
        # shard's samples in a batch are close enough to be one read)
        ds = loader.dataset
        order = D.EpochSampler(len(ds), seed=7, shuffle_block=4).indices()
        reads = sum(len({int(ds._shard_ids[i]) for i in order[k:k + 4]}) for k in range(0, len(order), 4))
        assert store.stats["requests"] == reads < len(ds)

    def test_resume_mid_epoch(self, data, on_moto):
        url = f"s3://{BUCKET}/shards"
        kwargs = dict(batch_size=3, device="cpu", seed=7, shuffle=True, recipe="imagenet-train", num_workers=2,
                      shuffle_block=4)
        full = [(x.clone(), y.clone()) for x, y in D.make_loader(str(data / "shards"), **kwargs)]
        loader = D.make_loader(url, **kwargs)
        it = iter(loader)
        head = [(x.clone(), y.clone()) for x, y in (next(it), next(it))]
        state = loader.state_dict()
        del it
        resumed = D.make_loader(url, **kwargs)
        resumed.load_state_dict(state)
        _assert_same(head + [(x.clone(), y.clone()) for x, y in resumed], full)


def test_ray_reads_the_same_urls(data, on_moto):
    """RayLoader's listing of an s3:// folder is the local folder's (same files, classes,
    order) and its read tasks' bytes are the files' (no Ray cluster needed for either)."""
    ray_module = pytest.importorskip("fastprep.data.ray")
    paths, labels = ray_module._listing(f"s3://{BUCKET}/folder/", None)
    local = D.JpegFolder(data / "folder")
    rel = [os.path.relpath(p, data / "folder").replace(os.sep, "/") for p in local.files]
    assert paths == [f"s3://{BUCKET}/folder/{r}" for r in rel] and labels == list(local.targets)
    batch = ray_module._read_bytes({"path": paths + [f"s3://{BUCKET}/folder/cat/missing.jpg"]})
    assert list(batch["bytes"]) == [Path(p).read_bytes() for p in local.files] + [b""]


def test_bench_cli_on_a_served_folder(data, monkeypatch, capsys):
    """python -m fastprep.bench --data s3://... --serve DIR: the loader over the served
    folder beside the same files on disk, with the client's counters."""
    from fastprep.bench.cli import main

    # the counts of one epoch alone: none of the next epoch's first reads, issued as it ends
    monkeypatch.setattr(engine_module, "_NEXT_EPOCH_BATCHES", 0)

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    assert main(["--data", f"s3://{BUCKET}/folder/", "--serve", str(data), "--latency-ms", "1", "--local",
                 str(data / "folder"), "--epochs", "1", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(f"| s3://{BUCKET}/folder/"))
    assert row.split("|")[4].strip() == str(len(D.JpegFolder(data / "folder")))  # one request per sample


class TestErrors:
    def test_storage_options(self):
        for kwargs, match in ((dict(max_in_flight=0), "max_in_flight"), (dict(timeout_s=-1), "timeout_s"),
                              (dict(retries=1.5), "retries")):
            with pytest.raises(ValueError, match=match):
                D.StorageOptions(**kwargs)
        with pytest.raises(TypeError, match="StorageOptions"):
            D.ObjectStore("s3://b/p", {"max_in_flight": 4})

    def test_bad_urls(self, tmp_path):
        with pytest.raises(ValueError, match="names no bucket"):
            D.ObjectStore("s3:///prefix")
        with pytest.raises(ValueError, match="storage= configures s3:// sources"):
            D.make_loader(str(tmp_path), storage=D.StorageOptions(), device="cpu")

    def test_missing_client_names_the_extra(self, monkeypatch):
        import sys

        monkeypatch.setitem(sys.modules, "obstore", None)
        with pytest.raises(ImportError, match=r"fastprep\[s3\]"):
            D.ObjectStore("s3://bucket/prefix")


def test_local_server_stops_by_itself(tmp_path):
    shutil.copy(__file__, tmp_path / "x")
    server = LocalS3Server(str(tmp_path), lifetime_s=0.5).start()
    server._thread.join(10)
    assert not server._thread.is_alive()


def test_a_forkserver_older_than_the_store_variables_is_not_used(monkeypatch):
    """Workers forked from fastprep's forkserver inherit the environment it started with: once
    the AWS_* variables differ from those, s3:// sources spawn their workers afresh (they would
    otherwise read another endpoint or no credentials)."""
    from fastprep.data import loader as L

    L._worker_context("spawn", True)  # starts (or reuses) the preloaded forkserver
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9/changed-after-the-server-started")
    assert not L._server_sees_store_env()
