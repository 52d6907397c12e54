"""The peers of ``bench_s3.py --peers``: LitData, Mosaic streaming and WebDataset reading the
same images from the same server, each in its own layout, with torchvision's decode +
``RandomResizedCrop(224)`` + horizontal flip in a ``DataLoader`` of 2 worker processes (batch
64). Each peer runs in a process of its own (``python s3_peers.py PEER WHERE ...``, started by
``bench_s3.py`` once per run, interleaved with fastprep's rows): fastprep's obstore runtime is
not in it, so its workers can fork.

* LitData (``pip install litdata``): ``litdata.optimize`` writes the files (raw JPEG bytes and a
  label) into 16 MB chunks under ``WORK/litdata``; a ``StreamingDataset`` reads them from
  ``s3://data/litdata/`` (whole chunks downloaded to a local cache, emptied before each
  epoch so that every epoch downloads) or from the local
  folder. LitData's obstore client
  takes its client options from a constant, not from the environment: ``allow_http`` is added
  to it for the plain-http local server (the one change; its reading is untouched).
* Mosaic streaming (tested with mosaicml-streaming 0.13.0; ``pip install mosaicml-streaming``,
  or where its pins would replace this environment's numpy (< 2.2) or transformers (< 5):
  ``pip install --no-deps mosaicml-streaming`` and then what it imports: ``pip install boto3
  brotli catalogue python-snappy "xxhash<4" zstd transformers``): ``streaming.MDSWriter``
  writes the files (raw JPEG bytes and an int label) into shards of at most 16 MiB
  (``size_limit=16 << 20``, as LitData's 16 MB chunks) under ``WORK/mosaic``; a
  ``StreamingDataset`` reads them from ``s3://data/mosaic/`` (boto3, the endpoint from
  ``S3_ENDPOINT_URL``; each worker downloads whole shards, one ``HEAD`` and one ``GET`` each,
  into a local cache and reads its samples from them at random; every shard is evicted before
  each epoch so that every epoch downloads) or from the local folder (``remote=None``).
  Decode, crop and flip run in the workers (their collate function). The one change: the S3
  client that fetched ``index.json`` in the parent is dropped before the workers fork (see
  ``_EvictEachEpoch``). Stale shared memory of an earlier, killed run is cleaned first
  (``clean_stale_shared_memory``).
* WebDataset: the same shards as fastprep's (``WORK/shards``, 8 MB tars), each read whole and
  sequentially (``shardshuffle`` then a 1,000-sample shuffle buffer), from the server over
  plain HTTP (``pipe:curl``: the local server needs no signature) or from disk.

A peer that is not installed, or fails, fails alone: ``bench_s3.py`` prints its error in its rows.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import time

import torch
from torchvision.transforms import v2

try:
    import litdata
except ImportError:  # the LitData peer fails alone (litdata_loader), the others still run
    litdata = None

__all__ = ["litdata_loader", "main", "mosaic_loader", "webdataset_loader"]


_TRANSFORM = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])


def _decode(data) -> torch.Tensor:
    import torchvision

    return torchvision.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def _read_file(path: str) -> dict:
    with open(path, "rb") as f:
        return {"image": f.read(), "label": 0}


def _prepare_litdata(work: str) -> str:
    out = os.path.join(work, "litdata")
    if not os.path.isdir(out):
        files = sorted(glob.glob(os.path.join(work, "folder", "*")))
        litdata.optimize(fn=_read_file, inputs=files, output_dir=out + ".tmp", chunk_bytes="16MB", num_workers=1)
        os.rename(out + ".tmp", out)
    return out


def _allow_http() -> None:
    import litdata.streaming.downloader as downloader

    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}


if litdata is not None:
    class Images(litdata.StreamingDataset):
        """Decoded, cropped, flipped samples."""

        def __getitem__(self, index):
            sample = super().__getitem__(index)
            return _TRANSFORM(_decode(sample["image"])), sample["label"]


class _EmptyCacheEachEpoch:
    """Iterating empties LitData's download cache first: every epoch downloads its chunks."""

    def __init__(self, loader, cache: str):
        self.loader, self.cache = loader, cache

    def __iter__(self):
        shutil.rmtree(self.cache, ignore_errors=True)
        return iter(self.loader)


def litdata_loader(work: str, where: str, batch_size: int = 64):
    """LitData over ``WORK/litdata`` (``where``: ``"local"`` or ``"s3"``)."""
    if litdata is None:
        raise ImportError("the LitData peer needs litdata: pip install litdata")
    _allow_http()
    local = _prepare_litdata(work)
    if where == "local":
        return litdata.StreamingDataLoader(Images(local, shuffle=True, seed=0), batch_size=batch_size, num_workers=2)
    cache = os.path.join(work, "litdata-cache")
    dataset = Images("s3://data/litdata/", shuffle=True, seed=0, cache_dir=cache)
    return _EmptyCacheEachEpoch(litdata.StreamingDataLoader(dataset, batch_size=batch_size, num_workers=2), cache)


def _prepare_mosaic(work: str) -> str:
    from streaming import MDSWriter

    out = os.path.join(work, "mosaic")
    if not os.path.isdir(out):
        shutil.rmtree(out + ".tmp", ignore_errors=True)
        with MDSWriter(out=out + ".tmp", columns={"image": "bytes", "label": "int"}, size_limit=16 << 20) as writer:
            for path in sorted(glob.glob(os.path.join(work, "folder", "*"))):
                writer.write(_read_file(path))
        os.rename(out + ".tmp", out)
    return out


def _mosaic_batch(samples: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Collate in the worker: decode, crop and flip each sample, as the other peers do."""
    images = [_TRANSFORM(_decode(s["image"])) for s in samples]
    return torch.stack(images), torch.tensor([s["label"] for s in samples])


class _EvictEachEpoch:
    """Iterating evicts every shard of Mosaic's download cache first: every epoch downloads. It
    also drops the parent's S3 client (the one that fetched ``index.json``) before the workers
    fork: forked workers would share its kept-alive connection, and their responses then
    interleave into corrupt shards (seen on the local plain-http server)."""

    def __init__(self, loader, dataset):
        self.loader, self.dataset = loader, dataset

    def __iter__(self):
        for stream in self.dataset.streams:
            stream._downloader.clean_up()  # each worker then makes its own client
        for shard in range(self.dataset.num_shards):
            self.dataset.evict_shard(shard)
        return iter(self.loader)


def mosaic_loader(work: str, where: str, batch_size: int = 64):
    """Mosaic streaming over ``WORK/mosaic`` (``where``: ``"local"`` or ``"s3"``)."""
    try:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
    except ImportError as e:
        raise ImportError(f"the Mosaic peer needs mosaicml-streaming (see bench/s3_peers.py): {e}") from e

    clean_stale_shared_memory()  # a killed earlier run's segments would block this one's
    local = _prepare_mosaic(work)
    if where == "local":
        dataset = StreamingDataset(local=local, shuffle=True, shuffle_seed=0, batch_size=batch_size)
    else:
        cache = os.path.join(work, "mosaic-cache")
        shutil.rmtree(cache, ignore_errors=True)
        dataset = StreamingDataset(remote="s3://data/mosaic/", local=cache, shuffle=True, shuffle_seed=0,
                                   batch_size=batch_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=2, collate_fn=_mosaic_batch)
    return loader if where == "local" else _EvictEachEpoch(loader, dataset)


def webdataset_loader(work: str, where: str, endpoint: str, batch_size: int = 64):
    """WebDataset over fastprep's shards ``WORK/shards`` (``where``: ``"local"`` or ``"s3"``)."""
    import webdataset as wds

    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(work, "shards", "*.tar")))
    if where == "s3":
        urls = [f"pipe:curl -s --fail {endpoint}/data/shards/{n}" for n in names]
    else:
        urls = [os.path.join(work, "shards", n) for n in names]
    def sample(s):
        image = next(v for k, v in s.items() if k.endswith(("jpg", "jpeg")))
        return _TRANSFORM(_decode(image)), int(s["cls"])

    dataset = (wds.WebDataset(urls, shardshuffle=len(urls), seed=0, nodesplitter=wds.split_by_node,
                              workersplitter=wds.split_by_worker, empty_check=False)
               .shuffle(1000).map(sample))
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=2)


def _epoch(loader) -> tuple[float, int, float]:
    n = 0
    cpu = _cpu_s()
    start = time.perf_counter()
    for _, y in loader:
        n += len(y)
    return time.perf_counter() - start, n, _cpu_s() - cpu


def _cpu_s() -> float:
    """CPU seconds of this process and of its worker processes that have ended (each epoch's)."""
    r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def main(argv=None) -> None:
    """One peer in its own process (no obstore runtime of fastprep's in it, so its workers
    may fork): a warm-up epoch, then ``--epochs`` measured; prints JSON
    ``{"rates": [...], "cpu_ms": [...]}`` (samples/s and CPU ms per sample, per epoch)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("peer", choices=("litdata", "mosaic", "webdataset"))
    parser.add_argument("where", choices=("local", "s3"))
    parser.add_argument("--work", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    os.environ.update(AWS_ENDPOINT_URL=args.endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1", S3_ENDPOINT_URL=args.endpoint)
    if args.peer == "litdata":
        loader = litdata_loader(args.work, args.where, args.batch_size)
    elif args.peer == "mosaic":
        loader = mosaic_loader(args.work, args.where, args.batch_size)
    else:
        loader = webdataset_loader(args.work, args.where, args.endpoint, args.batch_size)
    _epoch(loader)
    runs = [_epoch(loader) for _ in range(args.epochs)]
    print(json.dumps({"rates": [n / s for s, n, _ in runs], "cpu_ms": [1000 * c / n for _, n, c in runs]}))


if __name__ == "__main__":
    main()
