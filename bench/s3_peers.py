"""The peers of ``bench_s3.py --peers``: LitData and WebDataset reading the same images from the
same server, each in its own layout, with torchvision's decode + ``RandomResizedCrop(224)`` +
horizontal flip in a ``DataLoader`` of 2 persistent worker processes (batch 64).

* LitData (``pip install litdata``): ``litdata.optimize`` writes the files (raw JPEG bytes and a
  label) into 16 MB chunks under ``WORK/litdata``; a ``StreamingDataset`` reads them from
  ``s3://data/litdata/`` (whole chunks downloaded to a local cache of 40 MB, smaller than the
  data, so that chunks are evicted once read and every epoch downloads) or from the local
  folder. Spawned persistent workers (fastprep's obstore runtime runs in the bench process;
  forked workers could not use LitData's obstore client). LitData's obstore client
  takes its client options from a constant, not from the environment: ``allow_http`` is added
  to it for the plain-http local server (the one change; its reading is untouched).
* WebDataset: the same shards as fastprep's (``WORK/shards``, 8 MB tars), each read whole and
  sequentially (``shardshuffle`` then a 1,000-sample shuffle buffer), from the server over
  plain HTTP (``pipe:curl``: the local server needs no signature) or from disk.

Mosaic streaming is not measured (not installed here).
"""

from __future__ import annotations

import glob
import os
import shutil

import litdata
import torch

__all__ = ["litdata_loader", "webdataset_loader"]


def _transform():
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])


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


_TRANSFORM: list = []


class Images(litdata.StreamingDataset):
    """Decoded, cropped, flipped samples (unpickled in each spawned worker)."""

    def __getitem__(self, index):
        if not _TRANSFORM:
            _allow_http()
            _TRANSFORM.append(_transform())
        sample = super().__getitem__(index)
        return _TRANSFORM[0](_decode(sample["image"])), sample["label"]


def litdata_loader(work: str, where: str, batch_size: int = 64):
    """LitData over ``WORK/litdata`` (``where``: ``"local"`` or ``"s3"``), 2 spawned workers
    (fastprep's obstore runtime runs in this process: forked workers could not use obstore)."""
    _allow_http()
    local = _prepare_litdata(work)
    cache = os.path.join(work, "litdata-cache")
    shutil.rmtree(cache, ignore_errors=True)
    # a cache smaller than the data set: chunks are evicted once read, so every epoch downloads
    options = {"cache_dir": cache, "max_cache_size": "40MB"} if where == "s3" else {}
    dataset = Images("s3://data/litdata/" if where == "s3" else local, shuffle=True, seed=0, **options)
    return litdata.StreamingDataLoader(dataset, batch_size=batch_size, num_workers=2, persistent_workers=True,
                                       multiprocessing_context="spawn")


def webdataset_loader(work: str, where: str, endpoint: str, batch_size: int = 64):
    """WebDataset over fastprep's shards ``WORK/shards`` (``where``: ``"local"`` or ``"s3"``)."""
    import webdataset as wds

    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(work, "shards", "*.tar")))
    if where == "s3":
        urls = [f"pipe:curl -s --fail {endpoint}/data/shards/{n}" for n in names]
    else:
        urls = [os.path.join(work, "shards", n) for n in names]
    transform = _transform()

    def sample(s):
        image = next(v for k, v in s.items() if k.endswith(("jpg", "jpeg")))
        return transform(_decode(image)), int(s["cls"])

    dataset = (wds.WebDataset(urls, shardshuffle=len(urls), seed=0, nodesplitter=wds.split_by_node,
                              workersplitter=wds.split_by_worker, empty_check=False)
               .shuffle(1000).map(sample))
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=2, persistent_workers=True)
