"""fastprep.data.NativePipeline / torch.ops.fastprep.decode_batch: the built-in per-sample
pipelines for a whole batch in one native call, bit for bit what the transforms give."""

import sys
import threading
import time
import warnings

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

import fastprep.io as fio
from conftest import make_jpeg
from fastprep import _C
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.data import BatchConvert, default_transform
from fastprep._layout import as_bytes, struct_dtype
from fastprep.data.native import STATUS_ERROR, STATUS_OK, STATUS_WARNING, NativePipeline, Plan, _batch_tables
from fastprep.transforms import (
    DecodeCenterCrop,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    RandomMask,
)


def _tensor(b: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)


# (encoding, height, width): sequential/progressive, every subsampling, gray, CMYK, odd
# sizes, images smaller than the crops, files with restart markers.
IMAGES = [
    ("420", 120, 160), ("444", 97, 131), ("422", 75, 203), ("420-progressive", 140, 90),
    ("gray", 83, 77), ("cmyk", 64, 96), ("440", 66, 100), ("422-progressive", 41, 59),
    ("420", 33, 45), ("444", 17, 150), ("420-restart", 130, 170), ("420-arithmetic", 90, 110),
]
DATAS = [_tensor(make_jpeg(e, h, w, seed=i)) for i, (e, h, w) in enumerate(IMAGES)]
# packed: restart intervals that tile the MCU rows (the restart-interval fast path)
PACKED = [_tensor(fio.transcode_jpeg(make_jpeg(e, h, w, seed=50 + i)))
          for i, (e, h, w) in enumerate([("420", 260, 330), ("444", 200, 310), ("422-progressive", 170, 250)])]


def reference(transform, datas, keys):
    """Per sample: ("ok", image), ("warning", message, image) or ("error", message), by
    running the transform under each key."""
    out = []
    for data, key in zip(datas, keys):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with keyed_default_rng(key):
                    img = transform(data)
            except fio.DecodeError as e:
                out.append(("error", str(e)))
                continue
        found = [str(w.message) for w in caught if issubclass(w.category, fio.DecodeWarning)]
        assert len(found) == len(caught), [str(w.message) for w in caught]
        out.append(("warning", found[0], img) if found else ("ok", img))
    return out


def plans_for(pipe, datas, keys):
    plans = []
    for data, key in zip(datas, keys):
        with keyed_default_rng(key):
            plans.append(pipe.plan(data))
    return plans


def check_batch(transform, datas, *, seed=0, num_threads=2, channels_last=False, expect_errors=False):
    pipe = NativePipeline.from_transform(transform)
    assert pipe is not None
    keys = [sample_key(seed, 0, i) for i in range(len(datas))]
    want = reference(transform, datas, keys)
    plans = plans_for(pipe, datas, keys)
    out = torch.full((len(datas), pipe.channels, *pipe.size), 3, dtype=torch.uint8)
    if channels_last:
        out = out.contiguous(memory_format=torch.channels_last)
    got = pipe.run(datas, plans, out, num_threads=num_threads)
    assert len(got) == len(datas)
    for i, (w, (status, message)) in enumerate(zip(want, got)):
        if w[0] == "error":
            assert (status, message) == (STATUS_ERROR, w[1]), i
            continue
        if w[0] == "warning":
            assert (status, message) == (STATUS_WARNING, w[1]), i
        else:
            assert (status, message) == (STATUS_OK, ""), (i, message)
        img = w[-1]
        assert img.shape == out.shape[1:], i
        assert torch.equal(out[i], img), (i, (out[i].int() - img.int()).abs().max())
    if not expect_errors:
        assert all(w[0] != "error" for w in want)
    return out, got


PIPELINES = {
    "default": lambda: default_transform(64, 0.25),
    "default-no-mask": lambda: default_transform((40, 72), 0),
    "default-mask-1": lambda: default_transform(48, 1.0),
    "crop-padding-ycbcr": lambda: DecodeRandomCrop(48, padding=5, pad_if_needed=True, fill=7, mode="YCbCr"),
    "crop-gray": lambda: DecodeRandomCrop((30, 60), padding=(2, 9), pad_if_needed=True, mode="GRAY"),
    "center-crop": lambda: DecodeCenterCrop(64),
    "center-crop-ycbcr-big": lambda: DecodeCenterCrop((150, 170), mode="YCbCr"),
    "rrc-flip": lambda: DecodeRandomResizedCrop(56, flip_p=0.5),
    "rrc-full-scale": lambda: DecodeRandomResizedCrop((40, 64), dct_scaling=False, flip_p=0.5),
    "rrc-plain-gray": lambda: DecodeRandomResizedCrop(24, scale=(0.02, 0.5), antialias=False, mode="GRAY"),
    "resize-center-crop": lambda: DecodeResizeCenterCrop(72, 64),
    "resize-center-crop-pad-ycbcr": lambda: DecodeResizeCenterCrop((60, 50), (80, 64), mode="YCbCr"),
    "resize-center-crop-full": lambda: DecodeResizeCenterCrop(40, 32, dct_scaling=False),
    "resize": lambda: DecodeResize((50, 70)),
    "resize-plain": lambda: DecodeResize((90, 33), antialias=False, dct_scaling=False),
    "compose-rrc-mask": lambda: v2.Compose([DecodeRandomResizedCrop(48, flip_p=0.5),
                                            RandomMask(0.3, fill=(1, 2, 3))]),
    "compose-center-crop": lambda: v2.Compose([DecodeCenterCrop(20)]),
}


class TestMatchesTransforms:
    @pytest.mark.parametrize("name", sorted(PIPELINES))
    def test_every_pipeline(self, name):
        transform = PIPELINES[name]()
        # CMYK files cannot be decoded to YCbCr: those samples must fail the same way
        check_batch(transform, DATAS + PACKED, seed=len(name), expect_errors="ycbcr" in name)

    @pytest.mark.parametrize("name", ["default", "rrc-flip", "resize-center-crop", "crop-gray"])
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_seeds_threads_layouts(self, name, seed):
        transform = PIPELINES[name]()
        for num_threads, channels_last in ((1, False), (3, True), (8, False)):
            check_batch(transform, DATAS, seed=seed, num_threads=num_threads, channels_last=channels_last)

    def test_restart_interval_path_is_taken(self):
        transform = DecodeRandomResizedCrop(32)
        before = _C.restart_stats()
        # one thread: every sample runs on this thread, whose counters we read
        check_batch(transform, PACKED[:2] * 3, seed=5, num_threads=1)
        after = _C.restart_stats()
        assert after[0] - before[0] >= 4 and after[1] == before[1]

    @pytest.mark.parametrize("width", [1, 63, 64, 65, 130])
    def test_mask_bits_across_word_edges(self, width):
        big = [_tensor(make_jpeg("444", 200, 200, seed=s)) for s in range(3)]
        for ratio in (0.0, 1e-5, 0.25, 0.3, 0.75, 1.0):
            check_batch(v2.Compose([DecodeRandomCrop((9, width)), RandomMask(ratio, fill=200)]), big * 2,
                        seed=int(ratio * 100))

    def test_plan_draws_what_the_transform_draws(self):
        # the generator is left where the transform leaves it
        for name in ("default", "rrc-flip", "compose-rrc-mask"):
            transform = PIPELINES[name]()
            pipe = NativePipeline.from_transform(transform)
            torch.manual_seed(7)
            transform(DATAS[0])
            after_transform = torch.randint(0, 2**62, (1,)).item()
            torch.manual_seed(7)
            pipe.plan(DATAS[0])
            assert torch.randint(0, 2**62, (1,)).item() == after_transform, name


class TestKeyedPlans:
    """``plan(data, key=k)`` draws on a private generator what the transform draws under
    ``keyed_default_rng(k)``, without touching torch's default generator."""

    @pytest.mark.parametrize("name", sorted(PIPELINES))
    def test_same_plans_as_the_default_generator(self, name):
        pipe = NativePipeline.from_transform(PIPELINES[name]())
        datas = [d for d in DATAS + PACKED if fio.jpeg_info(d).color_space != "CMYK"]
        torch.manual_seed(11)
        before = torch.default_generator.get_state()
        for i, data in enumerate(datas * 12):
            key = sample_key(len(name), 3, i)
            with keyed_default_rng(key):
                want = pipe.plan(data)
            assert pipe.plan(data, key=key) == want, (name, i)
        assert torch.equal(torch.default_generator.get_state(), before)

    @pytest.mark.parametrize("size,scale,ratio,flip_p", [
        ((224, 224), (0.08, 1.0), (3 / 4, 4 / 3), 0.5),
        ((40, 64), (0.9, 1.0), (3.0, 4.0), 0.1),   # narrow ratios: the centred fallback window
        ((32, 32), (0.5, 0.5), (1.0, 1.0), 0.3),
        ((16, 48), (1.0, 1.0), (0.2, 0.25), 1.0),
    ])
    def test_resized_crop_draws_over_many_keys(self, size, scale, ratio, flip_p):
        transform = DecodeRandomResizedCrop(size, scale=scale, ratio=ratio, flip_p=flip_p)
        pipe = NativePipeline.from_transform(transform)
        data = DATAS[0]
        flips = 0
        for i in range(300):
            key = sample_key(5, 0, i) if i % 2 else i  # small keys too
            with keyed_default_rng(key):
                want = pipe.plan(data)
            got = pipe.plan(data, key=key)
            assert got == want, i
            flips += int(got.record["hflip"])
        assert 0 < flips or flip_p < 0.5

    def test_keyed_plan_raises_like_the_transform(self):
        pipe = NativePipeline.from_transform(DecodeRandomCrop(100))
        with pytest.raises(ValueError, match="larger than input image size"):
            pipe.plan(_tensor(make_jpeg("420", 50, 60)), key=3)
        with pytest.raises(fio.DecodeError, match="not a JPEG"):
            pipe.plan(_tensor(b"\x89PNG\r\n\x1a\n" + bytes(100)), key=3)

    def test_keyed_plans_in_threads(self):
        pipe = NativePipeline.from_transform(PIPELINES["compose-rrc-mask"]())
        keys = [sample_key(1, 0, i) for i in range(64)]
        want = []
        for i, key in enumerate(keys):
            with keyed_default_rng(key):
                want.append(pipe.plan(DATAS[i % 3]))
        got = [None] * len(keys)

        def work(start):
            for i in range(start, len(keys), 4):
                got[i] = pipe.plan(DATAS[i % 3], key=keys[i])

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == want


class TestStatuses:
    def setup_method(self):
        self.good = _tensor(make_jpeg("420", 120, 160, seed=3))
        self.progressive = _tensor(make_jpeg("420-progressive", 120, 160, seed=4))

    def _warning_flip(self):
        from test_decode_errors import warning_flip
        return _tensor(warning_flip(bytes(self.good.numpy())))

    def test_bad_samples_leave_the_rest_intact(self):
        transform = default_transform((120, 160), 0.25)  # the whole image: the corrupt bits are read
        pipe = NativePipeline.from_transform(transform)
        good, prog = self.good, self.progressive
        keys = [sample_key(9, 0, i) for i in range(8)]
        plans = plans_for(pipe, [good, good, prog, good, good, good, prog, good], keys)
        corrupt = self._warning_flip()
        raw = bytes(good.numpy())
        datas = [good, _tensor(raw[:len(raw) // 3]), _tensor(bytes(prog.numpy())[:2000]), _tensor(b""),
                 _tensor(b"\x00\x01garbage"), corrupt, prog, good]
        out = torch.zeros((8, 3, 120, 160), dtype=torch.uint8)
        got = pipe.run(datas, plans, out, num_threads=3)
        # errors carry DecodeError's message; a truncated window may still decode ("ok")
        for i in (1, 2, 3, 4):
            assert got[i][0] == STATUS_ERROR, (i, got[i])
            with pytest.raises(fio.DecodeError) as e, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fio.decode_jpeg(datas[i])
            if i != 1:
                assert got[i][1] == str(e.value), i
        assert got[3][1] == "not a JPEG: the data is empty"
        assert "truncated" in got[1][1]
        assert got[5][0] == STATUS_WARNING and "Corrupt JPEG data" in got[5][1]
        # the good samples (same plans, same data) are exact
        want = reference(transform, [good, prog, good], [keys[0], keys[6], keys[7]])
        for i, w in zip((0, 6, 7), want):
            assert got[i] == (STATUS_OK, "") and torch.equal(out[i], w[1]), i
        # the corrupt-but-decodable sample equals the transform's output, warning and all
        (w,) = reference(transform, [corrupt], [keys[5]])
        assert w[0] == "warning" and got[5][1] == w[1] and torch.equal(out[5], w[2])

    def test_strict_turns_warnings_into_errors(self):
        transform = DecodeCenterCrop((120, 160), strict=True)
        corrupt = self._warning_flip()
        out, got = check_batch(transform, [self.good, corrupt, self.good], expect_errors=True)
        assert got[1][0] == STATUS_ERROR and "strict" in got[1][1]

    def test_max_pixels_and_unsupported_mode(self):
        transform = DecodeRandomResizedCrop(16, max_pixels=100 * 100)
        small = _tensor(make_jpeg("420", 50, 60))
        out, got = check_batch(transform, [small, self.good, small], expect_errors=True)
        assert [s for s, _ in got] == [STATUS_OK, STATUS_ERROR, STATUS_OK] and "max_pixels" in got[1][1]
        cmyk = _tensor(make_jpeg("cmyk", 50, 60))
        out, got = check_batch(DecodeCenterCrop(16, mode="YCbCr"), [small, cmyk], expect_errors=True)
        assert got[1][0] == STATUS_ERROR and "CMYK" in got[1][1]

    def test_plan_raises_like_the_transform(self):
        pipe = NativePipeline.from_transform(DecodeRandomCrop(100))
        with pytest.raises(ValueError, match="larger than input image size"):
            pipe.plan(_tensor(make_jpeg("420", 50, 60)))
        with pytest.raises(fio.DecodeError, match="not a JPEG"):
            pipe.plan(_tensor(b"\x89PNG\r\n\x1a\n" + bytes(100)))
        with pytest.raises(fio.DecodeError, match="empty"):
            pipe.plan(_tensor(b""))

    def test_all_padding_still_checks_the_file(self):
        # a window entirely in the padding decodes one pixel, as the transform does
        transform = DecodeRandomCrop(8, padding=40)
        bad = _tensor(bytes(self.good.numpy())[:700])
        keys = [sample_key(0, 0, i) for i in range(40)]
        want = reference(transform, [bad] * 40, keys)
        pipe = NativePipeline.from_transform(transform)
        out = torch.empty((40, 3, 8, 8), dtype=torch.uint8)
        got = pipe.run([bad] * 40, plans_for(pipe, [self.good] * 40, keys), out)
        assert [g[0] for g in got] == [STATUS_ERROR] * 40
        assert {w[0] for w in want} == {"error"}


class TestArguments:
    def setup_method(self):
        self.pipe = NativePipeline.from_transform(default_transform(32, 0.25))
        self.datas = DATAS[:3]
        torch.manual_seed(0)
        self.plans = [self.pipe.plan(d) for d in self.datas]
        self.out = torch.empty((3, 3, 32, 32), dtype=torch.uint8)

    def test_recognised_transforms(self):
        pipe = NativePipeline.from_transform(DecodeResizeCenterCrop(64, (40, 50), mode="GRAY"))
        assert (pipe.channels, pipe.size) == (1, (40, 50))
        assert NativePipeline.from_transform(DecodeRandomResizedCrop((20, 30))).size == (20, 30)

    def test_unrecognised_transforms(self):
        class MyCrop(DecodeRandomCrop):
            pass

        for t in (lambda d: d, MyCrop(8), DecodeRandomCrop(8, mode="UNCHANGED"), DecodeResize(64),
                  DecodeResize(64, max_size=80), v2.Compose([DecodeCenterCrop(8), RandomMask(0.2, fill=0.5)]),
                  v2.Compose([DecodeCenterCrop(8), RandomMask(0.2, fill=(1, 2))]),
                  v2.Compose([DecodeCenterCrop(8), v2.RandomHorizontalFlip(), RandomMask(0.2)]),
                  v2.Compose([RandomMask(0.2), DecodeCenterCrop(8)]), RandomMask(0.5), None):
            assert NativePipeline.from_transform(t) is None, t

    def test_bad_out(self):
        run = self.pipe.run
        with pytest.raises(TypeError, match="out must be a torch.Tensor"):
            run(self.datas, self.plans, np.zeros((3, 3, 32, 32), np.uint8))
        with pytest.raises(TypeError, match="int32"):
            run(self.datas, self.plans, self.out.int())
        with pytest.raises(ValueError, match=r"shape \(3, 3, 32, 32\)"):
            run(self.datas, self.plans, torch.empty((3, 3, 32, 31), dtype=torch.uint8))
        with pytest.raises(ValueError, match=r"shape \(2, 3, 32, 32\)"):
            run(self.datas[:2], self.plans[:2], self.out)
        with pytest.raises(ValueError, match="contiguous or channels_last"):
            run(self.datas, self.plans, torch.empty((3, 32, 32, 3), dtype=torch.uint8).transpose(1, 3))

    def test_bad_datas_plans_threads(self):
        run = self.pipe.run
        with pytest.raises(ValueError, match="same length"):
            run(self.datas, self.plans[:2], self.out)
        with pytest.raises(TypeError, match=r"datas\[1\] must be a uint8 1-D tensor"):
            run([self.datas[0], b"abc", self.datas[2]], self.plans, self.out)
        with pytest.raises(TypeError, match=r"datas\[0\] must be uint8, got torch.int32"):
            run([self.datas[0].int()] + self.datas[1:], self.plans, self.out)
        with pytest.raises(ValueError, match=r"datas\[2\] must be 1-D"):
            run(self.datas[:2] + [self.datas[2][None]], self.plans, self.out)
        with pytest.raises(TypeError, match=r"plans\[0\] must be a Plan"):
            run(self.datas, [(1, 2)] + self.plans[1:], self.out)
        for bad, exc in ((0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError)):
            with pytest.raises(exc, match="num_threads"):
                run(self.datas, self.plans, self.out, num_threads=bad)
        with pytest.raises(ValueError, match="float out"):
            run(self.datas, self.plans, self.out, color="rgb")
        with pytest.raises(TypeError, match="uint8 1-D tensor"):
            self.pipe.plan(b"\xff\xd8")
        with pytest.raises(ValueError, match="1-D"):
            self.pipe.plan(self.datas[0][None])
        assert run([], [], torch.empty((0, 3, 32, 32), dtype=torch.uint8)) == []

    def test_non_contiguous_datas(self):
        # the op refuses a strided file; run and plan_batch hand it a contiguous copy instead
        strided = [torch.stack([d, d], 1)[:, 0] for d in self.datas]
        assert not any(d.is_contiguous() for d in strided)
        expected = torch.empty_like(self.out)
        assert self.pipe.run(self.datas, self.plans, expected) == [(0, "")] * 3
        got = torch.empty_like(self.out)
        assert self.pipe.run(strided, self.plans, got) == [(0, "")] * 3
        assert torch.equal(got, expected)
        keys = [5, 6, 7]
        planned = self.pipe.plan_batch(strided, keys)
        reference = self.pipe.plan_batch(self.datas, keys)
        assert [r for r, _ in planned] == [r for r, _ in reference] == ["plan"] * 3
        assert all(a.resolve() == b.resolve() for (_, a), (_, b) in zip(planned, reference))
        with pytest.raises(TypeError, match=r"datas\[1\] must be a uint8 1-D tensor") as info:
            self.pipe.plan_batch([self.datas[0], "x"], [1, 2])
        assert info.value.__suppress_context__  # the clearer error alone, not the op's beneath it

    def _op_args(self, plans=None, fills=None, out=None, convert=None, threads=2):
        records, steps, extras = _batch_tables(self.plans if plans is None else plans)
        if convert is None:
            convert = as_bytes(np.zeros(1, dtype=struct_dtype("ConvertSpec")))
        fills = torch.zeros((2, 3), dtype=torch.int64) if fills is None else fills
        return (self.datas if plans is None else self.datas[:len(plans)], records, steps, extras, fills,
                [self.out if out is None else out], 3, 3, 0, False, 64, convert, threads)

    def test_op_checks_plans(self):
        def call(**kw):
            return torch.ops.fastprep.decode_batch(*self._op_args(**kw))

        assert [int(s) for s in call()[0][:, 0]] == [0, 0, 0]
        for field, value, match in (("scale_num", 9, "DCT scale"), ("height", 0, "decode window"),
                                    ("place_top", 5, "does not fit"), ("resize", 2, "resize must be 0 or 1"),
                                    ("region_h", 7, "region"), ("num_steps", 3, "outside the 0 steps")):
            bad = [Plan(p.record.copy(), p.steps, p.extras) for p in self.plans]
            bad[1].record[field] = value
            with pytest.raises(ValueError, match=match):
                call(plans=bad)
        with pytest.raises(ValueError, match="fills"):
            call(fills=torch.full((2, 3), 256, dtype=torch.int64))
        spec = np.zeros(1, dtype=struct_dtype("ConvertSpec"))
        spec[0]["kind"] = 3
        with pytest.raises(ValueError, match="conversion"):
            call(convert=as_bytes(spec))
        records, steps, extras = _batch_tables(self.plans)
        args = list(self._op_args())
        args[1] = records[:-8]
        with pytest.raises(ValueError, match="plans must be"):
            torch.ops.fastprep.decode_batch(*args)
        with pytest.raises(ValueError, match="num_threads"):
            call(threads=0)

    def test_opcheck(self):
        torch.library.opcheck(torch.ops.fastprep.decode_batch.default, self._op_args())


def test_gil_released_during_the_batch():
    big = [_tensor(make_jpeg("444", 700, 900, seed=s)) for s in range(4)]
    pipe = NativePipeline.from_transform(DecodeCenterCrop((700, 900)))
    plans = [pipe.plan(d) for d in big]
    out = torch.empty((len(big), 3, 700, 900), dtype=torch.uint8)
    # the op itself, called directly: no other torch call (which may release the GIL) inside
    records, steps, extras = _batch_tables(plans)
    args = (big, records, steps, extras, torch.zeros((2, 3), dtype=torch.int64), [out], 3, 3, 0, False, 64,
            as_bytes(np.zeros(1, dtype=struct_dtype("ConvertSpec"))), 1)
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)  # let the main thread take the GIL whenever it wants it

    helper = threading.Thread(target=spin)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(30.0)  # the GIL changes hands only where a thread gives it up
    try:
        helper.start()
        while count[0] == 0:
            time.sleep(0.001)
        before = count[0]
        status, _ = torch.ops.fastprep.decode_batch(*args)
        during = count[0] - before
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        helper.join()
    assert status[:, 0].tolist() == [STATUS_OK] * len(big)
    assert torch.equal(out[0], fio.decode_jpeg(big[0]))
    # with the GIL held through the call the helper could not have counted at all
    assert during > 0


class TestHelperPool:
    """decode_batch's helper threads persist across calls: concurrent calls share them, and
    a forked child (which has none of them) still decodes."""

    def setup_method(self):
        self.transform = PIPELINES["compose-rrc-mask"]()
        self.pipe = NativePipeline.from_transform(self.transform)
        datas = [d for d in DATAS + PACKED if fio.jpeg_info(d).color_space != "CMYK"]
        self.datas = datas * 3
        self.keys = [sample_key(4, 0, i) for i in range(len(self.datas))]
        self.want = [w[-1] for w in reference(self.transform, self.datas, self.keys)]
        self.plans = [self.pipe.plan(d, key=k) for d, k in zip(self.datas, self.keys)]

    def _run(self, threads):
        out = torch.zeros((len(self.datas), 3, *self.pipe.size), dtype=torch.uint8)
        got = self.pipe.run(self.datas, self.plans, out, num_threads=threads)
        return got, out

    def _check(self, got, out):
        assert [s for s, _ in got] == [STATUS_OK] * len(self.datas)
        for i, w in enumerate(self.want):
            assert torch.equal(out[i], w), i

    def test_concurrent_calls(self):
        results = [None] * 6

        def work(k):
            results[k] = self._run(1 + k % 4)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for r in results:
            self._check(*r)
        self._check(*self._run(8))  # more threads than before: the pool grows

    @pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
    def test_forked_child_decodes(self):
        import multiprocessing as mp

        self._check(*self._run(3))  # the parent's pool exists now
        ctx = mp.get_context("fork")
        queue = ctx.Queue()

        def child():
            torch.set_num_threads(1)  # as a DataLoader worker: torch's OpenMP team is the parent's
            got, out = self._run(3)
            queue.put(([s for s, _ in got], [torch.equal(out[i], w) for i, w in enumerate(self.want)]))

        proc = ctx.Process(target=child)
        proc.start()
        statuses, equal = queue.get(timeout=120)
        proc.join(60)
        assert proc.exitcode == 0
        assert statuses == [STATUS_OK] * len(self.datas) and all(equal)


class TestFloatOut:
    """Phase 2: the batch conversion fused into the write equals BatchConvert on the uint8
    batch, bit for bit."""

    MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

    def _uint8(self, pipe, datas, keys):
        out = torch.empty((len(datas), pipe.channels, *pipe.size), dtype=torch.uint8)
        assert pipe.run(datas, plans_for(pipe, datas, keys), out) == [(STATUS_OK, "")] * len(datas)
        return out

    @pytest.mark.parametrize("name", ["default", "rrc-flip", "resize-center-crop", "crop-padding-ycbcr"])
    @pytest.mark.parametrize("color", ["yuv", "rgb"])
    @pytest.mark.parametrize("normalize", [False, True])
    def test_matches_batch_convert(self, name, color, normalize):
        pipe = NativePipeline.from_transform(PIPELINES[name]())
        datas = [d for d, (e, _, _) in zip(DATAS, IMAGES) if e != "cmyk"] + PACKED
        keys = [sample_key(11, 0, i) for i in range(len(datas))]
        batch = self._uint8(pipe, datas, keys)
        mean, std = (self.MEAN, self.STD) if normalize else (None, None)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for channels_last in (False, True):
                want = BatchConvert(color, mean, std, dtype)(batch)
                out = torch.empty(batch.shape, dtype=dtype)
                if channels_last:
                    out = out.contiguous(memory_format=torch.channels_last)
                got = pipe.run(datas, plans_for(pipe, datas, keys), out, color=color, mean=mean, std=std,
                               num_threads=3)
                assert got == [(STATUS_OK, "")] * len(datas)
                assert want.dtype == out.dtype
                diff = (out.float() - want.float()).abs().max().item()
                assert torch.equal(out, want), (dtype, channels_last, diff)

    def test_arguments_remembered_apart(self):
        # the conversion is kept per arguments: each call's own mean and std apply, also when
        # one list is changed in place between calls. The oracle is the documented arithmetic
        # in plain torch: x / 255 without mean and std, else x * gain + bias with gain =
        # 1 / (255 std) and bias = -mean / std computed in double and rounded once to float32,
        # one float32 rounding for the product and one for the sum.
        pipe = NativePipeline.from_transform(PIPELINES["default"]())
        keys = [sample_key(4, 0, i) for i in range(4)]
        batch = self._uint8(pipe, DATAS[:4], keys)
        x = batch.float()
        mean, std = list(self.MEAN), list(self.STD)
        cases = [(None, None), (self.MEAN, self.STD), ((0.5, 0.5, 0.5), self.STD), (self.MEAN, (0.5, 0.25, 0.125)),
                 (self.MEAN, self.STD), (None, None)]
        for m, s in cases:
            if m is None:
                want = x / 255
                out = torch.empty(batch.shape)
                pipe.run(DATAS[:4], plans_for(pipe, DATAS[:4], keys), out, color="rgb")
            else:
                mean[:], std[:] = m, s
                gain = torch.tensor([1.0 / (255.0 * v) for v in s], dtype=torch.float64).float()
                bias = torch.tensor([-a / b for a, b in zip(m, s)], dtype=torch.float64).float()
                want = x * gain[:, None, None] + bias[:, None, None]
                out = torch.empty(batch.shape)
                pipe.run(DATAS[:4], plans_for(pipe, DATAS[:4], keys), out, color="rgb", mean=mean, std=std)
            assert torch.equal(out, want), (m, s)

    def test_default_color_is_yuv_and_scalar_normalization(self):
        pipe = NativePipeline.from_transform(PIPELINES["default"]())
        keys = [sample_key(3, 0, i) for i in range(4)]
        batch = self._uint8(pipe, DATAS[:4], keys)
        out = torch.empty(batch.shape)
        pipe.run(DATAS[:4], plans_for(pipe, DATAS[:4], keys), out)
        assert torch.equal(out, BatchConvert("yuv")(batch))
        pipe.run(DATAS[:4], plans_for(pipe, DATAS[:4], keys), out, color="rgb", mean=0.5, std=0.25)
        assert torch.equal(out, BatchConvert("rgb", 0.5, 0.25)(batch))

    def test_fallback_when_torch_rounding_is_mixed(self, monkeypatch):
        from fastprep.data import native

        monkeypatch.setattr(native, "_fma_probe_result", [None])
        pipe = NativePipeline.from_transform(PIPELINES["rrc-flip"]())
        keys = [sample_key(4, 0, i) for i in range(5)]
        batch = self._uint8(pipe, DATAS[:5], keys)
        out = torch.empty(batch.shape, dtype=torch.float16)
        pipe.run(DATAS[:5], plans_for(pipe, DATAS[:5], keys), out, mean=self.MEAN, std=self.STD)
        assert torch.equal(out, BatchConvert("yuv", self.MEAN, self.STD, torch.float16)(batch))

    def test_bad_conversion_arguments(self):
        pipe = NativePipeline.from_transform(PIPELINES["default"]())
        plans = plans_for(pipe, DATAS[:2], [1, 2])
        out = torch.empty((2, 3, 64, 64))
        with pytest.raises(ValueError, match="color"):
            pipe.run(DATAS[:2], plans, out, color="hsv")
        with pytest.raises(ValueError, match="mean and std"):
            pipe.run(DATAS[:2], plans, out, mean=self.MEAN)
        with pytest.raises(ValueError, match="nonzero"):
            pipe.run(DATAS[:2], plans, out, mean=self.MEAN, std=(1, 0, 1))
        with pytest.raises(ValueError, match="finite"):
            pipe.run(DATAS[:2], plans, out, mean=(0, float("nan"), 0), std=self.STD)
        with pytest.raises(TypeError, match="float64"):
            pipe.run(DATAS[:2], plans, out.double())
        gray = NativePipeline.from_transform(PIPELINES["crop-gray"]())
        with pytest.raises(ValueError, match="3 channels"):
            gray.run(DATAS[:2], plans_for(gray, DATAS[:2], [1, 2]), torch.empty((2, 1, 30, 60)))


def test_ray_decode_batch_native_equals_per_sample():
    """fastprep.ray.DecodeBatch runs the default transform as one native call per batch: the
    same images, skips, errors and warnings as its per-sample path (a wrapped transform)."""
    pytest.importorskip("ray.data")
    from fastprep.ray import DecodeBatch
    from test_decode_errors import warning_flip

    good = [make_jpeg(e, h, w, seed=20 + i) for i, (e, h, w) in enumerate(IMAGES[:6])]
    corrupt = warning_flip(make_jpeg("420", 40, 48, seed=3))
    files = good[:2] + [good[2][:300], corrupt, b"", b"\xff\xd8\xff\xe0 junk"] + good[2:]
    batch = {"bytes": np.array(files, dtype=object), "label": np.arange(len(files), dtype=np.int64),
             "index": np.arange(100, 100 + len(files), dtype=np.int64)}
    transform = default_transform((48, 40), 0.25)

    def run(decode):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = decode(batch)
        return out, sorted(str(w.message) for w in caught if issubclass(w.category, fio.DecodeWarning))

    native = DecodeBatch(transform, seed=5, epoch=1, on_error="skip", num_threads=2)
    per_sample = DecodeBatch(lambda data: transform(data), seed=5, epoch=1, on_error="skip")
    assert native._native is not None and per_sample._native is None
    (a, warned_a), (b, warned_b) = run(native), run(per_sample)
    assert a["index"].tolist() == b["index"].tolist() and a["label"].tolist() == b["label"].tolist()
    assert np.array_equal(a["image"], b["image"]) and a["image"].shape[1:] == (3, 48, 40)
    assert warned_a == warned_b and len(warned_a) == 1
    raising = DecodeBatch(transform, seed=5, on_error="raise")
    with pytest.raises(fio.DecodeError, match=r"index 102"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raising(batch)


_BASELINE_CODE = r"""
import io
import torch
from PIL import Image
from fastprep.bench.synthetic import photo_like
from fastprep.data import BatchConvert, default_transform
from fastprep.data.native import NativePipeline
from fastprep._kernels import isa
assert isa.active_isa() == "baseline"
datas = []
for i, (h, w) in enumerate([(90, 70), (60, 120), (50, 50)]):
    buf = io.BytesIO()
    Image.fromarray(photo_like(h, w, i)).save(buf, "JPEG", quality=90)
    datas.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
pipe = NativePipeline.from_transform(default_transform(48, 0.25))
torch.manual_seed(0)
plans = [pipe.plan(d) for d in datas]
u8 = torch.empty((3, 3, 48, 48), dtype=torch.uint8)
pipe.run(datas, plans, u8)
mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
for color in ("yuv", "rgb"):
    for m, s in ((None, None), (mean, std)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            out = torch.empty((3, 3, 48, 48), dtype=dtype)
            pipe.run(datas, plans, out, color=color, mean=m, std=s)
            assert torch.equal(out, BatchConvert(color, m, s, dtype)(u8)), (color, m, dtype)
print("ok")
"""


def test_float_out_on_the_baseline_variants():
    """FASTPREP_ISA=baseline: the conversion without AVX2/FMA/F16C (std::fma, c10's
    float16 rounding) gives BatchConvert's bits too."""
    import os
    import subprocess

    env = {**os.environ, "FASTPREP_ISA": "baseline"}
    out = subprocess.run([sys.executable, "-c", _BASELINE_CODE], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
