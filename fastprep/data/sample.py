"""make_loader's default per-sample transform: a random crop decoded from the JPEG, then a
uint8 mask. Its own module so that the loader and the native batch pipeline (which runs it
as one call per batch) both import it without importing each other."""

from __future__ import annotations

import torch
from torchvision.transforms import v2

from ..transforms import DecodeRandomCrop, RandomMask
from .fallback import decoded_equivalent

__all__ = ["SampleTransform"]


class SampleTransform(torch.nn.Module):
    """Decode a random crop, then mask it in uint8 (the default per-sample pipeline)."""

    def __init__(self, crop_size, mask_ratio, decode_options=None):
        super().__init__()
        self.crop = DecodeRandomCrop(crop_size, pad_if_needed=True, **(decode_options or {}))
        self.mask = None if not mask_ratio else RandomMask(mask_ratio)

    def forward(self, data):
        img = self.crop(data)
        return img if self.mask is None else self.mask(img)

    def decoded_equivalent(self):
        """The same pipeline on a decoded RGB image (see :mod:`fastprep.data.fallback`)."""
        crop = decoded_equivalent(self.crop)
        return crop if self.mask is None else v2.Compose([crop, self.mask])
