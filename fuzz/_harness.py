"""Shared pieces of the fuzz targets: input layout, the exceptions that are not findings,
and the ``main`` that hands a target to atheris (libFuzzer).

Input layout: the first :data:`PARAM_BYTES` bytes feed an ``atheris.FuzzedDataProvider``
that picks the call's parameters (mode, strict, window, crop...); the rest is the encoded
JPEG. Seeds written by ``make_corpus.py`` follow it.

What is a finding: any exception other than ``fastprep.io.DecodeError`` and the
documented ``ValueError``/``TypeError`` for bad arguments, any warning other than
``fastprep.io.DecodeWarning`` (warnings are turned into errors), an oracle mismatch
(raised as :class:`Finding`), a crash, a sanitizer report, a hang past libFuzzer's
``-timeout`` or memory past ``-rss_limit_mb``.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import warnings
import zlib

import atheris

with atheris.instrument_imports(include=["fastprep"]):
    import fastprep.io as fio
    import fastprep.transforms  # noqa: F401  (instrumented here; used by fuzz_transforms, fuzz_pack_recipes)

PARAM_BYTES = 16

#: Pixel limit the targets decode under: big enough for every seed and for mutated headers
#: a few times larger, small enough that a header declaring 65500x65500 costs no time.
#: Images above it are refused (a DecodeError), which is the ``max_pixels`` path itself.
MAX_PIXELS = 1 << 22

MODES = list(fio.ImageReadMode)


class Finding(AssertionError):
    """An oracle check failed: the decoder returned a wrong result without raising."""


def seq(rng, values):
    """``values`` as a list or a tuple (torchvision takes both: the fuzz targets draw either)."""
    return list(values) if rng.random() < 0.5 else tuple(values)


def sorted_pair(rng, lo, hi, low_bound=0.0):
    """Two draws in ``[lo, hi)``, sorted, each at least ``low_bound``, as a list or a tuple."""
    a, b = sorted((rng.uniform(lo, hi), rng.uniform(lo, hi)))
    return seq(rng, (max(a, low_bound), max(b, low_bound)))


def split(data: bytes):
    """``(FuzzedDataProvider over the parameter bytes, JPEG bytes)``."""
    return atheris.FuzzedDataProvider(data[:PARAM_BYTES]), data[PARAM_BYTES:]


def channels(mode, info) -> int:
    """Channels a decode in ``mode`` returns for a file with header ``info``."""
    if mode == fio.ImageReadMode.GRAY:
        return 1
    if mode in (fio.ImageReadMode.RGB, fio.ImageReadMode.YCbCr):
        return 3
    return {1: 1, 3: 3, 4: 4}.get(info.num_components, info.num_components)


# Coverage proxies. The C++ op and libjpeg-turbo carry no libFuzzer counters, so without
# help libFuzzer would keep only inputs that reach new *Python* lines and drop most seeds.
# Branching, in instrumented Python, on the header's facts and on which libjpeg message an
# input produced makes "a new kind of file" and "a new decoder error or warning" new
# coverage, so such inputs stay in the corpus and get mutated further.
_BUCKETS = 64


def _make_bucket():
    src = "def bucket(h):\n" + "".join(f"    if h == {k}:\n        return\n" for k in range(_BUCKETS))
    namespace = {}
    exec(compile(src, "<fuzz-buckets>", "exec"), namespace)  # 64 distinct branch sites
    return atheris.instrument_func(namespace["bucket"])


_bucket = _make_bucket()


def _note_message(kind: int, message: str) -> None:
    template = re.sub(r"\d+", "#", message)  # "Corrupt data: 12 extraneous bytes" -> one class
    _bucket((zlib.crc32(template.encode()) + kind) % _BUCKETS)


@atheris.instrument_func
def _note_info(info) -> None:
    if info.progressive:
        _bucket(0 if info.arithmetic else 1)
    elif info.arithmetic:
        _bucket(2)
    for name in ("GRAY", "YCbCr", "RGB", "CMYK", "YCCK", "UNKNOWN"):
        if info.color_space == name:
            break
    for name in ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "4:1:0", "other", None):
        if info.subsampling == name:
            break
    if info.height % 16 and info.width % 16:
        _bucket(3)


def quiet(fn, *args, **kwargs):
    """Call ``fn``; return ``(result or None on DecodeError, saw_decode_warning)``.

    DecodeWarning is expected for corrupt data; every other warning is an error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(*args, **kwargs)
        except fio.DecodeError as e:
            out = None
            _note_message(0, str(e))
    saw = False
    for w in caught:
        if not issubclass(w.category, fio.DecodeWarning):
            raise Finding(f"unexpected warning {w.category.__name__}: {w.message}")
        saw = True
        _note_message(1, str(w.message))
    if isinstance(out, fio.JpegInfo):
        _note_info(out)
    return out, saw


def _artifact_prefix(argv) -> str:
    for arg in argv:
        if arg.startswith("-artifact_prefix="):
            return arg.split("=", 1)[1]
    return "./"


def main(test_one_input):
    """Run ``test_one_input`` under atheris with ``sys.argv`` as libFuzzer arguments, or,
    when the first argument is ``--blind``, under the coverage-blind mutation runner
    (``fuzz/_blind.py``: ``--blind SECONDS CORPUS... [options]``).

    An input that raises is saved as ``<artifact_prefix>crash-<sha1>`` before the
    exception reaches atheris: atheris's bundled libFuzzer writes no artifact for a Python
    exception unless a sanitizer runtime is loaded."""
    warnings.simplefilter("error")
    warnings.simplefilter("always", fio.DecodeWarning)
    if len(sys.argv) > 1 and sys.argv[1] == "--blind":
        import _blind

        sys.exit(_blind.main(test_one_input, sys.argv[2:]))
    prefix = _artifact_prefix(sys.argv)

    def run(data: bytes) -> None:
        try:
            test_one_input(data)
        except BaseException:
            path = f"{prefix}crash-{hashlib.sha1(data).hexdigest()}"
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.write(data)
                print(f"fuzz harness: input that raised written to {path}", file=sys.stderr, flush=True)
            raise

    atheris.Setup(sys.argv, run)
    atheris.Fuzz()
