"""fastprep: fast, exact CPU image preparation for PyTorch training."""

__version__ = "0.1.0"

from . import io  # noqa: F401  (loads torch.ops.fastprep.*)
