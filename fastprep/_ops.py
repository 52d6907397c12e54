"""Loads the compiled extension (``torch.ops.fastprep.*``) and registers fake kernels so
``torch.compile`` can trace functions that call the ops."""

import torch

from . import _C  # noqa: F401  (TORCH_LIBRARY registration happens at import)

MODE_UNCHANGED, MODE_GRAY, MODE_RGB, MODE_YCBCR = 0, 1, 3, 4

libjpeg_turbo_version = _C.libjpeg_turbo_version


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
    return data.new_empty((17,), dtype=torch.int64)


@torch.library.register_fake("fastprep::decode_jpeg")
def _decode_jpeg_fake(data, mode, max_pixels, strict, scale_num=8, max_scans=0, channels_last=False):
    ctx = torch.library.get_ctx()
    channels = _channels_or_dynamic(mode)
    return _image(data, channels, ctx.new_dynamic_size(), ctx.new_dynamic_size(), channels_last)


@torch.library.register_fake("fastprep::transcode_jpeg")
def _transcode_jpeg_fake(data, restart_interval, optimize, keep_metadata, max_pixels, interval_index=True):
    return data.new_empty((torch.library.get_ctx().new_dynamic_size(),))


@torch.library.register_fake("fastprep::resize_aa")
def _resize_aa_fake(image, full_out_h, full_out_w, out_top, out_left, out_h, out_w, full_in_h, full_in_w,
                    in_top, in_left, scale_h, scale_w, antialias, hflip):
    torch._check(image.dtype == torch.uint8)
    torch._check(image.dim() == 3)
    return image.new_empty((out_h, out_w, image.shape[0])).permute(2, 0, 1)


@torch.library.register_fake("fastprep::decode_batch")
def _decode_batch_fake(data, plans, scales, fills, out, decode_mode, max_pixels, strict, max_scans, convert, params,
                       num_threads):
    torch._check(out.dim() == 4)
    status = plans.new_empty((out.shape[0], 3), dtype=torch.int64)
    messages = plans.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.uint8)
    return status, messages
