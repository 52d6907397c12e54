"""Train the toy CNN with DistributedDataParallel on fastprep batches, from a JPEG folder.

Run on every GPU of one machine (NCCL) or on the CPU (gloo, two processes)::

    torchrun --nproc_per_node=4 examples/ddp_train.py /path/to/train --epochs 2
    torchrun --nproc_per_node=2 examples/ddp_train.py /path/to/train --device cpu

Without ``torchrun`` it trains in one process (no process group), the reference the
distributed run can be compared against: with ``--seed`` every sample's crop and mask are
keyed by ``(seed, epoch, index)``, so ``--dump DIR`` writes per-sample digests
(``DIR/rank<r>.json``: ``{epoch: {index: sha256 of the delivered float sample}}``) that
are equal between a one-process run and a ``torchrun`` run, whatever the number of
ranks or workers.

Each rank reads its own shard (``make_loader(..., distributed=True)``: a
``DistributedSampler`` over the initialised process group, re-shuffled every epoch by the
loader) and the gradients are all-reduced by DDP.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from fastprep.bench.trainer import ToyNet
from fastprep.data import JpegFolder, make_loader


class EpochShuffle(torch.utils.data.Sampler):
    """One process: a fresh permutation per epoch, repeatable (``list(sampler)`` is the
    order the loader uses), like ``DistributedSampler`` with one replica."""

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:  # called by make_loader's loader each epoch
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="JPEG folder (class subfolders, or flat)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--workers", type=int, default=2,
                   help="make_loader's num_workers per rank: native decode threads (the threads engine, which the "
                        "default transform runs on); 0: decode in the training loop's thread")
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--mask-ratio", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=None,
                   help="key every sample's crop and mask by (seed, epoch, index) (default: a seed drawn per epoch)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dump", default=None, help="write per-sample digests to DIR/rank<r>.json")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    use_cuda = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    rank, world = 0, 1
    if distributed:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if use_cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    if not use_cuda:
        torch.set_num_threads(1)  # ranks and workers share the cores

    # torchrun: a DistributedSampler per rank; one process: a repeatable shuffle of the folder
    sampler = None if distributed else EpochShuffle(len(JpegFolder(args.data)), seed=args.seed or 0)
    loader = make_loader(args.data, batch_size=args.batch_size, num_workers=args.workers, crop_size=args.crop,
                         mask_ratio=args.mask_ratio, device=device, seed=args.seed, distributed=distributed,
                         sampler=sampler, on_error=args.on_error)
    sampler = loader.loader.sampler
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    model = ToyNet(args.crop).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    digests: dict[int, dict[int, str]] = {}

    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        order = list(sampler)  # this rank's indices for the epoch, in delivery order
        seen = 0
        start = time.perf_counter()
        print(f"rank {rank}: epoch {epoch} started", flush=True)
        for images, targets in loader:
            loss = loss_fn(model(images), targets.to(device, non_blocking=True))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if args.dump:
                cpu = images.float().cpu()
                for k in range(cpu.shape[0]):
                    h = hashlib.sha256(cpu[k].contiguous().numpy().tobytes()).hexdigest()
                    digests.setdefault(epoch, {})[order[seen + k]] = h
            seen += images.shape[0]
        rate = seen / (time.perf_counter() - start)
        skipped = torch.tensor([loader.loader.dataset.skipped], dtype=torch.int64, device=device)
        if distributed:
            dist.all_reduce(skipped)  # gloo: CPU tensor; NCCL: CUDA tensor
        print(f"rank {rank}: epoch {epoch} samples {seen} ({rate:.0f}/s) loss {loss.item():.3f} "
              f"skipped (all ranks, so far) {int(skipped)}", flush=True)

    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        with open(os.path.join(args.dump, f"rank{rank}.json"), "w") as f:
            json.dump({"rank": rank, "world": world, "skipped": loader.loader.dataset.skipped,
                       "digests": digests}, f)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
