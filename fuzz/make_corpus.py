"""Write the seed corpus for the fuzz targets in this folder.

Every seed is ``PARAM_BYTES`` parameter bytes (read by the targets with
``atheris.FuzzedDataProvider``: mode, strict, window, crop size...) followed by one JPEG.
The JPEGs are small (fuzzing speed) and cover the encodings the decoder handles: baseline
4:4:4/4:2:2/4:2:0/4:4:0/4:1:1, progressive, restart markers, optimized Huffman tables,
arithmetic coding (cjpeg from libjpeg-turbo-progs), grayscale, CMYK, odd sizes,
progressive files whose last refinement scans are missing or without successive
approximation, restart markers every 1 to 8
MCUs in every sampling, and files packed by ``fastprep.io.transcode_jpeg`` (what
``python -m fastprep.pack`` writes).

Usage: ``python fuzz/make_corpus.py OUT_DIR`` (creates OUT_DIR). Encodings that need
cjpeg are skipped with a note when it is not installed (``apt-get install
libjpeg-turbo-progs``), unless ``--require-cjpeg`` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys

import numpy as np

from _jpegs import cjpeg, cmyk_jpeg, pil_jpeg

#: Bytes in front of each seed's JPEG that the targets consume as parameters.
PARAM_BYTES = 16

# (height, width): tiny, odd and MCU-straddling sizes, and one a few MCUs on each side.
SIZES = [(1, 1), (7, 13), (17, 33), (33, 9), (48, 64)]

# Progressive scan scripts that stop before the last refinement scans (libjpeg decodes
# them without a warning, smoothing blocks from their neighbours).
_INCOMPLETE_SCANS_COLOR = "0 1 2: 0 0 0 1;\n0: 1 5 0 2;\n2: 1 63 0 1;\n1: 1 63 0 1;\n0: 6 63 0 2;\n"
_INCOMPLETE_SCANS_GRAY = "0: 0 0 0 1;\n0: 1 5 0 2;\n0: 6 63 0 2;\n"
# Complete progressive scripts without successive approximation: every scan sends all its
# coefficients' bits, so a scan copied again is one libjpeg reads without a warning and the
# decoder (and the transcoder) must refuse as a repeat.
_NO_SA_SCANS_COLOR = "0 1 2: 0 0 0 0;\n0: 1 63 0 0;\n1: 1 63 0 0;\n2: 1 63 0 0;\n"
_NO_SA_SCANS_GRAY = "0: 0 0 0 0;\n0: 1 9 0 0;\n0: 10 63 0 0;\n"


def synthetic_rgb(height: int, width: int, seed: int) -> np.ndarray:
    """A uint8 ``[H, W, 3]`` image with gradients, edges and noise (exercises all DCT bands)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x * 255 / max(width, 1), y * 255 / max(height, 1),
                     127 + 120 * np.sin((x + y) / 3.0)], axis=-1)
    base[(x // 5 + y // 7) % 2 == 1] *= 0.4  # hard edges
    base += rng.normal(0, 18, base.shape)
    base[..., 0][rng.random((height, width)) < 0.02] = 255  # saturated specks
    return np.clip(base, 0, 255).astype(np.uint8)


PIL_ENCODINGS = {
    "444": lambda a: pil_jpeg(a, quality=90, subsampling="4:4:4"),
    "422": lambda a: pil_jpeg(a, quality=75, subsampling="4:2:2"),
    "420": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:0"),
    "420-q20-optimize": lambda a: pil_jpeg(a, quality=20, subsampling="4:2:0", optimize=True),
    "420-progressive": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:0", progressive=True),
    "422-progressive": lambda a: pil_jpeg(a, quality=85, subsampling="4:2:2", progressive=True),
    "444-progressive": lambda a: pil_jpeg(a, quality=95, subsampling="4:4:4", progressive=True),
    "420-restart-blocks": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:0", restart_marker_blocks=1),
    "422-restart-rows": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:2", restart_marker_rows=1),
    "gray": lambda a: pil_jpeg(np.ascontiguousarray(a[..., 1]), quality=90),
    "gray-progressive": lambda a: pil_jpeg(np.ascontiguousarray(a[..., 0]), quality=90, progressive=True),
    "cmyk": cmyk_jpeg,
}

CJPEG_ENCODINGS = {
    "440": lambda a: cjpeg(a, "-quality", "90", "-sample", "1x2,1x1,1x1"),
    "411": lambda a: cjpeg(a, "-quality", "90", "-sample", "4x1,1x1,1x1"),
    "420-arithmetic": lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-sample", "2x2,1x1,1x1"),
    "420-arith-restart": lambda a: cjpeg(a, "-arithmetic", "-restart", "1B"),
    "420-arith-progressive": lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-progressive"),
    "gray-arith-progressive": lambda a: cjpeg(a, "-arithmetic", "-progressive", gray=True),
    "444-rgb": lambda a: cjpeg(a, "-rgb", "-quality", "90"),
    "420-incomplete-progressive": lambda a: cjpeg(a, "-quality", "90", "-sample", "2x2,1x1,1x1",
                                                  scans=_INCOMPLETE_SCANS_COLOR),
    "420-arith-incomplete-progressive": lambda a: cjpeg(a, "-arithmetic", "-sample", "2x2,1x1,1x1",
                                                        scans=_INCOMPLETE_SCANS_COLOR),
    "gray-arith-incomplete-progressive": lambda a: cjpeg(a, "-arithmetic", gray=True,
                                                         scans=_INCOMPLETE_SCANS_GRAY),
    "420-progressive-no-sa": lambda a: cjpeg(a, "-quality", "90", "-sample", "2x2,1x1,1x1", scans=_NO_SA_SCANS_COLOR),
    "gray-progressive-no-sa": lambda a: cjpeg(a, "-quality", "90", gray=True, scans=_NO_SA_SCANS_GRAY),
}


# Samplings (cjpeg -sample; None: grayscale) of the restart-marked and packed seeds: the
# usual ones, 4:1:0, and two that no subsampling name describes.
RESTART_SAMPLINGS = {
    "444": "1x1,1x1,1x1", "422": "2x1,1x1,1x1", "420": "2x2,1x1,1x1", "440": "1x2,1x1,1x1",
    "411": "4x1,1x1,1x1", "410": "4x2,1x1,1x1", "2x2-2x1-1x1": "2x2,2x1,1x1", "1x4": "1x4,1x1,1x1",
    "gray": None,
}
RESTART_INTERVALS = range(1, 9)  # MCUs
# Sizes of the restart-marked seeds, taken in turn: a few MCUs each way, odd edges.
RESTART_SIZES = [(17, 9), (33, 47), (24, 40), (9, 70), (40, 33)]
PACKED_SIZES = [(17, 33), (48, 64)]


def _sampled(rgb, sampling, *args) -> bytes:
    if sampling is None:
        return cjpeg(rgb, "-quality", "85", *args, gray=True)
    return cjpeg(rgb, "-quality", "85", "-sample", sampling, *args)


def restart_seeds():
    """``(name, jpeg)``: cjpeg files with a restart marker every 1..8 MCUs (and one every MCU
    row) in every sampling of :data:`RESTART_SAMPLINGS`."""
    for k, (name, sampling) in enumerate(RESTART_SAMPLINGS.items()):
        for n in RESTART_INTERVALS:
            height, width = RESTART_SIZES[(k + n) % len(RESTART_SIZES)]
            rgb = synthetic_rgb(height, width, seed=100 + 10 * k + n)
            yield f"{name}-restart{n}-{height}x{width}", _sampled(rgb, sampling, "-restart", f"{n}B")
        yield f"{name}-restart-row-33x47", _sampled(synthetic_rgb(33, 47, seed=k), sampling, "-restart", "1")


def packed_seeds():
    """``(name, jpeg)``: files as ``fastprep.pack`` writes them (automatic restart interval),
    from sequential files in every sampling and from progressive and arithmetic files."""
    from fastprep.io import transcode_jpeg

    for k, (name, sampling) in enumerate(RESTART_SAMPLINGS.items()):
        for height, width in PACKED_SIZES:
            rgb = synthetic_rgb(height, width, seed=200 + k)
            yield f"{name}-packed-{height}x{width}", transcode_jpeg(_sampled(rgb, sampling))
    rgb = synthetic_rgb(48, 64, seed=300)
    yield "420-progressive-packed-48x64", transcode_jpeg(PIL_ENCODINGS["420-progressive"](rgb))
    yield "420-arith-progressive-packed-48x64", transcode_jpeg(CJPEG_ENCODINGS["420-arith-progressive"](rgb))
    yield "422-packed-interval3-48x64", transcode_jpeg(PIL_ENCODINGS["422"](rgb), restart_interval=3)


def seeds(require_cjpeg: bool = False):
    """Yield ``(name, seed_bytes)`` for every encoding and size (deterministic)."""
    encodings = dict(PIL_ENCODINGS)
    if shutil.which("cjpeg"):
        encodings.update(CJPEG_ENCODINGS)
    elif require_cjpeg:
        raise SystemExit("cjpeg not found (apt-get install libjpeg-turbo-progs)")
    else:
        print("make_corpus: cjpeg not found, skipping arithmetic/4:4:0/4:1:1/incomplete-progressive/"
              "restart-marked/packed seeds",
              file=sys.stderr)
    rng = np.random.default_rng(20261201)
    for i, (height, width) in enumerate(SIZES):
        rgb = synthetic_rgb(height, width, seed=i)
        for name, encode in encodings.items():
            jpeg = encode(rgb)
            params = rng.integers(0, 256, PARAM_BYTES, dtype=np.uint8).tobytes()
            yield f"{name}-{height}x{width}", params + jpeg
    if shutil.which("cjpeg"):
        for name, jpeg in (*restart_seeds(), *packed_seeds()):
            params = rng.integers(0, 256, PARAM_BYTES, dtype=np.uint8).tobytes()
            yield name, params + jpeg


def write_corpus(out_dir: str, require_cjpeg: bool = False) -> int:
    """Write the seeds into ``out_dir`` (file names are content hashes); return the count."""
    os.makedirs(out_dir, exist_ok=True)
    n = 0
    for name, data in seeds(require_cjpeg):
        digest = hashlib.sha1(data).hexdigest()[:12]
        with open(os.path.join(out_dir, f"{name}-{digest}"), "wb") as f:
            f.write(data)
        n += 1
    return n


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--require-cjpeg", action="store_true", help="fail if cjpeg is missing")
    args = parser.parse_args(argv)
    n = write_corpus(args.out_dir, args.require_cjpeg)
    print(f"make_corpus: wrote {n} seeds to {args.out_dir}")


if __name__ == "__main__":
    main()
