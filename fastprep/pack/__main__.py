"""``python -m fastprep.pack SRC DST``: see :mod:`fastprep.pack`."""

import argparse
import sys

from fastprep.pack import format_summary, pack_folder, pack_shards
from fastprep.pack.shards import DEFAULT_SHARD_SIZE, parse_size


def _interval(text):
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an int >= 0, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in [0, 65535], got {value}")
    return value


def _size(text):
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fastprep.pack",
        description="Mirror SRC into DST, transcoding every JPEG losslessly (identical pixels) so that "
                    "fastprep's ROI decode reads only the restart intervals a crop needs. Other files are "
                    "copied unchanged. Resumable: up-to-date outputs are skipped. With --format wds: the "
                    "images (as fastprep.data.JpegFolder lists them) go into WebDataset tar shards instead.")
    ap.add_argument("src", help="source folder")
    ap.add_argument("dst", help="destination folder (created if missing)")
    ap.add_argument("--format", choices=("folder", "wds"), default="folder",
                    help="folder: mirror SRC file by file (default); wds: WebDataset tar shards with a manifest "
                         "and member indexes (docs/pack.md)")
    ap.add_argument("--shard-size", type=_size, default=None,
                    help=f"with --format wds: bytes per shard, e.g. 500MB, 1GB, 2GiB (default: "
                         f"{DEFAULT_SHARD_SIZE // 10**9}GB)")
    ap.add_argument("-j", "--workers", type=int, default=None, help="processes (default: all CPUs)")
    ap.add_argument("--restart-interval", type=_interval, default="auto",
                    help="MCUs per restart interval, or 'auto' (default: intervals that tile the MCU rows, as wide "
                         "as keeps a 224 px window's decode near its minimum, wider where markers would cost more "
                         "than 3 %% of the file unless that passes 1.5x the minimum; docs/pack.md)")
    ap.add_argument("--no-optimize", action="store_true", help="keep standard Huffman tables (faster, larger)")
    ap.add_argument("--strip-metadata", action="store_true", help="drop APPn/COM markers (EXIF, ICC, XMP)")
    ap.add_argument("--on-error", choices=("copy", "skip"), default="copy",
                    help="JPEGs that cannot be transcoded: copy (or store in the shard) as-is (default), or leave out")
    ap.add_argument("--force", action="store_true", help="redo files (shards) whose output is up to date")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    if args.shard_size is not None and args.format != "wds":
        ap.error("--shard-size needs --format wds")
    options = {"workers": args.workers, "restart_interval": args.restart_interval, "optimize": not args.no_optimize,
               "keep_metadata": not args.strip_metadata, "on_error": args.on_error, "force": args.force,
               "progress": not args.quiet}
    try:
        if args.format == "wds":
            summary = pack_shards(args.src, args.dst, shard_size=args.shard_size or DEFAULT_SHARD_SIZE, **options)
        else:
            summary = pack_folder(args.src, args.dst, **options)
    except (ValueError, OSError) as e:
        print(f"fastprep.pack: error: {e}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 1 if summary.errors else 0


if __name__ == "__main__":
    sys.exit(main())
