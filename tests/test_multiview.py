"""MultiView: several views of one image from one decode.

* Per sample, ``MultiView(views)(data)`` is ``[view(data) for view in views]`` under the same
  torch seed: the views draw in list order, and v2 views see ``fastprep.io.decode_jpeg``'s
  image (the reference is computed view by view in the test).
* ``make_loader(transform=MultiView(...))``: the threads engine plans all views natively and
  decodes each image once per DCT scale its views use, and its batches equal the processes
  engine's (which runs the per-sample call) bit for bit; one batch per view, ``BatchOutput``
  applied to each; resume, ``seed=``, ``on_error`` keep working.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch
from torchvision.transforms import v2

import fastprep.data as D
import fastprep.io as fio
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.data.native import MultiViewPipeline, Unsupported
from fastprep.transforms import DecodeRandomResizedCrop, MultiView, OnDecoded

N = 40
G, L = 40, 16  # global and local view sizes (DINO's 224 and 96, scaled down for speed)
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("mv")
    out = []
    for i in range(N):
        path = os.path.join(root, f"{i:02d}.jpg")
        with open(path, "wb") as f:
            f.write(encode_jpeg(photo_like(50 + 3 * i, 90 - i, seed=i), quality=80 + i % 15))
        out.append(path)
    return out


def _geometry(dct_scaling):
    global_view = DecodeRandomResizedCrop(G, scale=(0.4, 1), flip_p=0.5, dct_scaling=dct_scaling)
    local_view = DecodeRandomResizedCrop(L, scale=(0.05, 0.4), flip_p=0.5, dct_scaling=dct_scaling)
    return [global_view] * 2 + [local_view] * 8


def _dino_view(size, scale, blur, solarize):
    return v2.Compose([v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip(),
                       v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), v2.RandomGrayscale(0.2),
                       v2.RandomApply([v2.GaussianBlur(9, sigma=(0.1, 2.0))], p=blur),
                       v2.RandomSolarize(128, p=solarize), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


def _dino():
    return ([_dino_view(G, (0.4, 1), 1.0, 0.0), _dino_view(G, (0.4, 1), 0.1, 0.2)]
            + [_dino_view(L, (0.05, 0.4), 0.5, 0.0)] * 8)


VIEWS = {"geometry-exact": lambda: _geometry(False), "geometry-dct": lambda: _geometry(True), "dino": _dino,
         "mixed": lambda: [DecodeRandomResizedCrop(G, flip_p=0.5, dct_scaling=False),
                           v2.Compose([v2.RandomResizedCrop(L), v2.RandomHorizontalFlip()])]}


def _per_view(views, data):
    """``[view(data) for view in views]``, a v2 view on the decoded file."""
    return [OnDecoded(v)(data) if not isinstance(v, DecodeRandomResizedCrop) else v(data) for v in views]


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_per_sample_call_is_the_views_in_order(files, name):
    views = VIEWS[name]()
    mv = MultiView(views)
    for i, path in enumerate(files[:10] if name == "dino" else files):  # dino: torchvision's ops on both sides
        data = fio.read_file(path)
        with keyed_default_rng(i):
            got = mv(data)
        with keyed_default_rng(i):
            want = _per_view(views, data)
        assert len(got) == len(views) and all(torch.equal(a, b) for a, b in zip(got, want)), (name, i)


def test_per_sample_call_equals_torchvision(files):
    """Oracle: torchvision itself. DINO's geometry as unchanged v2 views: the per-sample call
    equals torchvision's decode_jpeg followed by each view's v2 pipeline, under the same seed,
    bit for bit (values, and the decode's layout that the v2 ops see)."""
    import warnings

    import torchvision.io as tvio

    def crop(size, scale):
        return v2.Compose([v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip()])

    views = [crop(G, (0.4, 1))] * 2 + [crop(L, (0.05, 0.4))] * 8
    mv = MultiView(views)
    for i, path in enumerate(files[:12]):
        data = fio.read_file(path)
        torch.manual_seed(100 + i)
        got = mv(data)
        torch.manual_seed(100 + i)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
            image = tvio.decode_jpeg(data, mode=tvio.ImageReadMode.RGB)
        want = [view(image) for view in views]
        assert len(got) == len(want)
        for v, (a, b) in enumerate(zip(got, want)):
            assert a.shape == b.shape and torch.equal(a, b), (i, v)


@pytest.fixture
def runner_calls(monkeypatch):
    """The registered per-sample runner, wrapped to record what it returned per call."""
    from fastprep.transforms import _multiview

    inner = _multiview._per_sample_runner
    assert inner is not None  # fastprep.data (imported above) registers it
    calls: list = []

    def recording(transform, data):
        out = inner(transform, data)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(_multiview, "_per_sample_runner", recording)
    return calls


@pytest.mark.parametrize("name", ["geometry-dct", "geometry-exact", "v2"])
def test_per_sample_call_takes_the_union_plan(files, runner_calls, name):
    """The per-sample call runs the loader's one-decode plan (the runner answers every file) and
    still equals ``[view(data) for view in views]`` on the default generator, seed by seed --
    DCT-scaled decode views included (each keeps the scale it picks alone)."""
    def crop(size, scale):
        return v2.Compose([v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip()])

    views = [crop(G, (0.4, 1))] * 2 + [crop(L, (0.05, 0.4))] * 8 if name == "v2" else VIEWS[name]()
    mv = MultiView(views)
    for i, path in enumerate(files[:16]):
        data = fio.read_file(path)
        torch.manual_seed(7 + i)
        got = mv(data)
        after = torch.rand(())
        torch.manual_seed(7 + i)
        want = _per_view(views, data)
        assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(got, want)), (name, i)
        assert torch.equal(after, torch.rand(())), (name, i)  # the same draws, no more
    assert runner_calls == [True] * 16
    assert pickle.loads(pickle.dumps(mv)).__dict__.get("_fastprep_native") is None


def test_per_sample_call_falls_back_without_drawing(files, runner_calls):
    """A file the native path does not take (truncated: the whole-file decode raises) goes view by
    view from the same generator state: the same error as the views give."""
    mv = MultiView([v2.RandomResizedCrop(G)] * 3)
    data = fio.read_file(files[0])[:200]
    torch.manual_seed(5)
    with pytest.raises(fio.DecodeError) as got:
        mv(data)
    after = torch.rand(())
    torch.manual_seed(5)
    with pytest.raises(fio.DecodeError) as want:
        OnDecoded(v2.RandomResizedCrop(G))(data)
    assert str(got.value) == str(want.value) and torch.equal(after, torch.rand(()))
    assert runner_calls == [False]


def test_transforms_alone_keep_the_view_by_view_call():
    """``import fastprep.transforms`` does not import the data layer: no runner is registered."""
    code = ("import sys, fastprep.transforms as t; from fastprep.transforms import _multiview as m; "
            "assert 'fastprep.data' not in sys.modules; assert m._per_sample_runner is None")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_native_run_equals_the_per_sample_call(files, name):
    mv = MultiView(VIEWS[name]())
    pipe = MultiViewPipeline.compile(mv)
    datas = [fio.read_file(p) for p in (files[:16] if name == "dino" else files)]
    n = len(datas)
    keys = [sample_key(3, 0, i) for i in range(n)]
    routes = pipe.plan_batch(datas, keys)
    assert [r for r, _ in routes] == ["plan"] * n
    dtype = torch.float32 if pipe.float_output else torch.uint8
    outs = [torch.empty((n, c, *size), dtype=dtype) for c, size in zip(pipe.channels, pipe.size)]
    assert [s for s, _ in pipe.run(datas, [v for _, v in routes], outs)] == [0] * n
    for i, (data, key) in enumerate(zip(datas, keys)):
        assert [p.key() for p in pipe.plan(data, key=key)] == [p.key() for p in routes[i][1].resolve()]
        with keyed_default_rng(key):
            want = mv(data)
        for v, w in enumerate(want):
            assert torch.equal(outs[v][i], w), (name, i, v)


def _loader(files, transform, engine, **kw):
    extra = {"multiprocessing_context": "fork"} if engine == "processes" else {}
    kw.setdefault("batch_size", 16)
    return D.make_loader(files, transform=transform, engine=engine, seed=5, shuffle=False, num_workers=2,
                         device="cpu", **extra, **kw)


def test_loader_threads_equal_processes(files):
    mv = MultiView(_dino())
    threads = _loader(files, mv, "threads")
    assert threads.engine == "threads", threads.engine_reason
    got = list(threads)
    want = list(_loader(files, mv, "processes"))
    assert len(got) == len(want) == 3
    for (views, targets), (views2, targets2) in zip(got, want):
        assert [tuple(v.shape[1:]) for v in views] == [(3, G, G)] * 2 + [(3, L, L)] * 8
        assert all(torch.equal(a, b) for a, b in zip(views, views2)) and torch.equal(targets, targets2)


def test_loader_output_applies_to_every_view(files):
    mv = MultiView(_geometry(False))
    (views, _), = list(_loader(files[:8], mv, "threads", batch_size=8, channels_last=True, dtype=torch.bfloat16))
    assert all(v.dtype == torch.bfloat16 and v.is_contiguous(memory_format=torch.channels_last) for v in views)
    with keyed_default_rng(sample_key(5, 0, 0)):
        first = mv(fio.read_file(files[0]))
    for v, w in zip(views, first):
        assert torch.equal(v[0], (w.float() / 255).to(torch.bfloat16))


def test_repeated_augmentation(files):
    view = _dino_view(G, (0.2, 1), 0.5, 0.2)
    mv = MultiView([view] * 3)
    (views, _), = list(_loader(files[:8], mv, "threads", batch_size=8))
    assert len(views) == 3 and not torch.equal(views[0], views[1])  # each repetition draws its own
    (procs, _), = list(_loader(files[:8], mv, "processes", batch_size=8))
    assert all(torch.equal(a, b) for a, b in zip(views, procs))


def test_resume_and_skip(files, tmp_path):
    bad = os.path.join(tmp_path, "bad.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0not a jpeg at all")
    mixed = files[:10] + [bad] + files[10:20]
    mv = MultiView(_geometry(True))
    full = list(_loader(mixed, mv, "threads", batch_size=4, on_error="skip"))
    loader = _loader(mixed, mv, "threads", batch_size=4, on_error="skip")
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    resumed = _loader(mixed, mv, "processes", batch_size=4, on_error="skip")
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(full) - 1
    for (a, ta), (b, tb) in zip(full[1:], rest):
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and torch.equal(ta, tb)
    assert resumed.dataset.skipped == 1


def test_shards_and_distributed(files, tmp_path, monkeypatch):
    """On WebDataset shards, and split over two ranks (``distributed=True``), the views are the
    processes engine's and the loose files' for the same samples."""
    from fastprep.pack import pack_shards

    mv = MultiView(_geometry(True)[:1] + _geometry(True)[2:4])
    shards = tmp_path / "shards"
    pack_shards(os.path.dirname(files[0]), shards, shard_size=40_000, workers=1, progress=False)
    assert len(list(shards.glob("*.tar"))) > 1
    loose = list(_loader(files, mv, "threads", batch_size=8))
    for engine in ("threads", "processes"):
        got = list(_loader(str(shards), mv, engine, batch_size=8))
        assert len(got) == len(loose) == N // 8
        for (a, _), (b, _) in zip(got, loose):  # packing is lossless, the window decode exact
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))

    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    seen = {}
    for rank in (0, 1):
        monkeypatch.setattr(dist, "get_rank", lambda rank=rank: rank)
        per_engine = [list(_loader(files, mv, engine, batch_size=4, distributed=True))
                      for engine in ("threads", "processes")]
        for (a, ta), (b, tb) in zip(*per_engine, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)) and torch.equal(ta, tb)
        seen[rank] = [v for views, _ in per_engine[0] for v in views[0]]
    assert len(seen[0]) == len(seen[1]) == N // 2
    # the two ranks' first views are the whole epoch's, each sample once
    everything = [v for views, _ in loose for v in views[0]]
    assert sorted(t.sum().item() for t in seen[0] + seen[1]) == sorted(t.sum().item() for t in everything)


def test_refusals():
    with pytest.raises(ValueError, match="at least one view"):
        MultiView([])
    with pytest.raises(Unsupported, match="view 1: the pipeline starts with ColorJitter"):
        MultiViewPipeline.compile(MultiView([v2.RandomResizedCrop(G), v2.ColorJitter(0.2)]))
    mixed = MultiView([v2.RandomResizedCrop(G), v2.Compose([v2.RandomResizedCrop(G),
                                                             v2.ToDtype(torch.float32, scale=True)])])
    with pytest.raises(ValueError, match="views must all return one dtype"):
        D.make_loader(["x.jpg"], transform=mixed)


class TestFastMode:
    """fast_ops: the separable blur in place of v2.GaussianBlur, both engines alike."""

    def test_blur_close_to_torchvision(self, files):
        from fastprep.transforms import SeparableGaussianBlur

        worst = 0
        for i, path in enumerate(files[:8]):
            image = fio.decode_jpeg(fio.read_file(path))
            for k in (3, 9, 23):
                with keyed_default_rng(i):
                    want = v2.GaussianBlur(k, (0.1, 2.0))(image)
                with keyed_default_rng(i):
                    got = SeparableGaussianBlur(k, (0.1, 2.0))(image)
                worst = max(worst, int((got.int() - want.int()).abs().max()))
        assert worst <= 1  # documented: the summation order differs from the dense conv's

    def test_both_engines_run_the_fast_blur(self, files):
        from fastprep.transforms import SeparableGaussianBlur, fast_ops

        mv = fast_ops(MultiView(_dino()))
        blurs = [t for view in mv.views for t in _flat(view) if isinstance(t, SeparableGaussianBlur)]
        assert len(blurs) == 10 and not any(type(t) is v2.GaussianBlur for view in mv.views for t in _flat(view))
        threads = _loader(files[:16], mv, "threads")
        assert threads.engine == "threads", threads.engine_reason
        (a, _), = list(threads)
        (b, _), = list(_loader(files[:16], mv, "processes"))
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def _flat(t):
    children = getattr(t, "transforms", None)
    return [t] if children is None else [u for c in children for u in _flat(c)]
