"""Run by ci/check_sdist.sh with the venv's python, from outside the source tree: fastprep
must be the installed wheel (not the checkout, not the shared editable install) and its
compiled op must load and decode.

Usage: python check_installed.py VENV_DIR
"""

import io
import os
import sys

import numpy as np
import torch
from PIL import Image

import fastprep
import fastprep.io as fio
from fastprep._kernels import _color  # Cython kernels built into the wheel

venv = os.path.realpath(sys.argv[1])
for mod in (fastprep, _color):
    where = os.path.realpath(mod.__file__)
    assert where.startswith(venv + os.sep), f"{mod.__name__} from {mod.__file__}, not the wheel"
so = [f for f in os.listdir(os.path.dirname(fastprep.__file__)) if f.startswith("_C") and f.endswith(".so")]
assert so, "the wheel has no compiled op"

rng = np.random.default_rng(0)
rgb = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
buf = io.BytesIO()
Image.fromarray(rgb).save(buf, "JPEG", quality=95, subsampling="4:4:4")
data = buf.getvalue()
full = fio.decode_jpeg(data)
ref = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
assert full.shape == (3, 48, 64) and (full.int() - ref.int()).abs().max() <= 2, "decode disagrees with Pillow"
assert torch.equal(fio.decode_jpeg_roi(data, 5, 9, 20, 30), full[:, 5:25, 9:39])
print(f"packaging check: fastprep {fastprep.__file__} (ops {so[0]}), torch {torch.__version__}: OK")
