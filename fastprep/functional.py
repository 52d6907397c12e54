"""Public image kernels: validate, then dispatch to the compiled code in ``fastprep._kernels``.

Images are ``(C, H, W)`` or ``(N, C, H, W)`` torch tensors or numpy arrays, dtype uint8
(values 0..255) or float32 (values on the 0..255 scale unless said otherwise), any
strides (copied to contiguous only when they are not). The result has the input's type:
numpy in, numpy out; tensor in, tensor out (``tv_tensors`` subclasses are returned as
plain tensors, as torchvision's functionals do; :mod:`fastprep.transforms` re-wraps
them). Results are new arrays; the inputs are never modified. The kernels run on the CPU,
release the GIL, and are not differentiable. The colour/scale functions run a per-sample
image on the calling thread and add threads only for large batches (:func:`kernel_threads`,
``num_threads=``); the C kernels use the best SIMD level of the CPU (docs/kernels.md).

Randomness: every random function takes a seed from torch's RNG (the default generator,
or ``generator``) -- one 63-bit draw per call -- and feeds it to a counter-based PRNG in
the kernel. ``torch.manual_seed`` therefore reproduces results, DataLoader workers (which
torch seeds differently) differ, and numpy's/Numba's global RNG states play no part.
Pass ``seed=`` to bypass the draw (the transforms draw it once in ``make_params``).

Colour: RGB -> YUV is the JPEG/JFIF YCbCr transform, BT.601 full range, as in
ITU-T T.871 (JFIF 1.02) section 7:

    Y =  0.299   R + 0.587   G + 0.114   B
    U = -0.16874 R - 0.33126 G + 0.5     B + 128
    V =  0.5     R - 0.41869 G - 0.08131 B + 128

computed in float32 with no clamping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from . import _checks
from ._kernels import _color  # type: ignore[attr-defined, unused-ignore]
from ._seeding import draw_seed
from ._threads import PARALLEL_MIN_ELEMENTS, TASK_ELEMENTS, kernel_threads, run_tasks, spans

__all__ = [
    "gaussian_blur_separable",
    "random_mask",
    "dilate4",
    "apply_mask",
    "apply_random_mask",
    "rgb_to_yuv",
    "scale",
    "scale_normalize",
    "yuv_scale",
    "mask_yuv_scale",
    "kernel_threads",
    "MASK_PROBABILITY_RESOLUTION",
    "PARALLEL_MIN_ELEMENTS",
]

MASK_PROBABILITY_RESOLUTION = 2.0**-16
"""Mask pixels are True with probability ``round(ratio / 2**-16) * 2**-16``: within
``2**-17`` (7.7e-6) of ``ratio``, exactly ``ratio`` for multiples of ``2**-16`` such as
0, 0.25, 0.5 and 1."""

_F32 = np.dtype(np.float32)
_SUPPORTED = (np.dtype(np.uint8), _F32)
_MASK_DTYPES = (np.dtype(np.bool_), np.dtype(np.uint8))
_TORCH_DTYPE = {
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.bool_): torch.bool,
}
_OUT_DTYPES = (_F32,)
_TORCH_DTYPES: dict[tuple[np.dtype, ...], frozenset[torch.dtype]] = {
    dts: frozenset(_TORCH_DTYPE[d] for d in dts) for dts in (_SUPPORTED, _MASK_DTYPES, _OUT_DTYPES)
}
_mask_module = None

#: An image: the kernels return the container type they are given.
ImageT = TypeVar("ImageT", torch.Tensor, np.ndarray)
MaskT = TypeVar("MaskT", torch.Tensor, np.ndarray)
#: A fill value: one number for every channel, or one per channel.
Fill = float | Sequence[float] | np.ndarray | torch.Tensor
#: ``(array (N, C, H, W), the caller's shape, is_tensor)`` of a validated image.
_Validated = tuple[np.ndarray, tuple[int, ...], bool]


def _mask_kernels() -> Any:
    # Imported on first use: Numba's import and cache load cost ~0.5 s that
    # `import fastprep` should not pay when masks are never drawn.
    global _mask_module
    if _mask_module is None:
        from ._kernels import _mask

        _mask_module = _mask
    return _mask_module


# ----------------------------------------------------------------------------- checks

# The checks live in fastprep._checks and the seed draw in fastprep._seeding; these aliases
# keep the old private names working for code that has not moved yet.
_check_ratio = _checks.ratio
_draw_seed = draw_seed
_fill_values = _checks.fill_values
_fill_scalar = _checks.fill_scalar
_per_channel = _checks.per_channel
_check_out_dtype = _checks.out_dtype


def _to_numpy(img: Any, name: str = "img", dtypes: tuple[np.dtype, ...] = _SUPPORTED) -> tuple[np.ndarray, bool]:
    """(numpy view, is_tensor) of a CPU tensor or ndarray whose dtype is in ``dtypes``."""
    if isinstance(img, torch.Tensor):
        if img.dtype not in _TORCH_DTYPES[dtypes]:
            raise TypeError(f"{name} must be {_dtype_names(dtypes)}, got {img.dtype}")
        if not img.is_cpu:
            raise ValueError(f"{name} must be on the CPU, got device {img.device}")
        if img.requires_grad:
            img = img.detach()
        if type(img) is not torch.Tensor:
            img = img.as_subclass(torch.Tensor)
        return img.numpy(), True
    if isinstance(img, np.ndarray):
        if img.dtype not in dtypes:
            raise TypeError(f"{name} must be {_dtype_names(dtypes)}, got {img.dtype}")
        return img, False
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(img).__name__}")


def _dtype_names(dtypes: tuple[np.dtype, ...]) -> str:
    return " or ".join(str(d) for d in dtypes)


def _image4d(img: Any, channels: int | None = None, name: str = "img") -> _Validated:
    """Validate an image; return (contiguous uint8/float32 array (N, C, H, W), shape, is_tensor)."""
    arr, is_tensor = _to_numpy(img, name)
    if arr.ndim not in (3, 4):
        raise ValueError(f"{name} must have shape (C, H, W) or (N, C, H, W), got shape {tuple(arr.shape)}")
    if channels is not None and arr.shape[-3] != channels:
        raise ValueError(
            f"{name} must have {channels} channels at dim -3 (RGB), got shape {tuple(arr.shape)}"
        )
    shape = arr.shape
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return (arr.reshape((1,) + shape) if arr.ndim == 3 else arr), shape, is_tensor


def _new(shape: tuple[int, ...], dtype: np.dtype, is_tensor: bool) -> tuple[Any, np.ndarray]:
    """Output of the caller's type and its numpy view."""
    if is_tensor:
        t = torch.empty(shape, dtype=_TORCH_DTYPE[dtype])
        return t, t.numpy()
    a = np.empty(shape, dtype=dtype)
    return a, a


def _scratch_mask(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (H, 64 * ceil(W / 64)) buffer for a mask plus its uint64 view."""
    buf = np.empty((height, ((width + 63) // 64) * 64), dtype=np.uint8)
    return buf, buf.view(np.uint64)


# ------------------------------------------------------------------------------ masks


def random_mask(height: int, width: int, ratio: float, generator: torch.Generator | None = None, *,
                seed: int | None = None) -> torch.Tensor:
    """Draw a random boolean mask, each pixel True with probability ``ratio``.

    The mask is not dilated; :func:`apply_random_mask` equals
    ``apply_mask(img, dilate4(random_mask(H, W, ratio, seed=s)), fill)`` for the same seed.

    Args:
        height (int): rows, >= 0.
        width (int): columns, >= 0.
        ratio (float): probability in [0, 1], resolved to multiples of
            :data:`MASK_PROBABILITY_RESOLUTION` (2**-16); 0 and 1 are exact.
        generator (torch.Generator, optional): source of the seed; default torch RNG.
        seed (int, optional): use this seed instead of drawing one.

    Returns:
        torch.Tensor: ``(height, width)`` bool.
    """
    height = _checks.nonneg_int(height, "height")
    width = _checks.nonneg_int(width, "width")
    m = _mask_kernels().probability_numerator(_checks.ratio(ratio))
    s = draw_seed(generator, seed)
    K = _mask_kernels()
    words = K.random_bits(s, m, height, width)
    buf, buf64 = _scratch_mask(height, width)
    K.unpack_bits(words, buf64)
    return torch.from_numpy(buf[:, :width].view(np.bool_).copy())


def dilate4(mask: MaskT) -> MaskT:
    """Dilate a mask with the 4-neighbour cross ``[[0,1,0],[1,1,1],[0,1,0]]``.

    Outside the image counts as False (zero padding), so the result equals
    ``scipy.signal.convolve2d(mask, cross, mode='same') > 0``.

    Args:
        mask (torch.Tensor | numpy.ndarray): ``(*, H, W)`` bool, or uint8 (nonzero is
            True). Leading dimensions are dilated independently.

    Returns:
        Same type and dtype as ``mask``, ``(*, H, W)``, values 0/1.
    """
    arr, is_tensor = _to_numpy(mask, "mask", _MASK_DTYPES)
    if arr.ndim < 2:
        raise ValueError(f"mask must have shape (*, H, W), got shape {tuple(arr.shape)}")
    shape = arr.shape
    batch = int(np.prod(shape[:-2], dtype=np.int64))
    src = np.ascontiguousarray(arr).view(np.uint8).reshape((batch,) + shape[-2:])
    out = np.empty(src.shape, dtype=np.uint8)
    if out.size:
        K = _mask_kernels()
        for i in range(batch):
            K.dilate4(src[i], out[i])
    result = out.view(arr.dtype).reshape(shape)
    return torch.from_numpy(result) if is_tensor else result  # type: ignore[return-value]


def _mask2d(mask: Any, height: int, width: int) -> np.ndarray:
    arr, _ = _to_numpy(mask, "mask", _MASK_DTYPES)
    if arr.shape != (height, width):
        raise ValueError(f"mask must have shape (H, W) = {(height, width)}, got shape {tuple(arr.shape)}")
    return np.ascontiguousarray(arr).view(np.uint8)


def apply_mask(img: ImageT, mask: torch.Tensor | np.ndarray, fill: Fill = 0) -> ImageT:
    """Set every channel of ``img`` to ``fill`` where ``mask`` is True.

    The mask is used as given (dilate it first with :func:`dilate4` for RandomMask
    semantics) and is shared by all leading dimensions.

    Args:
        img (torch.Tensor | numpy.ndarray): ``(C, H, W)`` or ``(N, C, H, W)``, uint8 or
            float32, any channel count.
        mask (torch.Tensor | numpy.ndarray): ``(H, W)`` bool or uint8 (nonzero is True).
        fill (int | float | sequence): value for masked pixels, or one value per channel
            (e.g. ``(0, 128, 128)``, the YCbCr of RGB black); integers in [0, 255] for uint8.

    Returns:
        Same type, shape and dtype as ``img``.
    """
    arr, shape, is_tensor = _image4d(img)
    m = _mask2d(mask, shape[-2], shape[-1])
    f = _checks.fill_values(fill, arr.dtype, arr.shape[1])
    out, out_np = _new(shape, arr.dtype, is_tensor)
    if arr.size:
        _mask_kernels().apply_mask(arr, m, f, out_np.reshape(arr.shape))
    return out


def apply_random_mask(img: ImageT, ratio: float, fill: Fill = 0, generator: torch.Generator | None = None, *,
                      seed: int | None = None) -> ImageT:
    """RandomMask: draw a mask (probability ``ratio``), dilate it with the cross, fill it.

    One compiled pass: random bits 64 pixels at a time, dilation on the packed bits, then
    the fill. One mask is drawn per call and shared by all leading dimensions (as
    torchvision v2 applies one set of parameters to a batch).

    Args:
        img (torch.Tensor | numpy.ndarray): ``(C, H, W)`` or ``(N, C, H, W)``, uint8 or
            float32, any channel count.
        ratio (float): probability in [0, 1] that a pixel seeds the mask (see
            :func:`random_mask`).
        fill (int | float | sequence): value for masked pixels, or one value per channel;
            integers in [0, 255] for uint8.
        generator (torch.Generator, optional): source of the seed; default torch RNG.
        seed (int, optional): use this seed instead of drawing one.

    Returns:
        Same type, shape and dtype as ``img``.
    """
    arr, shape, is_tensor = _image4d(img)
    m = _mask_kernels().probability_numerator(_checks.ratio(ratio))
    f = _checks.fill_values(fill, arr.dtype, arr.shape[1])
    s = draw_seed(generator, seed)
    out, out_np = _new(shape, arr.dtype, is_tensor)
    if arr.size:
        buf, buf64 = _scratch_mask(shape[-2], shape[-1])
        _mask_kernels().random_mask_apply(s, m, arr, f, out_np.reshape(arr.shape), buf, buf64)
    return out


# ----------------------------------------------------------------------------- colour


def _yuv(validated: _Validated, gain: float, out_dtype: Any = None, mask_args: tuple | None = None,
         num_threads: int | None = None, out: Any = None) -> Any:
    arr, shape, is_tensor = validated
    if out is None:
        out, out_np = _new(shape, _F32, is_tensor)
    else:
        out_np = _check_out(out, arr, shape, is_tensor)
    threads = kernel_threads(out_np.size, num_threads)
    if arr.size and mask_args is None:
        _yuv_plain(arr, out_np, gain, threads)
    elif arr.size and mask_args is not None:
        _yuv_masked(arr, out_np.reshape(arr.shape), gain, mask_args, threads)
    return _cast(out, out_dtype, is_tensor)


def _yuv_plain(arr: np.ndarray, out_np: np.ndarray, gain: float, threads: int) -> None:
    n = arr.shape[0]
    src, dst = arr.reshape(n, 3, -1), out_np.reshape(n, 3, -1)
    tasks, bounds = spans(src.shape[2], TASK_ELEMENTS // (3 * n))

    def task(i: int) -> None:
        a, b = bounds(i)
        _color.yuv(src[:, :, a:b], dst[:, :, a:b], gain)

    run_tasks(task, tasks, threads)


def _yuv_masked(arr: np.ndarray, dst: np.ndarray, gain: float, mask_args: tuple, threads: int) -> None:
    """``_yuv_plain`` with the pixels of a random dilated mask (``mask_args = (probability
    numerator, fill, seed)``) replaced by the YUV of the fill; ``arr`` is (N, 3, H, W)."""
    m, f, s = mask_args
    height, width = arr.shape[2], arr.shape[3]
    buf, buf64 = _scratch_mask(height, width)
    _mask_kernels().random_dilated_mask(s, m, height, width, buf64)
    tasks, bounds = spans(height, TASK_ELEMENTS // (3 * arr.shape[0] * width))

    def task(i: int) -> None:
        a, b = bounds(i)
        _color.mask_yuv(arr[:, :, a:b], buf[a:b], dst[:, :, a:b], float(f), gain)

    run_tasks(task, tasks, threads)


def _check_out(out: Any, arr: np.ndarray, shape: tuple[int, ...], is_tensor: bool) -> np.ndarray:
    """The numpy view of a caller's ``out``: same container type, float32, C-contiguous,
    ``shape``, not overlapping the input."""
    kind = torch.Tensor if is_tensor else np.ndarray
    if not isinstance(out, kind):
        raise TypeError(f"out must be a {kind.__module__}.{kind.__name__} like img, got {type(out).__name__}")
    out_np, _ = _to_numpy(out, "out", _OUT_DTYPES)
    if tuple(out_np.shape) != tuple(shape):
        raise ValueError(f"out must have img's shape {tuple(shape)}, got {tuple(out_np.shape)}")
    if not out_np.flags.c_contiguous or not out_np.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable")
    if np.may_share_memory(out_np, arr):
        raise ValueError("out must not overlap img")
    return out_np


def _cast(out: Any, dtype: Any, is_tensor: bool) -> Any:
    if dtype is None or dtype is torch.float32 or (not is_tensor and np.dtype(dtype) == np.float32):
        return out
    return out.to(dtype) if is_tensor else out.astype(dtype)


def rgb_to_yuv(img: ImageT, *, num_threads: int | None = None, out: ImageT | None = None) -> ImageT:
    """Convert RGB to YUV (JPEG/JFIF YCbCr, BT.601 full range; ITU-T T.871 section 7).

    ``Y = 0.299 R + 0.587 G + 0.114 B``, ``U = -0.16874 R - 0.33126 G + 0.5 B + 128``,
    ``V = 0.5 R - 0.41869 G - 0.08131 B + 128``, in float32, unclamped.

    Args:
        img (torch.Tensor | numpy.ndarray): ``(3, H, W)`` or ``(N, 3, H, W)`` RGB, uint8
            or float32 on the 0..255 scale.
        num_threads (int, optional): threads for this call; ``None`` (default): see
            :func:`kernel_threads` (one for a per-sample image, more only for large
            batches in the main process).
        out (optional): float32 destination of ``img``'s container type and shape,
            C-contiguous, not overlapping ``img`` (e.g. a reused batch buffer); returned.

    Returns:
        Same type and shape as ``img``, float32; Y in [0, 255] and U, V in [0.5, 255.5]
        for inputs in [0, 255].
    """
    return _yuv(_image4d(img, channels=3), 1.0, num_threads=num_threads, out=out)


def scale(img: ImageT, *, num_threads: int | None = None, out: ImageT | None = None) -> ImageT:
    """Scale to [0, 1]: ``img / 255`` in float32 (a true division, as in torch).

    Args:
        img (torch.Tensor | numpy.ndarray): any shape, uint8 or float32.
        num_threads (int, optional): threads for this call; ``None`` (default): see
            :func:`kernel_threads` (one for a per-sample image, more only for large
            batches in the main process).
        out (optional): float32 destination of ``img``'s container type and shape,
            C-contiguous, not overlapping ``img`` (e.g. a reused batch buffer); returned.

    Returns:
        Same type and shape as ``img``, float32.
    """
    arr, is_tensor = _to_numpy(img)
    src = np.ascontiguousarray(arr).reshape(-1)
    if out is None:
        out, out_np = _new(arr.shape, _F32, is_tensor)
    else:
        out_np = _check_out(out, arr, arr.shape, is_tensor)
    dst = out_np.reshape(-1)
    tasks, bounds = spans(src.size, TASK_ELEMENTS)

    def task(i: int) -> None:
        a, b = bounds(i)
        _color.scale(src[a:b], dst[a:b])

    run_tasks(task, tasks, kernel_threads(src.size, num_threads))
    return out


def scale_normalize(img: ImageT, mean: float | Sequence[float], std: float | Sequence[float], *,
                    num_threads: int | None = None, out: ImageT | None = None) -> ImageT:
    """``(img / 255 - mean) / std`` per channel in one pass, float32: what
    ``torchvision.transforms.v2.ToDtype(torch.float32, scale=True)`` followed by
    ``v2.Normalize(mean, std)`` computes, without the intermediate float image.

    Computed as ``img * gain + bias`` with ``gain = 1 / (255 std)`` and
    ``bias = -mean / std`` (in double, rounded once to float32), one float32 rounding for
    the product and one for the sum: within a few float32 ulps of the three-step formula.

    Args:
        img (torch.Tensor | numpy.ndarray): ``(C, H, W)`` or ``(N, C, H, W)``, uint8 or
            float32 on the 0..255 scale, 1 to 4 channels.
        mean, std: one number for every channel or one per channel, on the [0, 1]
            scale (ImageNet: ``(0.485, 0.456, 0.406)``, ``(0.229, 0.224, 0.225)``);
            ``std`` nonzero.
        num_threads (int, optional): threads for this call; ``None`` (default): see
            :func:`kernel_threads`.
        out (optional): float32 destination of ``img``'s container type and shape,
            C-contiguous, not overlapping ``img`` (e.g. a reused batch buffer); returned.

    Returns:
        Same type and shape as ``img``, float32.
    """
    arr, shape, is_tensor = _image4d(img)
    channels = arr.shape[1]
    if not 1 <= channels <= 4:
        raise ValueError(f"img must have 1 to 4 channels at dim -3, got shape {tuple(shape)}")
    mean, std = _checks.per_channel(mean, "mean", channels), _checks.per_channel(std, "std", channels)
    if any(v == 0 for v in std):
        raise ValueError(f"std must be nonzero, got {std}")
    gain = [1.0 / (255.0 * v) for v in std]
    bias = [-m / v for m, v in zip(mean, std)]
    if out is None:
        out, out_np = _new(shape, _F32, is_tensor)
    else:
        out_np = _check_out(out, arr, shape, is_tensor)
    if arr.size:
        n = arr.shape[0]
        src, dst = arr.reshape(n, channels, -1), out_np.reshape(n, channels, -1)
        tasks, bounds = spans(src.shape[2], TASK_ELEMENTS // (channels * n))

        def task(i: int) -> None:
            a, b = bounds(i)
            _color.affine(src[:, :, a:b], dst[:, :, a:b], gain, bias)

        run_tasks(task, tasks, kernel_threads(out_np.size, num_threads))
    return out


def yuv_scale(img: ImageT, dtype: Any = None, *, num_threads: int | None = None,
              out: ImageT | None = None) -> ImageT:
    """``scale(rgb_to_yuv(img))`` in one pass (coefficients pre-divided by 255).

    Agrees with the two-step result to float32 rounding (< 1e-6).

    Args:
        img (torch.Tensor | numpy.ndarray): ``(3, H, W)`` or ``(N, 3, H, W)`` RGB, uint8
            or float32 on the 0..255 scale.
        dtype (optional): output dtype: float32 (default), float16, or bfloat16 for
            tensors (a cast of the float32 result); float32 or ``None`` with ``out``.
        num_threads (int, optional): threads for this call; ``None`` (default): see
            :func:`kernel_threads` (one for a per-sample image, more only for large
            batches in the main process).
        out (optional): float32 destination of ``img``'s container type and shape,
            C-contiguous, not overlapping ``img`` (e.g. a reused batch buffer); returned.

    Returns:
        Same type and shape as ``img``; Y in [0, 1], U and V in [0.5/255, 255.5/255].
    """
    validated = _image4d(img, channels=3)
    _checks.out_dtype(dtype, validated[2])
    if out is not None and _cast(out, dtype, validated[2]) is not out:
        raise ValueError(f"out is float32: dtype must be None or float32 with out, got {dtype!r}")
    return _yuv(validated, 1.0 / 255.0, dtype, num_threads=num_threads, out=out)


def mask_yuv_scale(img: ImageT, ratio: float, generator: torch.Generator | None = None, *, fill: float = 0,
                   seed: int | None = None, num_threads: int | None = None) -> ImageT:
    """``yuv_scale(apply_random_mask(img, ratio, fill))`` fused: each output written once.

    The mask is the one :func:`apply_random_mask` draws for the same seed; a masked
    pixel becomes the YUV of ``(fill, fill, fill)`` divided by 255 -- for ``fill=0``,
    ``(0, 128/255, 128/255)``.

    Args:
        img (torch.Tensor | numpy.ndarray): ``(3, H, W)`` or ``(N, 3, H, W)`` RGB, uint8
            or float32 on the 0..255 scale.
        ratio (float): mask probability in [0, 1] (see :func:`random_mask`).
        generator (torch.Generator, optional): source of the seed; default torch RNG.
        fill (int | float): value of masked pixels before the conversion.
        seed (int, optional): use this seed instead of drawing one.
        num_threads (int, optional): threads for this call; ``None`` (default): see
            :func:`kernel_threads` (one for a per-sample image, more only for large
            batches in the main process).

    Returns:
        Same type and shape as ``img``, float32.
    """
    validated = _image4d(img, channels=3)
    m = _mask_kernels().probability_numerator(_checks.ratio(ratio))
    f = _checks.fill_scalar(fill, validated[0].dtype)
    s = draw_seed(generator, seed)
    return _yuv(validated, 1.0 / 255.0, None, (m, f, s), num_threads)


def gaussian_blur_separable(img: torch.Tensor, kernel_size: int | Sequence[int], sigma: float | Sequence[float]
                            ) -> torch.Tensor:
    """Gaussian blur of a uint8 ``[C, H, W]`` image as two 1-D passes (fastprep's fast mode).

    The same Gaussian as ``torchvision.transforms.v2.functional.gaussian_blur`` -- the same
    float32 1-D weights, reflection padding, rounding to nearest -- applied to the rows, then
    the columns, in float32: ``kx + ky`` multiply-adds a pixel instead of ``kx * ky``. The
    summation differs from torchvision's dense 2-D convolution, so a few pixels may differ by a
    level (docs/multiview.md gives the measured difference); the threads and processes engines
    both run this kernel, so they agree bit for bit.

    Args:
        img: uint8 tensor ``[C, H, W]``.
        kernel_size: odd and positive, an int or ``(kx, ky)``.
        sigma: positive, a float or ``(sigma_x, sigma_y)``.

    Returns:
        uint8 tensor ``[C, H, W]``.
    """
    if not isinstance(img, torch.Tensor) or img.dtype != torch.uint8 or img.dim() != 3:
        raise TypeError(f"img must be a uint8 [C, H, W] tensor, got {_describe(img)}")
    kx, ky = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    sx, sy = (sigma, sigma) if isinstance(sigma, (int, float)) else tuple(sigma)
    if not all(isinstance(k, int) and k > 0 and k % 2 == 1 for k in (kx, ky)):
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size!r}")
    if not (sx > 0 and sy > 0):
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    return torch.ops.fastprep.apply_pixel_kernel(img, "gaussian_blur_separable", [kx, ky], [float(sx), float(sy)])


def _describe(x: Any) -> str:
    return f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
