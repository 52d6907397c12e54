"""fastprep: fast, exact CPU image preparation for PyTorch training.

Modules: :mod:`fastprep.io` (JPEG header/decode/ROI decode), :mod:`fastprep.functional`
(kernels on tensors), :mod:`fastprep.transforms` (torchvision-compatible transforms),
:mod:`fastprep.data` (datasets, collate, device prefetcher; imported on first use) and
``python -m fastprep.bench``.
"""

__version__ = "0.1.0"

from . import io  # noqa: F401  (loads torch.ops.fastprep.*)
from . import functional, transforms  # noqa: F401,E402


def __getattr__(name):
    if name in ("data", "bench"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
