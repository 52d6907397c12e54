"""Opening a file that must be a regular file without ever blocking on it.

Shared by the datasets (per-sample files) and the shard reader (shards, indexes,
manifests): a FIFO opened for reading blocks until a writer appears, and a device may act
on open, so the path is refused by ``stat`` before it is opened and again by ``fstat`` of
a non-blocking descriptor after (against a swap in between). The native readers
(``csrc/readers/read_files.cpp``, ``open_regular``) apply the same rule.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import torch


class NotRegularFileError(OSError):
    """The path names a FIFO, a directory, a device or a socket, not a regular file."""


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` that is not a regular file is, for messages."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path: str) -> int:
    """A read-only descriptor (non-blocking, close-on-exec) of the regular file ``path``.

    Raises:
        NotRegularFileError: ``path`` is not a regular file: ``"not a regular file (a FIFO)"``
            (or a directory, a device...).
        OSError: ``path`` cannot be opened (``FileNotFoundError``, ...).
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"not a regular file ({file_kind(mode)})")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(f"not a regular file ({file_kind(mode)})")
    return fd


def read_regular(path: str) -> bytes:
    """The bytes of the regular file ``path`` (refused as :func:`open_regular` says)."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()


def read_regular_file(path: str) -> torch.Tensor:
    """The bytes of a regular file as a uint8 1-D tensor.

    A FIFO, device, socket or directory is refused before it is opened (``stat``), and
    again after (``fstat`` on a non-blocking descriptor, against a swap in between), so a
    FIFO named ``x.jpg`` can never block a worker.

    Raises:
        OSError: the path cannot be read or is not a regular file.
    """
    with os.fdopen(open_regular(path), "rb") as f:
        return torch.from_numpy(np.fromfile(f, dtype=np.uint8))
