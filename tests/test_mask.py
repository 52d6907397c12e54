"""Random mask kernels (Numba): random_mask, dilate4, apply_mask, apply_random_mask.

References are plain numpy/scipy/torch written here; the kernels are also run with
NUMBA_DISABLE_JIT=1 (interpreted) in a subprocess and must agree with the compiled ones.
"""

import json
import os
import platform
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from scipy.signal import convolve2d

import fastprep.functional as F

CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
SHAPES = [(1, 1), (1, 9), (1, 64), (1, 130), (9, 1), (70, 1), (2, 2), (3, 3), (7, 63),
          (7, 64), (7, 65), (33, 128), (31, 129), (64, 200), (256, 256)]


def ref_dilate(mask):
    return convolve2d(np.asarray(mask, dtype=np.int32), CROSS, mode="same") > 0


def ref_apply(img, mask, fill):
    out = img.clone()
    out[..., torch.as_tensor(mask, dtype=torch.bool)] = fill
    return out


def resolved(ratio):
    return round(ratio * 2**16) / 2**16


class TestDilate4:
    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("density", [0.02, 0.3, 0.7])
    def test_matches_convolve2d(self, shape, density):
        rng = np.random.default_rng(hash((shape, density)) % 2**32)
        mask = rng.random(shape) < density
        got = F.dilate4(mask)
        assert got.dtype == np.bool_ and got.shape == shape
        np.testing.assert_array_equal(got, ref_dilate(mask))

    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("value", [False, True])
    def test_constant(self, shape, value):
        mask = torch.full(shape, value, dtype=torch.bool)
        got = F.dilate4(mask)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.bool
        assert torch.equal(got, mask)

    def test_single_pixel_is_cross(self):
        mask = np.zeros((5, 5), np.bool_)
        mask[2, 2] = True
        np.testing.assert_array_equal(F.dilate4(mask)[1:4, 1:4], CROSS.astype(bool))
        assert F.dilate4(mask).sum() == 5

    def test_uint8_nonzero_is_true(self):
        mask = np.zeros((4, 6), np.uint8)
        mask[1, 1] = 7
        got = F.dilate4(mask)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, ref_dilate(mask != 0).astype(np.uint8))

    def test_leading_dims_and_strides(self):
        rng = np.random.default_rng(1)
        masks = torch.from_numpy(rng.random((2, 3, 40, 30)) < 0.2)
        t = masks.transpose(-1, -2)  # non-contiguous
        got = F.dilate4(t)
        assert got.shape == t.shape
        for i in range(2):
            for j in range(3):
                np.testing.assert_array_equal(got[i, j].numpy(), ref_dilate(t[i, j].numpy()))

    @pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0), (3, 0, 4)])
    def test_zero_sized(self, shape):
        got = F.dilate4(np.zeros(shape, np.bool_))
        assert got.shape == shape

    def test_errors(self):
        with pytest.raises(ValueError, match=r"\(\*, H, W\).*\(5,\)"):
            F.dilate4(np.zeros(5, np.bool_))
        with pytest.raises(TypeError, match="float32"):
            F.dilate4(np.zeros((3, 3), np.float32))
        with pytest.raises(TypeError, match="torch.int64"):
            F.dilate4(torch.zeros(3, 3, dtype=torch.int64))
        with pytest.raises(TypeError, match="list"):
            F.dilate4([[True]])


class TestRandomMask:
    @pytest.mark.parametrize("ratio", [0.05, 0.25, 0.3, 0.5, 0.9])
    def test_density_within_4_sigma(self, ratio):
        gen = torch.Generator().manual_seed(123)
        n_draws, h, w = 16, 200, 333
        total = sum(int(F.random_mask(h, w, ratio, gen).sum()) for _ in range(n_draws))
        n = n_draws * h * w
        p = resolved(ratio)
        sigma = (p * (1 - p) / n) ** 0.5
        assert abs(total / n - p) < 4 * sigma
        assert abs(p - ratio) <= F.MASK_PROBABILITY_RESOLUTION / 2

    def test_columns_and_rows_unbiased(self):
        # every bit position of the packed words and every row carries the same density
        m = F.random_mask(4000, 130, 0.25, seed=7).numpy()
        sigma = (0.25 * 0.75 / m.shape[0]) ** 0.5
        assert np.abs(m.mean(axis=0) - 0.25).max() < 4.5 * sigma
        sigma = (0.25 * 0.75 / m.shape[1]) ** 0.5
        assert np.abs(m.mean(axis=1) - 0.25).max() < 5 * sigma
        # neighbouring pixels are independent: P(a and b) ~ p^2
        both = (m[:, 1:] & m[:, :-1]).mean()
        assert abs(both - 0.0625) < 0.003

    @pytest.mark.parametrize("shape", SHAPES)
    def test_ratio_0_and_1_exact(self, shape):
        assert not F.random_mask(*shape, 0.0).any()
        assert F.random_mask(*shape, 1.0).all()
        assert F.random_mask(*shape, 1).all()

    def test_seeds(self):
        a = F.random_mask(64, 80, 0.25, seed=1)
        assert torch.equal(a, F.random_mask(64, 80, 0.25, seed=1))
        assert not torch.equal(a, F.random_mask(64, 80, 0.25, seed=2))
        assert a.dtype == torch.bool and a.shape == (64, 80)

    def test_torch_rng_reproducible_and_isolated(self):
        torch.manual_seed(0)
        a = F.random_mask(50, 70, 0.3)
        b = F.random_mask(50, 70, 0.3)
        assert not torch.equal(a, b)
        np.random.seed(5)  # numpy's global state plays no part
        torch.manual_seed(0)
        assert torch.equal(F.random_mask(50, 70, 0.3), a)
        g = torch.Generator().manual_seed(9)
        c = F.random_mask(50, 70, 0.3, generator=g)
        assert torch.equal(c, F.random_mask(50, 70, 0.3, generator=torch.Generator().manual_seed(9)))

    def test_consumes_one_draw_of_torch_rng(self):
        g1 = torch.Generator().manual_seed(3)
        F.random_mask(10, 10, 0.5, g1)
        g2 = torch.Generator().manual_seed(3)
        torch.randint(0, 2**63 - 1, (), generator=g2)
        assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))

    @pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)])
    def test_zero_sized(self, shape):
        assert F.random_mask(*shape, 0.5).shape == shape

    @pytest.mark.parametrize("ratio", [-0.1, 1.0001, float("nan"), float("inf")])
    def test_bad_ratio_value(self, ratio):
        with pytest.raises(ValueError, match=r"ratio must be in \[0, 1\], got"):
            F.random_mask(4, 4, ratio)

    @pytest.mark.parametrize("ratio", ["0.5", None, True, 1j])
    def test_bad_ratio_type(self, ratio):
        with pytest.raises(TypeError, match="ratio must be a real number"):
            F.random_mask(4, 4, ratio)

    def test_bad_sizes_and_generator(self):
        with pytest.raises(ValueError, match="height must be >= 0, got -1"):
            F.random_mask(-1, 4, 0.5)
        with pytest.raises(TypeError, match="width must be an int, got 4.0"):
            F.random_mask(4, 4.0, 0.5)
        with pytest.raises(TypeError, match="generator must be a torch.Generator"):
            F.random_mask(4, 4, 0.5, generator=np.random.default_rng())
        with pytest.raises(TypeError, match="seed must be an int"):
            F.random_mask(4, 4, 0.5, seed=1.5)


def _image(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    return img if dtype == torch.uint8 else img.to(dtype) + 0.25


class TestApplyMask:
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    @pytest.mark.parametrize("shape", [(3, 17, 70), (1, 5, 5), (4, 2, 9, 130), (2, 1, 1, 1)])
    @pytest.mark.parametrize("fill", [0, 255, 7])
    def test_matches_reference(self, dtype, shape, fill):
        img = _image(shape, dtype)
        mask = torch.rand(shape[-2:], generator=torch.Generator().manual_seed(1)) < 0.4
        got = F.apply_mask(img, mask, fill)
        assert got.dtype == dtype and got.shape == img.shape
        assert torch.equal(got, ref_apply(img, mask, fill))

    def test_numpy_in_numpy_out_and_input_untouched(self):
        img = _image((3, 8, 9), torch.uint8).numpy()
        before = img.copy()
        mask = np.eye(8, 9, dtype=np.uint8)
        got = F.apply_mask(img, mask, 3)
        assert isinstance(got, np.ndarray) and got.dtype == np.uint8
        np.testing.assert_array_equal(got, ref_apply(torch.from_numpy(before), mask.astype(bool), 3).numpy())
        np.testing.assert_array_equal(img, before)

    def test_non_contiguous(self):
        base = _image((2, 3, 20, 40), torch.float32)
        img = base.to(memory_format=torch.channels_last)[:, :, ::2, 1::3]
        mask = torch.rand(40, 20) < 0.5
        mask = mask.t()[::2, 1::3]
        assert not img.is_contiguous() and not mask.is_contiguous()
        assert torch.equal(F.apply_mask(img, mask, 1.5), ref_apply(img, mask, 1.5))

    def test_errors(self):
        img = _image((3, 4, 5), torch.uint8)
        with pytest.raises(ValueError, match=r"mask must have shape \(H, W\) = \(4, 5\), got shape \(5, 4\)"):
            F.apply_mask(img, torch.zeros(5, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"fill must be an integer in \[0, 255\].*got 256"):
            F.apply_mask(img, torch.zeros(4, 5, dtype=torch.bool), 256)
        with pytest.raises(ValueError, match=r"got 1.5"):
            F.apply_mask(img, torch.zeros(4, 5, dtype=torch.bool), 1.5)
        with pytest.raises(ValueError, match="fill must be finite"):
            F.apply_mask(img.float(), torch.zeros(4, 5, dtype=torch.bool), float("nan"))
        with pytest.raises(TypeError, match="fill must be a real number"):
            F.apply_mask(img, torch.zeros(4, 5, dtype=torch.bool), "0")
        with pytest.raises(ValueError, match=r"\(C, H, W\) or \(N, C, H, W\), got shape \(4, 5\)"):
            F.apply_mask(img[0], torch.zeros(4, 5, dtype=torch.bool))
        with pytest.raises(TypeError, match="uint8 or float32, got torch.int16"):
            F.apply_mask(img.short(), torch.zeros(4, 5, dtype=torch.bool))
        with pytest.raises(TypeError, match="uint8 or float32, got float64"):
            F.apply_mask(img.double().numpy(), np.zeros((4, 5), bool))

    @pytest.mark.parametrize("shape", [(3, 0, 5), (3, 4, 0), (0, 3, 4, 5), (0, 4, 5)])
    def test_zero_sized(self, shape):
        img = torch.zeros(shape, dtype=torch.uint8)
        assert F.apply_mask(img, torch.zeros(shape[-2:], dtype=torch.bool)).shape == shape


class TestApplyRandomMask:
    @pytest.mark.parametrize("shape", [(3, 256, 256), (3, 1, 1), (1, 1, 70), (3, 70, 1), (2, 3, 31, 129)])
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    @pytest.mark.parametrize("ratio", [0.0, 0.1, 0.25, 1.0])
    def test_equals_reference_for_same_mask(self, shape, dtype, ratio):
        img = _image(shape, dtype)
        got = F.apply_random_mask(img, ratio, fill=0, seed=42)
        mask = F.random_mask(shape[-2], shape[-1], ratio, seed=42)
        assert torch.equal(got, ref_apply(img, ref_dilate(mask.numpy()), 0))
        assert torch.equal(got, F.apply_mask(img, F.dilate4(mask), 0))

    def test_fill_and_numpy(self):
        img = _image((3, 40, 50), torch.uint8).numpy()
        got = F.apply_random_mask(img, 0.1, fill=200, seed=3)
        assert isinstance(got, np.ndarray) and got.dtype == np.uint8
        mask = ref_dilate(F.random_mask(40, 50, 0.1, seed=3).numpy())
        np.testing.assert_array_equal(got, ref_apply(torch.from_numpy(img), mask, 200).numpy())

    def test_dilated_density(self):
        # P(dilated) = 1 - (1 - p)^5 away from the border
        img = torch.ones(1, 512, 512, dtype=torch.uint8)
        out = F.apply_random_mask(img, 0.25, seed=11)[0, 1:-1, 1:-1]
        p = 1 - 0.75**5
        assert abs((out == 0).float().mean().item() - p) < 0.01  # 8-neighbour would be 0.92

    def test_reproducible(self):
        img = _image((3, 32, 32), torch.uint8)
        torch.manual_seed(1)
        a = F.apply_random_mask(img, 0.25)
        torch.manual_seed(1)
        assert torch.equal(a, F.apply_random_mask(img, 0.25))
        assert not torch.equal(a, F.apply_random_mask(img, 0.25))

    def test_errors(self):
        img = _image((3, 4, 5), torch.uint8)
        with pytest.raises(ValueError, match="ratio must be in"):
            F.apply_random_mask(img, 2.0)
        with pytest.raises(TypeError, match="uint8 or float32, got torch.float64"):
            F.apply_random_mask(img.double(), 0.5)
        with pytest.raises(ValueError, match="got shape"):
            F.apply_random_mask(img[None, None], 0.5)


class TestConcurrency:
    def test_two_threads_match_serial(self):
        img = _image((3, 256, 256), torch.uint8)
        seeds = list(range(40))
        serial = [F.apply_random_mask(img, 0.25, seed=s) for s in seeds]
        serial_masks = [F.random_mask(100, 90, 0.3, seed=s) for s in seeds]
        results = {}

        def work(k):
            results[k] = [(F.apply_random_mask(img, 0.25, seed=s), F.random_mask(100, 90, 0.3, seed=s))
                          for s in seeds]

        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(2):
            for s, (a, m) in enumerate(results[k]):
                assert torch.equal(a, serial[s]) and torch.equal(m, serial_masks[s])


_INTERPRETED = r"""
import json, sys
import numpy as np
import numba
assert numba.config.DISABLE_JIT
import fastprep.functional as F
out = {}
for (h, w, ratio, seed) in [(1, 1, 0.5, 1), (5, 70, 0.25, 2), (9, 3, 0.3, 3), (4, 64, 1.0, 4), (6, 6, 0.0, 5)]:
    img = (np.arange(3 * h * w, dtype=np.uint8) % 251).reshape(3, h, w)
    m = F.random_mask(h, w, ratio, seed=seed)
    out[f"{h},{w},{ratio},{seed}"] = {
        "mask": m.numpy().astype(int).tolist(),
        "dilated": F.dilate4(m.numpy()).astype(int).tolist(),
        "masked": F.apply_random_mask(img, ratio, fill=9, seed=seed).astype(int).tolist(),
        "fused": F.mask_yuv_scale(img, ratio, seed=seed).tolist(),
    }
json.dump(out, sys.stdout)
"""


def test_numba_kernels_interpreted_match_compiled(tmp_path):
    # cwd=tmp_path: `python -c` puts the cwd first on sys.path, which must not shadow the
    # fastprep under test (e.g. an unbuilt source checkout)
    env = dict(os.environ, NUMBA_DISABLE_JIT="1",
               PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-W", "error", "-c", _INTERPRETED], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    interpreted = json.loads(proc.stdout)
    for key, got in interpreted.items():
        h, w, ratio, seed = key.split(",")
        h, w, ratio, seed = int(h), int(w), float(ratio), int(seed)
        img = (np.arange(3 * h * w, dtype=np.uint8) % 251).reshape(3, h, w)
        m = F.random_mask(h, w, ratio, seed=seed).numpy()
        np.testing.assert_array_equal(np.array(got["mask"], dtype=bool).reshape(h, w), m)
        np.testing.assert_array_equal(np.array(got["dilated"], dtype=bool).reshape(h, w), ref_dilate(m))
        np.testing.assert_array_equal(np.array(got["masked"]).reshape(3, h, w),
                                      F.apply_random_mask(img, ratio, fill=9, seed=seed))
        np.testing.assert_array_equal(np.array(got["fused"], dtype=np.float32).reshape(3, h, w),
                                      F.mask_yuv_scale(img, ratio, seed=seed))


class TestPerChannelFill:
    """fill may give one value per channel (e.g. (0, 128, 128): RGB black in YCbCr)."""

    def test_apply_mask_per_channel(self):
        g = torch.Generator().manual_seed(3)
        img = torch.randint(0, 256, (2, 3, 17, 23), dtype=torch.uint8, generator=g)
        mask = torch.rand(17, 23, generator=g) < 0.3
        out = F.apply_mask(img, mask, fill=(0, 128, 255))
        ref = img.clone()
        for c, v in enumerate((0, 128, 255)):
            ref[:, c][:, mask] = v
        assert torch.equal(out, ref)

    def test_apply_random_mask_matches_scalar_fills(self):
        img = torch.randint(0, 256, (3, 40, 50), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
        out = F.apply_random_mask(img, 0.25, fill=(0, 128, 128), seed=99)
        y = F.apply_random_mask(img, 0.25, fill=0, seed=99)
        c = F.apply_random_mask(img, 0.25, fill=128, seed=99)
        assert torch.equal(out[0], y[0]) and torch.equal(out[1:], c[1:])

    def test_float_and_numpy(self):
        img = np.random.default_rng(0).random((3, 8, 9), dtype=np.float32)
        mask = np.zeros((8, 9), bool)
        mask[2, 3] = True
        out = F.apply_mask(img, mask, fill=[1.5, -2.0, 7.0])
        assert isinstance(out, np.ndarray) and list(out[:, 2, 3]) == [1.5, -2.0, 7.0]
        assert np.array_equal(np.delete(out.reshape(3, -1), 2 * 9 + 3, axis=1),
                              np.delete(img.reshape(3, -1), 2 * 9 + 3, axis=1))

    def test_errors(self):
        img = torch.zeros(3, 4, 4, dtype=torch.uint8)
        with pytest.raises(ValueError, match="one value per channel"):
            F.apply_mask(img, torch.ones(4, 4, dtype=torch.bool), fill=(0, 128))
        with pytest.raises(ValueError, match=r"\[0, 255\]"):
            F.apply_mask(img, torch.ones(4, 4, dtype=torch.bool), fill=(0, 128, 300))

    def test_transform_and_compose(self):
        from fastprep import transforms as T

        t = T.RandomMask(0.5, fill=(0, 128, 128))
        img = torch.full((3, 16, 16), 77, dtype=torch.uint8)
        torch.manual_seed(0)
        out = t(img)
        masked = out[0] == 0
        assert masked.any() and bool((out[1:, masked] == 128).all()) and bool((out[:, ~masked] == 77).all())
        pipe = T.Compose([T.RandomMask(0.5, fill=(0, 128, 128)), T.ConvertColor(), T.Scale()])
        assert not any(isinstance(x, T.MaskYUVScale) for x in pipe.fused_transforms)
        with pytest.raises(TypeError, match="scalar fill"):
            T.MaskYUVScale(0.5, fill=(0, 128, 128))


def test_numpy_image_inside_a_structure_is_masked():
    from fastprep import transforms as T

    img = np.full((3, 8, 8), 9, np.uint8)
    out, label = T.RandomMask(1.0)((img, 1))
    assert label == 1 and isinstance(out, np.ndarray) and not out.any()


def test_zero_dim_fill_is_a_scalar():
    img = torch.full((3, 4, 4), 9, dtype=torch.uint8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    assert bool((F.apply_mask(img, mask, fill=torch.tensor(3)) == 3).all())
    assert bool((F.apply_mask(img, mask, fill=np.array(5)) == 5).all())


# ------------------------------------------------------------ AVX2 target (emulated)

# An AVX2-only x86 CPU (e.g. AMD Zen 3), emulated on any x86 host. NUMBA_CPU_NAME alone
# is not enough: Numba then still passes the host's feature list (with AVX-512) to LLVM.
AVX2_ENV = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx2,+fma"}
_X86 = platform.machine().lower() in ("x86_64", "amd64")

# (channels, height, width, ratio, seed, dtype)
_AVX2_CASES = [(3, 1, 1, 0.5, 1, "u8"), (3, 7, 65, 0.25, 2, "f32"), (3, 64, 200, 0.25, 3, "u8"),
               (4, 33, 129, 0.7, 4, "f32"), (3, 256, 256, 0.25, 5, "u8"), (1, 9, 1, 0.3, 6, "u8")]
_AVX2_RUN = r"""
import json, re, sys
import numpy as np
import fastprep.functional as F
from fastprep._kernels import _mask as K
out = {}
for k, (c, h, w, ratio, seed, kind) in enumerate(CASES):
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
    img = img if kind == "u8" else (img + rng.random((c, h, w))).astype(np.float32)
    fill = tuple(range(10, 10 + 7 * c, 7))
    m = F.random_mask(h, w, ratio, seed=seed).numpy()
    out[f"img{k}"] = img
    out[f"mask{k}"] = m
    out[f"dilated{k}"] = F.dilate4(m)
    out[f"applied{k}"] = F.apply_mask(img, m, fill=fill)
    out[f"random{k}"] = F.apply_random_mask(img, ratio, fill=fill, seed=seed)
np.savez(sys.argv[1], **out)
report = {}
for name in ("apply_mask", "dilate4"):
    for sig, asm in getattr(K, name).inspect_asm().items():
        report[f"{name}{sig}"] = {"zmm": len(re.findall(r"zmm", asm)),
                                  "opmask": len(re.findall(r"\{%k[1-7]\}", asm)),
                                  "ymm": len(re.findall(r"ymm", asm)),
                                  "blend": len(re.findall(r"vp?blendv", asm))}
json.dump(report, sys.stdout)
""".replace("CASES", repr(_AVX2_CASES))


def _run_numba_child(script, tmp_path, extra_env, *args):
    env = dict(os.environ, **extra_env, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-W", "error", "-c", script, *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.skipif(not _X86, reason="the AVX2 target is an x86 CPU")
def test_kernels_on_avx2_target_match_references(tmp_path):
    """The Numba kernels compiled for an AVX2-only CPU give the reference results, and the
    select in apply_mask compiles to a vector blend (no AVX-512 registers, no mask loads)."""
    report = _run_numba_child(_AVX2_RUN, tmp_path, AVX2_ENV, str(tmp_path / "out.npz"))
    got = np.load(tmp_path / "out.npz")
    for k, (_, h, w, ratio, seed, _) in enumerate(_AVX2_CASES):
        img, m = got[f"img{k}"], got[f"mask{k}"]
        # the random bits do not depend on the target
        np.testing.assert_array_equal(m, F.random_mask(h, w, ratio, seed=seed).numpy())
        fill = tuple(range(10, 10 + 7 * img.shape[0], 7))
        dilated = ref_dilate(m)
        np.testing.assert_array_equal(got[f"dilated{k}"], dilated)
        fill_t = torch.tensor(fill, dtype=torch.from_numpy(img).dtype)[:, None]
        exp_applied = torch.from_numpy(img).clone()
        exp_applied[:, torch.from_numpy(m)] = fill_t
        np.testing.assert_array_equal(got[f"applied{k}"], exp_applied.numpy())
        exp_random = torch.from_numpy(img).clone()
        exp_random[:, torch.from_numpy(dilated)] = fill_t
        np.testing.assert_array_equal(got[f"random{k}"], exp_random.numpy())
    assert report and all(r["zmm"] == 0 and r["opmask"] == 0 for r in report.values()), report
    blends = {name: r["blend"] for name, r in report.items() if name.startswith("apply_mask")}
    assert len(blends) == 2 and all(blends.values()), report  # uint8 and float32 images


_CACHE_RUN = r"""
import json
import torch
import fastprep.functional as F
from fastprep._kernels import _mask as K
F.apply_random_mask(torch.zeros(3, 8, 8, dtype=torch.uint8), 0.5, seed=1)
st = K.random_mask_apply.stats
json.dump({"hits": sum(st.cache_hits.values()), "misses": sum(st.cache_misses.values())}, __import__("sys").stdout)
"""


@pytest.mark.skipif(not _X86, reason="the AVX2 target is an x86 CPU")
def test_numba_cache_is_keyed_by_cpu_target(tmp_path):
    """One on-disk cache shared by two CPU targets keeps one entry per target: neither
    loads the other's machine code, and each reloads its own."""
    avx2, native = AVX2_ENV, {}
    assert _run_numba_child(_CACHE_RUN, tmp_path, avx2) == {"hits": 0, "misses": 1}
    assert _run_numba_child(_CACHE_RUN, tmp_path, native) == {"hits": 0, "misses": 1}
    assert _run_numba_child(_CACHE_RUN, tmp_path, avx2) == {"hits": 1, "misses": 0}
    assert _run_numba_child(_CACHE_RUN, tmp_path, native) == {"hits": 1, "misses": 0}
