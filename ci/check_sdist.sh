#!/usr/bin/env bash
# Packaging check: build an sdist, build a wheel from that sdist alone (against the
# installed torch, no build isolation: an isolated build would download a second,
# multi-GB torch), install the wheel into a fresh virtual environment and check, from a
# directory outside the source tree, that fastprep comes from the wheel and that its
# compiled ops load and decode a JPEG.
#
# The venv uses --system-site-packages to reuse the installed torch/torchvision/numpy/
# numba (the same ones the wheel was compiled against); fastprep itself is installed into
# the venv, whose site-packages come first on sys.path, and the check asserts that.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python -m build --sdist --no-isolation --outdir "$work/sdist" . >"$work/sdist.log" 2>&1 \
  || { tail -40 "$work/sdist.log"; exit 1; }
sdist="$(ls "$work"/sdist/fastprep-*.tar.gz)"
listing="$(tar tzf "$sdist")"
for f in $(git ls-files 'csrc/*' 'fastprep/_kernels/*.pyx' setup.py pyproject.toml MANIFEST.in README.md); do
  grep -qE "^fastprep-[^/]+/$f\$" <<<"$listing" || { echo "sdist lacks $f" >&2; exit 1; }
done

pip wheel --no-build-isolation --no-deps --wheel-dir "$work/wheel" "$sdist" >"$work/wheel.log" 2>&1 \
  || { tail -40 "$work/wheel.log"; exit 1; }
wheel="$(ls "$work"/wheel/fastprep-*.whl)"

python -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel"

mkdir "$work/elsewhere"
cd "$work/elsewhere"
"$work/venv/bin/python" -W error - "$work/venv" <<'PY'
import io, os, sys
import numpy as np
import torch
from PIL import Image
import fastprep, fastprep.io as fio
from fastprep._kernels import _color  # Cython kernels built into the wheel

venv = os.path.realpath(sys.argv[1])
for mod in (fastprep, _color):
    assert os.path.realpath(mod.__file__).startswith(venv + os.sep), f"{mod.__name__} from {mod.__file__}, not the wheel"
so = [f for f in os.listdir(os.path.dirname(fastprep.__file__)) if f.startswith("_C") and f.endswith(".so")]
assert so, "the wheel has no compiled op"

rng = np.random.default_rng(0)
rgb = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
buf = io.BytesIO()
Image.fromarray(rgb).save(buf, "JPEG", quality=95, subsampling="4:4:4")
data = buf.getvalue()
full = fio.decode_jpeg(data)
ref = torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
assert full.shape == (3, 48, 64) and (full.int() - ref.int()).abs().max() <= 2, "decode disagrees with Pillow"
assert torch.equal(fio.decode_jpeg_roi(data, 5, 9, 20, 30), full[:, 5:25, 9:39])
print(f"packaging check: fastprep {fastprep.__file__} (ops {so[0]}), torch {torch.__version__}: OK")
PY
