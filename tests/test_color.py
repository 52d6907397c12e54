"""Colour and scale kernels (Cython): rgb_to_yuv, scale, yuv_scale, mask_yuv_scale."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from scipy.signal import convolve2d

import fastprep.functional as F


def ref_yuv(img):
    """The BT.601 full-range formulas (ITU-T T.871) in plain float32 torch."""
    x = torch.as_tensor(img).to(torch.float32)
    r, g, b = x.unbind(-3)
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = -0.16874 * r - 0.33126 * g + 0.5 * b + 128
    v = 0.5 * r - 0.41869 * g - 0.08131 * b + 128
    return torch.stack([y, u, v], dim=-3)


def ref_mask(h, w, ratio, seed):
    m = F.random_mask(h, w, ratio, seed=seed).numpy()
    cross = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
    return torch.from_numpy(convolve2d(m.astype(np.int32), cross, mode="same") > 0)


def image(shape, dtype=torch.uint8, seed=0, low=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(low, 256, shape, generator=g, dtype=torch.uint8)
    if dtype == torch.float32:
        return img.float() + torch.rand(shape, generator=g) * (255 - img.float())
    return img


SHAPES = [(3, 256, 256), (3, 1, 1), (3, 7, 129), (2, 3, 33, 65), (5, 3, 1, 1000)]
_LEVELS = torch.arange(0, 256, 5, dtype=torch.uint8)
ALL_PIXELS = torch.stack(torch.meshgrid(_LEVELS, _LEVELS, _LEVELS, indexing="ij")).reshape(3, 52, -1)


class TestRgbToYuv:
    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_matches_reference(self, shape, dtype):
        img = image(shape, dtype)
        got = F.rgb_to_yuv(img)
        assert got.dtype == torch.float32 and got.shape == img.shape
        # on the 0..255 scale: 1e-4 absolute, i.e. 4e-7 of the range (the 1e-5, tighter)
        torch.testing.assert_close(got, ref_yuv(img), rtol=0, atol=1e-4)

    def test_colour_cube_and_known_values(self):
        got = F.rgb_to_yuv(ALL_PIXELS)
        torch.testing.assert_close(got, ref_yuv(ALL_PIXELS), rtol=0, atol=1e-4)
        # black, white, blue, green, red; float64 formulas in plain Python
        rgbs = [(0, 0, 0), (255, 255, 255), (0, 0, 255), (0, 255, 0), (255, 0, 0)]
        prim = torch.tensor(rgbs, dtype=torch.uint8).T[:, None, :]
        expect = torch.tensor([[0.299 * r + 0.587 * g + 0.114 * b,
                                -0.16874 * r - 0.33126 * g + 0.5 * b + 128,
                                0.5 * r - 0.41869 * g - 0.08131 * b + 128] for r, g, b in rgbs])
        yuv = F.rgb_to_yuv(prim)[:, 0, :].T
        torch.testing.assert_close(yuv.double(), expect.double(), rtol=0, atol=3e-5)
        assert yuv[0].tolist() == [0.0, 128.0, 128.0]

    def test_no_clamping(self):
        img = torch.tensor([-10.0, 300.0, 0.0]).reshape(3, 1, 1)
        torch.testing.assert_close(F.rgb_to_yuv(img), ref_yuv(img), rtol=1e-6, atol=1e-4)

    def test_numpy_and_strides(self):
        base = image((2, 3, 40, 50))
        nchw_last = base.to(memory_format=torch.channels_last)[:, :, 1::2, ::3]
        assert not nchw_last.is_contiguous()
        torch.testing.assert_close(F.rgb_to_yuv(nchw_last), ref_yuv(nchw_last), rtol=0, atol=1e-4)
        arr = base.numpy()[0, ::-1]  # BGR view, negative stride
        got = F.rgb_to_yuv(arr)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_allclose(got, ref_yuv(arr.copy()).numpy(), rtol=0, atol=1e-4)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"3 channels.*got shape \(4, 5, 5\)"):
            F.rgb_to_yuv(torch.zeros(4, 5, 5, dtype=torch.uint8))
        with pytest.raises(ValueError, match=r"got shape \(5, 5\)"):
            F.rgb_to_yuv(torch.zeros(5, 5, dtype=torch.uint8))
        with pytest.raises(ValueError, match=r"got shape \(1, 1, 3, 5, 5\)"):
            F.rgb_to_yuv(torch.zeros(1, 1, 3, 5, 5, dtype=torch.uint8))
        with pytest.raises(TypeError, match="got torch.float64"):
            F.rgb_to_yuv(torch.zeros(3, 5, 5, dtype=torch.float64))
        with pytest.raises(TypeError, match="got torch.bfloat16"):
            F.rgb_to_yuv(torch.zeros(3, 5, 5, dtype=torch.bfloat16))
        with pytest.raises(TypeError, match="got int32"):
            F.rgb_to_yuv(np.zeros((3, 5, 5), np.int32))
        with pytest.raises(TypeError, match="got list"):
            F.rgb_to_yuv([[[0]]])
        with pytest.raises(ValueError, match="must be on the CPU, got device meta"):
            F.rgb_to_yuv(torch.zeros(3, 5, 5, dtype=torch.uint8, device="meta"))

    @pytest.mark.parametrize("shape", [(3, 0, 4), (3, 4, 0), (0, 3, 4, 4)])
    def test_zero_sized(self, shape):
        assert F.rgb_to_yuv(torch.zeros(shape, dtype=torch.uint8)).shape == shape
        assert F.yuv_scale(torch.zeros(shape, dtype=torch.uint8)).shape == shape
        assert F.mask_yuv_scale(torch.zeros(shape, dtype=torch.uint8), 0.5).shape == shape


class TestScale:
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    @pytest.mark.parametrize("shape", [(3, 256, 256), (7,), (2, 3, 5, 9), (0, 3)])
    def test_equals_torch_division(self, dtype, shape):
        img = image(shape, dtype) if len(shape) >= 3 else torch.randint(0, 256, shape).to(dtype)
        got = F.scale(img)
        assert got.dtype == torch.float32
        assert torch.equal(got, img.float() / 255)  # a true division: bit-exact

    def test_numpy_strided(self):
        arr = image((3, 30, 40), torch.float32).numpy()[:, ::2, ::-1]
        got = F.scale(arr)
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, (torch.from_numpy(arr.copy()) / 255).numpy())

    def test_errors(self):
        with pytest.raises(TypeError, match="uint8 or float32, got torch.int32"):
            F.scale(torch.zeros(3, dtype=torch.int32))
        with pytest.raises(TypeError, match="got int"):
            F.scale(3)


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def ref_normalize(img, mean, std):
    """ToDtype(scale=True) + Normalize in float64: ``(x / 255 - mean) / std``."""
    c = img.shape[-3]
    shape = (c, 1, 1)
    m = torch.tensor(mean, dtype=torch.float64).expand(c).reshape(shape)
    s = torch.tensor(std, dtype=torch.float64).expand(c).reshape(shape)
    return (img.double() / 255 - m) / s


class TestScaleNormalize:
    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_matches_float64_formula(self, shape, dtype):
        img = image(shape, dtype)
        got = F.scale_normalize(img, IMAGENET_MEAN, IMAGENET_STD)
        assert got.dtype == torch.float32 and got.shape == img.shape
        # |out| <= 2.7: a float32 ulp there is 2.4e-7; gain, bias, product and sum round once each
        torch.testing.assert_close(got.double(), ref_normalize(img, IMAGENET_MEAN, IMAGENET_STD), rtol=0, atol=1e-6)

    def test_equals_v2_to_dtype_normalize(self):
        from torchvision.transforms import v2

        img = image((2, 3, 31, 45))
        ref = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])(img)
        torch.testing.assert_close(F.scale_normalize(img, IMAGENET_MEAN, IMAGENET_STD), ref, rtol=0, atol=1e-6)

    @pytest.mark.parametrize("channels", [1, 2, 4])
    def test_other_channel_counts_and_scalar_values(self, channels):
        img = torch.randint(0, 256, (2, channels, 9, 13), dtype=torch.uint8,
                            generator=torch.Generator().manual_seed(channels))
        mean, std = [0.1 * (c + 1) for c in range(channels)], [0.2 + 0.05 * c for c in range(channels)]
        torch.testing.assert_close(F.scale_normalize(img, mean, std).double(), ref_normalize(img, mean, std),
                                   rtol=0, atol=1e-6)
        torch.testing.assert_close(F.scale_normalize(img, 0.5, 0.25).double(), ref_normalize(img, 0.5, 0.25),
                                   rtol=0, atol=1e-6)

    def test_threads_and_numpy_give_the_same_bits(self):
        img = image((5, 3, 130, 150))
        one = F.scale_normalize(img, IMAGENET_MEAN, IMAGENET_STD, num_threads=1)
        assert torch.equal(F.scale_normalize(img, IMAGENET_MEAN, IMAGENET_STD, num_threads=3), one)
        got = F.scale_normalize(img.numpy(), IMAGENET_MEAN, IMAGENET_STD)
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, one.numpy())

    def test_errors(self):
        img = image((3, 4, 5))
        with pytest.raises(ValueError, match="std must be nonzero"):
            F.scale_normalize(img, 0.5, (0.2, 0.0, 0.2))
        with pytest.raises(ValueError, match=r"mean must have one value per channel \(3\), got 2"):
            F.scale_normalize(img, (0.5, 0.5), 0.2)
        with pytest.raises(ValueError, match="std must be finite"):
            F.scale_normalize(img, 0.5, float("nan"))
        with pytest.raises(TypeError, match="mean must be a number or one number per channel"):
            F.scale_normalize(img, "a", 0.2)
        with pytest.raises(ValueError, match="1 to 4 channels"):
            F.scale_normalize(torch.zeros((5, 2, 2), dtype=torch.uint8), 0.5, 0.2)
        with pytest.raises(TypeError, match="uint8 or float32, got torch.int32"):
            F.scale_normalize(torch.zeros((3, 2, 2), dtype=torch.int32), 0.5, 0.2)


class TestYuvScale:
    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_matches_reference_and_unfused(self, shape, dtype):
        img = image(shape, dtype)
        got = F.yuv_scale(img)
        torch.testing.assert_close(got, ref_yuv(img) / 255, rtol=0, atol=1e-6)
        torch.testing.assert_close(got, F.scale(F.rgb_to_yuv(img)), rtol=0, atol=1e-6)

    def test_half_outputs(self):
        img = image((2, 3, 16, 16))
        full = F.yuv_scale(img)
        for dt in (torch.float16, torch.bfloat16):
            got = F.yuv_scale(img, dtype=dt)
            assert got.dtype == dt and torch.equal(got, full.to(dt))
        got = F.yuv_scale(img.numpy(), dtype=np.float16)
        assert got.dtype == np.float16
        with pytest.raises(TypeError, match="dtype must be .*got torch.int8"):
            F.yuv_scale(img, dtype=torch.int8)
        with pytest.raises(TypeError, match="dtype must be numpy.float32 or numpy.float16"):
            F.yuv_scale(img.numpy(), dtype=torch.bfloat16)

    def test_helper_threads_match_serial(self):
        img = image((6, 3, 64, 300))
        old = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            serial = F.yuv_scale(img)
            scale1 = F.scale(img)
            masked1 = F.mask_yuv_scale(img, 0.25, seed=4)
            torch.set_num_threads(2)
            assert torch.equal(F.yuv_scale(img), serial)
            assert torch.equal(F.scale(img), scale1)
            assert torch.equal(F.mask_yuv_scale(img, 0.25, seed=4), masked1)
        finally:
            torch.set_num_threads(old)


class TestMaskYuvScale:
    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    @pytest.mark.parametrize("ratio", [0.0, 0.25, 0.6, 1.0])
    def test_equals_unfused(self, shape, dtype, ratio):
        img = image(shape, dtype, low=1)  # no black pixels: the mask is recoverable
        got = F.mask_yuv_scale(img, ratio, seed=17)
        mask = ref_mask(shape[-2], shape[-1], ratio, seed=17)
        masked = img.clone()
        masked[..., mask] = 0
        ref = ref_yuv(masked) / 255
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(got, F.scale(F.rgb_to_yuv(F.apply_random_mask(img, ratio, seed=17))),
                                   rtol=0, atol=1e-6)
        # masked pixels are exactly (0, 128/255, 128/255)
        hit = (got[..., 0, :, :] == 0) & (got[..., 1, :, :] == torch.tensor(128.0) / 255) & (
            got[..., 2, :, :] == torch.tensor(128.0) / 255)
        assert torch.equal(hit, mask.expand_as(hit))

    def test_fill_and_numpy(self):
        img = image((3, 20, 30), low=1).numpy()
        got = F.mask_yuv_scale(img, 0.3, fill=100, seed=2)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        masked = F.apply_random_mask(img, 0.3, fill=100, seed=2)
        np.testing.assert_allclose(got, (ref_yuv(masked) / 255).numpy(), rtol=0, atol=1e-5)

    def test_reproducible_with_generator(self):
        img = image((3, 20, 30))
        a = F.mask_yuv_scale(img, 0.3, torch.Generator().manual_seed(5))
        assert torch.equal(a, F.mask_yuv_scale(img, 0.3, torch.Generator().manual_seed(5)))
        torch.manual_seed(5)
        b = F.mask_yuv_scale(img, 0.3)
        torch.manual_seed(5)
        unfused = F.scale(F.rgb_to_yuv(F.apply_random_mask(img, 0.3)))
        torch.testing.assert_close(b, unfused, rtol=0, atol=1e-6)

    def test_errors(self):
        img = image((3, 4, 5))
        with pytest.raises(ValueError, match="ratio must be in"):
            F.mask_yuv_scale(img, -1)
        with pytest.raises(ValueError, match="3 channels"):
            F.mask_yuv_scale(img[:2], 0.5)
        with pytest.raises(ValueError, match="fill must be an integer"):
            F.mask_yuv_scale(img, 0.5, fill=-1)


def test_two_threads_match_serial():
    imgs = [image((3, 128, 160), seed=s) for s in range(6)]
    batch = image((4, 3, 64, 64))

    def run():
        return ([F.mask_yuv_scale(im, 0.25, seed=i) for i, im in enumerate(imgs)]
                + [F.rgb_to_yuv(im) for im in imgs] + [F.scale(im) for im in imgs] + [F.yuv_scale(batch)])

    serial = run()
    results = [None, None]

    def work(k):
        results[k] = [run() for _ in range(5)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for per_thread in results:
        for rep in per_thread:
            assert all(torch.equal(a, b) for a, b in zip(rep, serial))


# --------------------------------------------------------------- ISA variants (C)

from fastprep._kernels import isa as kernel_isa  # noqa: E402


def _all_colour_outputs():
    outs = []
    for k, shape in enumerate(SHAPES + [(3, 61, 257)]):
        for dtype in (torch.uint8, torch.float32):
            img = image(shape, dtype, seed=k)
            outs += [F.rgb_to_yuv(img), F.yuv_scale(img), F.scale(img),
                     F.mask_yuv_scale(img, 0.3, seed=k, fill=7),
                     F.scale_normalize(img, IMAGENET_MEAN, IMAGENET_STD)]
    outs.append(F.rgb_to_yuv(ALL_PIXELS))
    return outs


class TestIsaVariants:
    def test_every_supported_variant_is_bit_identical(self):
        supported = kernel_isa.supported_isas()
        assert supported[0] == "baseline"
        try:
            results = {}
            for isa in supported:
                assert kernel_isa.set_isa(isa) == isa and kernel_isa.active_isa() == isa
                results[isa] = _all_colour_outputs()
        finally:
            kernel_isa.set_isa("auto")
        base = results["baseline"]
        # the baseline against the formulas (the per-op tests above check the default variant)
        torch.testing.assert_close(base[-1], ref_yuv(ALL_PIXELS), rtol=0, atol=1e-4)
        for isa, outs in results.items():
            assert len(outs) == len(base)
            for a, b in zip(outs, base):
                assert torch.equal(a, b), isa

    def test_auto_is_the_best_supported(self):
        assert kernel_isa.set_isa("auto") == kernel_isa.supported_isas()[-1] == kernel_isa.active_isa()

    def test_unsupported_request_falls_back(self):
        try:
            for isa in kernel_isa.ISA_LEVELS:
                got = kernel_isa.set_isa(isa)
                assert got in kernel_isa.supported_isas()
                assert kernel_isa.ISA_LEVELS.index(got) <= kernel_isa.ISA_LEVELS.index(isa)
        finally:
            kernel_isa.set_isa("auto")

    def test_bad_name(self):
        with pytest.raises(ValueError, match="FASTPREP_ISA must be one of auto, baseline, avx2, avx512; got 'sse9'"):
            kernel_isa.set_isa("sse9")

    @pytest.mark.parametrize("value, warns", [("baseline", False), ("AVX2", False), ("nonsense", True)])
    def test_environment_override(self, tmp_path, value, warns):
        code = ("import warnings, json, sys\n"
                "with warnings.catch_warnings(record=True) as w:\n"
                "    warnings.simplefilter('always')\n"
                "    from fastprep._kernels import isa\n"
                "json.dump([isa.active_isa(), [str(x.message) for x in w]], sys.stdout)\n")
        env = dict(os.environ, FASTPREP_ISA=value,
                   PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
        proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        active, messages = json.loads(proc.stdout)
        supported = kernel_isa.supported_isas()
        if warns:
            assert active == supported[-1]
            assert len(messages) == 1 and "FASTPREP_ISA must be one of" in messages[0]
        else:
            want = value.lower()
            assert active == (want if want in supported else supported[-1]) and not messages


# -------------------------------------------------------------------------- threads


class TestThreads:
    def test_default_is_one_thread_per_sample(self):
        prev = torch.get_num_threads()
        try:
            torch.set_num_threads(8)
            assert F.kernel_threads(3 * 256 * 256) == 1
            assert F.kernel_threads(3 * 512 * 512) == 1
            assert F.kernel_threads(0) == 1
            big = 64 * 3 * 256 * 256
            assert F.kernel_threads(big) == min(8, len(os.sched_getaffinity(0)), big // F.PARALLEL_MIN_ELEMENTS)
            torch.set_num_threads(1)  # as in a DataLoader worker
            assert F.kernel_threads(big) == 1
        finally:
            torch.set_num_threads(prev)

    def test_explicit_and_errors(self):
        assert F.kernel_threads(10, 3) == 3
        with pytest.raises(ValueError, match="positive int, got 0"):
            F.kernel_threads(10, 0)
        with pytest.raises(TypeError, match="positive int, got 2.0"):
            F.kernel_threads(10, 2.0)
        with pytest.raises(TypeError, match="positive int, got True"):
            F.yuv_scale(image((3, 4, 4)), num_threads=True)

    @pytest.mark.parametrize("shape", [(4, 3, 256, 256), (3, 700, 1100), (2, 3, 1, 300000)])
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_threaded_equals_one_thread(self, shape, dtype):
        img = image(shape, dtype)
        for fn in (F.rgb_to_yuv, F.yuv_scale, F.scale, lambda x, **kw: F.mask_yuv_scale(x, 0.25, seed=3, **kw)):
            one = fn(img, num_threads=1)
            for t in (2, 3, 5):
                assert torch.equal(fn(img, num_threads=t), one)
        torch.testing.assert_close(F.rgb_to_yuv(img, num_threads=3), ref_yuv(img), rtol=0, atol=1e-4)

    def test_threaded_after_fork(self):
        import multiprocessing as mp

        F.yuv_scale(image((4, 3, 256, 256)), num_threads=2)  # the parent's helper threads exist
        if "fork" not in mp.get_all_start_methods():
            pytest.skip("no fork")
        ctx = mp.get_context("fork")
        with ctx.Pool(1) as pool:
            assert pool.apply(_threaded_in_child) is True


def _threaded_in_child():
    # as in a DataLoader worker: torch's own OpenMP is not usable after a fork, fastprep's
    # helper threads are
    torch.set_num_threads(1)
    img = image((4, 3, 256, 256)).numpy()
    return bool(np.array_equal(F.yuv_scale(img, num_threads=2), F.yuv_scale(img, num_threads=1)))


class TestOut:
    @pytest.mark.parametrize("as_numpy", [False, True])
    def test_writes_into_out(self, as_numpy):
        img = image((2, 3, 17, 33))
        if as_numpy:
            img = img.numpy()
        normalize = lambda x, out=None: F.scale_normalize(x, IMAGENET_MEAN, IMAGENET_STD, out=out)  # noqa: E731
        for fn in (F.rgb_to_yuv, F.yuv_scale, F.scale, normalize):
            out = np.full(img.shape, np.nan, np.float32)
            out = out if as_numpy else torch.from_numpy(out)
            got = fn(img, out=out)
            assert got is out
            np.testing.assert_array_equal(np.asarray(out), np.asarray(fn(img)))

    def test_errors(self):
        img = image((3, 4, 5))
        with pytest.raises(ValueError, match=r"img's shape \(3, 4, 5\), got \(3, 4, 6\)"):
            F.yuv_scale(img, out=torch.empty(3, 4, 6))
        with pytest.raises(TypeError, match="out must be float32, got torch.float64"):
            F.scale(img, out=torch.empty(3, 4, 5, dtype=torch.float64))
        with pytest.raises(TypeError, match="out must be a torch.Tensor like img, got ndarray"):
            F.rgb_to_yuv(img, out=np.empty((3, 4, 5), np.float32))
        with pytest.raises(ValueError, match="C-contiguous"):
            F.yuv_scale(img, out=torch.empty(3, 5, 4).transpose(1, 2))
        x = torch.zeros(3, 4, 5)
        with pytest.raises(ValueError, match="must not overlap"):
            F.scale(x, out=x)
        with pytest.raises(ValueError, match="dtype must be None or float32 with out"):
            F.yuv_scale(img, torch.float16, out=torch.empty(3, 4, 5))
