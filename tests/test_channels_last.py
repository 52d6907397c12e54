"""decode_jpeg / decode_jpeg_roi with channels_last=True (decode_jpeg's default): the same
values as the planar output (and as a full planar decode sliced to the window), in [H, W, C]
memory; decode_jpeg's default equals torchvision.io.decode_jpeg in values and layout."""

import warnings

import pytest
import torch

import fastprep.io as fio
from fastprep import _C
from fastprep._checks import encoded_tensor
from conftest import ENCODINGS, make_jpeg

H, W = 67, 101  # odd sizes: partial MCUs at the right and bottom edges
MODES = ["RGB", "GRAY", "YCbCr", "UNCHANGED"]
# (top, left, height, width) in pixels of the decoded (possibly scaled) image, as fractions
# (the full-width ones are written by the decoder straight into the output, rows above skipped)
WINDOWS = [(0.0, 0.0, 1.0, 1.0), (0.3, 0.2, 0.5, 0.6), (0.5, 0.7, 0.5, 0.3), (0.0, 0.9, 0.1, 0.1),
           (0.4, 0.0, 0.5, 1.0)]


def _decodable(encoding, mode):
    # YCbCr output comes only from YCbCr or gray files
    return not (mode == "YCbCr" and encoding == "cmyk")


def _window(h, w, frac):
    t, l, hh, ww = frac
    top, left = int(t * h), int(l * w)
    return top, left, max(1, min(int(hh * h), h - top)), max(1, min(int(ww * w), w - left))


def _check_layout(img):
    c, h, w = img.shape
    assert img.stride() == (1, w * c, c)  # a permuted view of a contiguous [H, W, C] tensor
    if c in (3, 4):
        assert img[None].is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_full_decode_equals_planar(encoding, mode):
    data = make_jpeg(encoding, H, W)
    if not _decodable(encoding, mode):
        pytest.skip("mode not available for this colour space")
    for num in (8, 4, 3, 1):
        planar = fio.decode_jpeg(data, mode, scale=(num, 8), channels_last=False)
        hwc = fio.decode_jpeg(data, mode, scale=(num, 8), channels_last=True)
        assert planar.is_contiguous()
        _check_layout(hwc)
        assert torch.equal(hwc, planar), (encoding, mode, num)
        default = fio.decode_jpeg(data, mode, scale=(num, 8))
        _check_layout(default)
        assert torch.equal(default, planar), (encoding, mode, num)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_roi_equals_planar_and_sliced_full_decode(encoding, mode):
    data = make_jpeg(encoding, H, W)
    if not _decodable(encoding, mode):
        pytest.skip("mode not available for this colour space")
    for num in (8, 5, 2):
        full = fio.decode_jpeg(data, mode, scale=(num, 8), channels_last=False)
        h, w = full.shape[1:]
        for frac in WINDOWS:
            top, left, hh, ww = _window(h, w, frac)
            hwc = fio.decode_jpeg_roi(data, top, left, hh, ww, mode, scale=(num, 8), channels_last=True)
            planar = fio.decode_jpeg_roi(data, top, left, hh, ww, mode, scale=(num, 8))
            _check_layout(hwc)
            assert torch.equal(hwc, planar), (encoding, mode, num, frac)
            assert torch.equal(hwc, full[:, top:top + hh, left:left + ww]), (encoding, mode, num, frac)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_restart_fast_path_equals_planar(encoding, mode):
    """Files packed with restart intervals (transcode_jpeg) take the restart-interval path
    for ROI decodes; its channels-last output is the planar one."""
    packed = fio.transcode_jpeg(make_jpeg(encoding, 3 * H, 2 * W))
    if not _decodable(encoding, mode):
        pytest.skip("mode not available for this colour space")
    info = fio.jpeg_info(packed)
    full = fio.decode_jpeg(packed, mode)
    fast = 0
    for frac in WINDOWS[1:]:
        top, left, hh, ww = _window(info.height, info.width, frac)
        taken0 = _C.restart_stats()[0]
        planar = fio.decode_jpeg_roi(packed, top, left, hh, ww, mode)
        taken1 = _C.restart_stats()[0]
        hwc = fio.decode_jpeg_roi(packed, top, left, hh, ww, mode, channels_last=True)
        # both layouts take the same path (the restart-interval one when the window allows)
        assert _C.restart_stats()[0] - taken1 == taken1 - taken0
        fast += taken1 - taken0
        _check_layout(hwc)
        assert torch.equal(hwc, planar), (encoding, mode, frac)
        assert torch.equal(hwc, full[:, top:top + hh, left:left + ww]), (encoding, mode, frac)
    if info.restart_roi and not info.progressive:
        assert fast > 0, "no window took the restart-interval path"


def test_restart_fast_path_is_exercised():
    # Guard against the test above passing only through the sequential path.
    packed = fio.transcode_jpeg(make_jpeg("420", 3 * H, 2 * W))
    assert fio.jpeg_info(packed).restart_roi


def test_defaults_and_old_op_calls_work():
    """decode_jpeg returns interleaved memory by default (as torchvision), decode_jpeg_roi
    planar; the op called without the argument stays planar."""
    data = make_jpeg("420", H, W)
    _check_layout(fio.decode_jpeg(data))
    assert fio.decode_jpeg(data, channels_last=False).is_contiguous()
    assert fio.decode_jpeg_roi(data, 1, 2, 3, 4).is_contiguous()
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    old = torch.ops.fastprep.decode_jpeg(t, 3, 0, False)  # calls without the new argument
    assert old.is_contiguous() and torch.equal(old, fio.decode_jpeg(data, channels_last=True))
    old_roi = torch.ops.fastprep.decode_jpeg_roi(t, 1, 2, 3, 4, 3, 0, False, 8, 0)
    assert old_roi.is_contiguous() and torch.equal(old_roi, fio.decode_jpeg_roi(data, 1, 2, 3, 4))


def test_opcheck_channels_last(photo_420):
    """The fake kernels (torch.compile) describe the channels-last strides the CPU kernels return."""
    data = encoded_tensor(photo_420)
    cl = {"channels_last": True}
    torch.library.opcheck(torch.ops.fastprep.decode_jpeg.default, (data, 3, 0, False), cl)
    torch.library.opcheck(torch.ops.fastprep.decode_jpeg.default, (data, 3, 0, False, 3), cl)
    torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 10, 20, 64, 48, 3, 0, False), cl)
    torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 0, 0, 5, 5, 1, 0, True), cl)
    torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 10, 20, 30, 40, 3, 0, False, 2), cl)


@pytest.mark.parametrize("mode", ["RGB", "GRAY", "UNCHANGED"])
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_default_equals_torchvision(encoding, mode):
    """decode_jpeg's default output: torchvision.io.decode_jpeg's values, shape and strides."""
    tvio = pytest.importorskip("torchvision.io")
    data = make_jpeg(encoding, H, W)
    tv_mode = getattr(tvio.ImageReadMode, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
        try:
            want = tvio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=tv_mode)
        except RuntimeError:
            pytest.skip("torchvision does not decode this colour space in this mode")
    got = fio.decode_jpeg(data, mode)
    assert got.shape == want.shape and got.stride() == want.stride(), (got.stride(), want.stride())
    assert torch.equal(got, want), (encoding, mode)
