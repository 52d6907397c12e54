"""Loads the compiled extension (``torch.ops.fastprep.*``) and registers fake kernels so
``torch.compile`` can trace functions that call the ops."""

import atexit
from typing import NamedTuple

import torch

from . import _C  # noqa: F401  (TORCH_LIBRARY registration happens at import)
from ._kernels import isa as _isa  # noqa: F401  (applies FASTPREP_ISA to the compiled kernels)

MODE_UNCHANGED, MODE_GRAY, MODE_RGB, MODE_YCBCR = 0, 1, 3, 4

libjpeg_turbo_version = _C.libjpeg_turbo_version

# At exit, an op returning in a daemon thread (the prefetcher, the object-store read-ahead) would
# meet CPython's end of that thread inside torch's GIL guard and abort the process: from here
# on such ops park their threads instead (csrc/exit_gate.h).
atexit.register(_C.close_exit_gate)


class JpegHeader(NamedTuple):
    """The fields of ``torch.ops.fastprep.jpeg_info``'s int64 result, in its order (they
    mirror csrc/jpeg/jpeg_info.h; ``fastprep._C.jpeg_info_fields`` names that header's list).

    ``color_space`` is libjpeg's ``J_COLOR_SPACE``; ``progressive``, ``arithmetic``,
    ``adobe`` (an Adobe APP14 marker) and ``restart_roi`` are 1/0; ``h_sampN``/``v_sampN``
    are component N's sampling factors (0 where absent); ``restart_interval`` is in MCUs
    (0: none).
    """

    height: int
    width: int
    components: int
    color_space: int
    progressive: int
    arithmetic: int
    adobe: int
    h_samp0: int
    v_samp0: int
    h_samp1: int
    v_samp1: int
    h_samp2: int
    v_samp2: int
    h_samp3: int
    v_samp3: int
    restart_interval: int
    restart_roi: int

    def sampling_factors(self) -> tuple[tuple[int, int], ...]:
        """``(h, v)`` of each component the file has (at most 4)."""
        hv = self[JpegHeader._fields.index("h_samp0"):JpegHeader._fields.index("restart_interval")]
        return tuple((hv[2 * c], hv[2 * c + 1]) for c in range(min(self.components, 4)))


def _channels_or_dynamic(mode):
    if mode == MODE_GRAY:
        return 1
    if mode in (MODE_RGB, MODE_YCBCR):
        return 3
    return torch.library.get_ctx().new_dynamic_size(min=1, max=4)


def _image(data, channels, height, width, channels_last):
    if channels_last:  # [C, H, W] view of [H, W, C] memory, as the CPU kernels return
        return data.new_empty((height, width, channels)).permute(2, 0, 1)
    return data.new_empty((channels, height, width))


@torch.library.register_fake("fastprep::decode_jpeg_roi")
def _decode_jpeg_roi_fake(data, top, left, height, width, mode, max_pixels, strict, scale_num=8, max_scans=0,
                          channels_last=False):
    torch._check(height > 0)
    torch._check(width > 0)
    return _image(data, _channels_or_dynamic(mode), height, width, channels_last)


@torch.library.register_fake("fastprep::jpeg_info")
def _jpeg_info_fake(data):
    return data.new_empty((len(JpegHeader._fields),), dtype=torch.int64)


@torch.library.register_fake("fastprep::decode_jpeg")
def _decode_jpeg_fake(data, mode, max_pixels, strict, scale_num=8, max_scans=0, channels_last=False):
    ctx = torch.library.get_ctx()
    channels = _channels_or_dynamic(mode)
    return _image(data, channels, ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels_last)


@torch.library.register_fake("fastprep::transcode_jpeg")
def _transcode_jpeg_fake(data, restart_interval, optimize, keep_metadata, max_pixels, interval_index=True):
    return data.new_empty((torch.library.get_ctx().new_dynamic_size(),))


@torch.library.register_fake("fastprep::resize_aa")
def _resize_aa_fake(image, full_out, out_window, full_in, in_origin, scale, antialias, hflip, filter=0):
    torch._check(image.dtype == torch.uint8)
    torch._check(image.dim() == 3)
    torch._check(len(out_window) == 4)
    return image.new_empty((out_window[2], out_window[3], image.shape[0])).permute(2, 0, 1)


@torch.library.register_fake("fastprep::pil_resize")
def _pil_resize_fake(image, full_out, out_window, full_in, in_origin, filter, hflip):
    torch._check(image.dtype == torch.uint8)
    torch._check(image.dim() == 3)
    torch._check(len(out_window) == 4)
    return image.new_empty((out_window[2], out_window[3], image.shape[0])).permute(2, 0, 1)


@torch.library.register_fake("fastprep::decode_batch")
def _decode_batch_fake(data, plans, steps, extras, fills, outs, decode_channels, decode_mode, max_pixels, strict,
                       max_scans, converts, num_threads):
    torch._check(len(outs) >= 1 and outs[0].dim() == 4)
    status = plans.new_empty((outs[0].shape[0], 3), dtype=torch.int64)
    messages = plans.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.uint8)
    return status, messages


@torch.library.register_fake("fastprep::apply_pixel_kernel")
def _apply_pixel_kernel_fake(image, name, ints, floats, variant=0, extras=None, extra=-1):
    torch._check(image.dim() == 3)
    # a kernel may reduce the channels (rgb_to_grayscale to 1)
    channels = torch.library.get_ctx().new_dynamic_size(min=1, max=image.shape[0])
    return image.new_empty((channels, image.shape[1], image.shape[2]))
