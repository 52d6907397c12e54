"""A drop-in for ``torch.utils.data.DataLoader``: :class:`DataLoader`.

Change one import and keep the dataset and its transforms::

    from fastprep.data import DataLoader   # was: from torch.utils.data import DataLoader

    loader = DataLoader(ImageFolder(root, transform), batch_size=256, shuffle=True, num_workers=8, seed=0)

A dataset read as files (:func:`fastprep.data.sources.file_source`: ``ImageFolder`` /
``DatasetFolder`` with torchvision's PIL loader, ``Subset`` / ``random_split`` /
``ConcatDataset`` of them, a dataset declaring ``__fastprep_source__``) whose transform
compiles runs on the threads engine; anything else runs as torch's ``DataLoader`` runs it
(worker processes calling the dataset's own ``__getitem__``), and :attr:`DataLoader.engine_reason`
says why. Either way, with ``seed=S`` the sample of index ``i`` in epoch ``e`` is
``with fastprep.data.sample_rng(S, e, i): dataset[i]``, bit for bit, and the batches are what
``collate_fn`` (``default_collate``) makes of those samples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Dataset, IterableDataset, default_collate, get_worker_info

from .. import _checks
from .._seeding import check_seed, sample_rng
from ..transforms import OnDecoded, OnPIL
from ..transforms._compile import input_kind, output_dtype, takes_pil_as_tensor
from .batch import BatchCast
from .datasets import JpegDataset, SkippedFile, substitute_index
from .engine import ThreadLoader
from .hf import HFSource, collate_columns, hf_source, is_hf_dataset
from .native import Unsupported, native_pipeline
from .order import EpochControl, EpochSampler
from .prefetch import DevicePrefetcher
from .sources import FileSource, NoFileSource, file_source
from .traced import TracedPipeline

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DataLoader", "DataLoaderOptions"]

_TORCH_KEYWORDS = ("prefetch_factor", "persistent_workers", "pin_memory_device", "in_order")
_SLOTS = 256  # skip counters: slot 0 the main process, slot k + 1 worker k
_MAX_SKIP_ATTEMPTS = 100


class DataLoaderOptions(TypedDict, total=False):
    """:class:`DataLoader`'s keyword-only arguments besides ``seed`` and ``on_error``:
    torch's, and ``engine``."""

    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory_device: str
    in_order: bool
    #: ``"threads"``, ``"processes"`` or ``None`` (threads when possible)
    engine: str | None


class DataLoader:
    """``torch.utils.data.DataLoader`` with fastprep's engines, seeding and resuming.

    The parameters are torch's, positional and keyword alike (``dataset, batch_size=1,
    shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last, timeout,
    worker_init_fn, multiprocessing_context, generator``, then ``prefetch_factor``,
    ``persistent_workers``, ``pin_memory_device``, ``in_order``), checked by torch itself, and:

    Args:
        seed: ``None`` (torch's semantics: each worker's own RNG streams) or an int in
            ``[0, 2**64)``: sample ``i`` of epoch ``e`` is ``with sample_rng(seed, e, i):
            dataset[i]`` on either engine (torch's, Python's and NumPy's RNGs seeded by the
            sample, whatever worker, batch or resume point made it), and with ``shuffle`` the
            order of epoch ``e`` is keyed by ``(seed, e)``.
        on_error: ``"raise"``, or ``"skip"`` a sample that fails: a file that cannot be read
            (threads: :class:`fastprep.io.DecodeError`; processes: ``OSError``, Pillow's
            errors) or any exception the dataset's code raises for that sample (your
            transform refusing a draw): another sample, chosen from the
            failed index in a fixed order, takes its place (counted in :attr:`skipped`, named
            with the error in :attr:`skipped_files`).
        engine: ``None`` (threads when possible), ``"threads"`` (``ValueError`` with the reason
            when it cannot) or ``"processes"``.

    What runs where (:attr:`engine`, :attr:`engine_reason`):

    * **threads**: a dataset read as files (:mod:`fastprep.data.sources`) whose transform
      converts the PIL image to a tensor first (v2 ``ToImage()``/``PILToTensor()``) and then
      compiles (``docs/augment.md``), with the default ``collate_fn``, no ``batch_sampler`` and
      no ``worker_init_fn``. ``num_workers`` native threads decode and transform; ``timeout``,
      ``persistent_workers``, ``multiprocessing_context`` and ``pin_memory_device`` configure
      worker processes and have nothing to act on; ``prefetch_factor``: batches ready ahead.
      Files that are not JPEGs (PNG, ...) are decoded by Pillow and run through the transform
      as it is.
    * **processes**: everything else, as ``torch.utils.data.DataLoader`` runs it, your
      ``sampler``, ``batch_sampler`` and ``collate_fn`` included.

    Batches: what ``collate_fn`` (``default_collate``) gives for the dataset's samples --
    ``[images, targets]`` (int64) for ``(image, target)`` samples -- on the CPU (pinned with
    ``pin_memory``). Epochs: each ``iter()`` is the next one; :meth:`set_epoch` chooses it.
    :meth:`state_dict` / :meth:`load_state_dict` resume mid-epoch (torchdata's
    ``StatefulDataLoader`` convention), exactly.

    Errors: a file that cannot be decoded raises naming it on the message's first line
    (threads: :class:`fastprep.io.DecodeError`; processes: Pillow's exception type). An
    exception your code raises in a worker surfaces with its own type and message (torch's
    re-raise, which holds the worker's traceback, is its cause).
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, seed: int | None = None, on_error: str = "raise",
                 **options: Unpack[DataLoaderOptions]) -> None:
        unknown = sorted(set(options) - set(_TORCH_KEYWORDS) - {"engine"})
        if unknown:
            raise TypeError(f"DataLoader() got an unexpected keyword argument {unknown[0]!r}")
        engine = options.pop("engine", None)
        if engine not in (None, "threads", "processes"):
            raise ValueError(f"engine must be 'threads', 'processes' or None, got {engine!r}")
        args = dict(batch_size=batch_size, shuffle=shuffle, sampler=sampler, batch_sampler=batch_sampler,
                    num_workers=num_workers, collate_fn=collate_fn, pin_memory=pin_memory, drop_last=drop_last,
                    timeout=timeout, worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
                    generator=generator, **options)
        reference = TorchDataLoader(dataset, **args)  # torch's own checks and messages
        self.seed = check_seed(seed)
        self.on_error = _checks.on_error(on_error)
        self.dataset = dataset
        # torch's attributes, as torch set them
        self.batch_size: int | None = reference.batch_size
        self.drop_last: bool = reference.drop_last
        self.num_workers: int = reference.num_workers
        self.pin_memory: bool = reference.pin_memory
        self.timeout: float = reference.timeout
        self.worker_init_fn = reference.worker_init_fn
        self.generator = reference.generator
        self.prefetch_factor = reference.prefetch_factor
        self.persistent_workers: bool = reference.persistent_workers
        self.collate_fn = reference.collate_fn
        self.sampler: Any = None
        self.batch_sampler: Any = None
        if isinstance(dataset, IterableDataset):
            if self.seed is not None:
                raise ValueError("seed= keys samples by their index; an IterableDataset has none")
            why = "an IterableDataset has no indices to read as files"
            if type(dataset).__module__.startswith("datasets."):
                why = ("a streaming datasets.IterableDataset has no indices to read as files (load it without "
                       "streaming=True, or save_to_disk, to run it natively)")
            self._setup_plain(reference, why)
            return
        source: FileSource | None = None
        reason: str | None
        self._hf: tuple | None = None  # a datasets.Dataset: (its template, its passed-through columns)
        if is_hf_dataset(dataset):
            self._setup_hf(dataset, args, engine)
            return
        try:
            source = file_source(dataset)
        except NoFileSource as e:
            reason = str(e)
        else:
            reason = _not_native(source, args, engine)
        pipeline = None
        if source is not None and reason is None:
            files = JpegDataset(source.files, source.targets, transform=_file_transform(source.transform),
                                on_error=self.on_error, seed=self.seed)
            pipeline, reason = _threads_pipeline(source, files)
        if pipeline is None:
            if engine == "threads":
                raise ValueError(f"engine='threads' cannot run this dataset: {reason}; use engine='processes' (or "
                                 "leave engine unset)")
            self._setup_processes(dataset, args, reason, source)
        else:
            self._setup_threads(files, pipeline, args)

    def _setup_hf(self, dataset, args: dict, engine: str | None) -> None:
        """A ``datasets.Dataset`` (:mod:`fastprep.data.hf`): its image column read from Arrow and
        its transform traced on the threads engine, or as written on processes."""
        pipeline = None
        try:
            hf = hf_source(dataset)
        except NoFileSource as e:
            reason: str | None = str(e)
        else:
            reason = _not_native(hf, args, engine)
        if reason is None:
            try:
                pipeline = TracedPipeline.compile(hf.call, 0, stored=hf.stored)
                files = hf.images(self.on_error, self.seed)
            except (Unsupported, NoFileSource) as e:
                reason = str(e)
        if pipeline is None:
            if engine == "threads":
                raise ValueError(f"engine='threads' cannot run this dataset: {reason}; use engine='processes' (or "
                                 "leave engine unset)")
            self._setup_processes(dataset, args, reason, None)
            return
        self._hf = (hf.call.template, hf.columns())
        self._setup_threads(files, pipeline, args)

    def _sampler(self, size: int, args: dict):
        return args["sampler"] if args["sampler"] is not None else \
            EpochSampler(size, seed=self.seed or 0, shuffle=bool(args["shuffle"]))

    def _setup_threads(self, files: JpegDataset, pipeline, args: dict) -> None:
        files.count_skips_at_delivery = True
        files.skip_errors = (Exception,)  # on_error="skip": a transform's own error too
        files.warn_fallback = False  # Pillow decoding a PNG is what the dataset itself does
        sampler = self.sampler = self._sampler(len(files), args)
        self.batch_sampler = None
        float_output = pipeline.float_output if isinstance(pipeline, TracedPipeline) else \
            output_dtype(files.transform).is_floating_point
        convert = BatchCast(torch.float32) if float_output else None
        # Traces run one at a time (they seed the process-wide RNGs under one lock): a second
        # reader thread adds no tracing, only contention for that lock and the GIL (measured on
        # 2 CPUs: a DINO-style class 20-25 % slower with two).
        readers = {"read_threads": 1} if isinstance(pipeline, TracedPipeline) else {}
        loader = ThreadLoader(files, pipeline, sampler, batch_size=args["batch_size"], drop_last=args["drop_last"],
                              num_workers=args["num_workers"], pin_memory=args["pin_memory"],
                              prefetch=args.get("prefetch_factor") or 2, convert=convert, **readers)
        self._thread_loader = loader
        control = _Epochs("threads", loader, files, sampler, seed=self.seed, generator=args["generator"],
                          batch_size=args["batch_size"], num_workers=args["num_workers"])
        self._files: JpegDataset | None = files
        self._keyed: _KeyedDataset | None = None
        self._finish(DevicePrefetcher(loader, "cpu", track_epochs=True, epochs=control), "threads", None)

    def _setup_processes(self, dataset, args: dict, reason: str | None, source: FileSource | None) -> None:
        keyed = _KeyedDataset(dataset, self.seed, self.on_error, None if source is None else source.files)
        args = dict(args)
        given_order = args["sampler"] is not None or args["batch_sampler"] is not None
        if args["batch_sampler"] is None and args["batch_size"] is not None:
            args["sampler"] = self._sampler(len(keyed), args)
            args["shuffle"] = None
        order = args["batch_sampler"] if args["batch_sampler"] is not None else args["sampler"]
        batched = args["batch_size"] is not None or args["batch_sampler"] is not None
        args["collate_fn"] = _BoxedCollate(self.collate_fn, batched)
        loader = TorchDataLoader(keyed, **args)
        self.sampler, self.batch_sampler = loader.sampler, loader.batch_sampler
        # Samples drawing from worker processes' RNG are reproduced only by re-running them.
        replay = given_order or (self.seed is None and args["num_workers"] > 0 and not args.get("persistent_workers"))
        control = _Epochs("processes", loader, keyed, order, seed=self.seed, generator=args["generator"],
                          replay=replay, batch_size=args["batch_size"] or 1, num_workers=args["num_workers"])
        self._files, self._keyed = None, keyed
        self._finish(DevicePrefetcher(loader, "cpu", track_epochs=True, epochs=control), "processes", reason)

    def _setup_plain(self, reference: TorchDataLoader, reason: str) -> None:
        self.sampler, self.batch_sampler = reference.sampler, reference.batch_sampler
        self._files, self._keyed = None, None
        self._finish(DevicePrefetcher(reference, "cpu", track_epochs=True), "processes", reason)

    def _finish(self, prefetcher: DevicePrefetcher, engine: str, reason: str | None) -> None:
        self._prefetcher = prefetcher
        self._skipped_files: list[SkippedFile] = []  # the processes engine's, as batches arrive
        #: ``"threads"`` or ``"processes"``
        self.engine = engine
        #: why the threads engine does not run this loader (``None`` when it does)
        self.engine_reason = reason

    def __len__(self) -> int:
        return len(self._prefetcher)

    def __iter__(self):
        it = iter(self._prefetcher)  # the epoch is set up now, as torch's iter() starts its workers
        return self._batches(it)

    def _batches(self, it):
        threads = self.engine == "threads"
        for batch in it:
            if threads and self._hf is not None:
                yield self._hf_batch(batch[0], batch[1])
            elif threads:
                yield [batch[0], batch[1]]  # default_collate of (image, target) samples: a list
            elif isinstance(batch, _Boxed):
                self._skipped_files.extend(batch.skipped[:max(0, JpegDataset.MAX_SKIPPED_FILES
                                                                  - len(self._skipped_files))])
                yield batch.batch
            else:
                yield batch

    def _hf_batch(self, views, rows: torch.Tensor) -> dict:
        """The batch of a ``datasets.Dataset``'s dict samples: the views the engine built, the
        passed-through columns collated from the rows (``rows``: the engine's targets)."""
        assert self._hf is not None
        template, columns = self._hf
        batch = collate_columns(template, views, rows, columns)
        if self.pin_memory and torch.cuda.is_available():
            from torch.utils.data._utils.pin_memory import pin_memory

            passed = {key for key, kind, _ in template if kind == "column"}
            batch = {k: pin_memory(v) if k in passed else v for k, v in batch.items()}
        return batch

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter()`` runs."""
        return self._prefetcher.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` (its order and sample keys); later
        ones follow it. A ``sampler`` of yours is left alone (call its own ``set_epoch``)."""
        self._prefetcher.set_epoch(epoch)

    def state_dict(self) -> dict:
        """Where the loader stands (a plain dict; see :meth:`DevicePrefetcher.state_dict`)."""
        return self._prefetcher.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Make the next ``iter()`` resume at ``state`` (exactly: the batches that follow are
        those the saving loader would have delivered)."""
        self._prefetcher.load_state_dict(state)

    @property
    def skipped(self) -> int:
        """Samples replaced under ``on_error="skip"`` so far."""
        if self._files is not None:
            return self._files.skipped
        return 0 if self._keyed is None else int(self._keyed.skip_counts.sum())

    @property
    def skipped_files(self) -> list[SkippedFile]:
        """The samples replaced under ``on_error="skip"``, as ``SkippedFile(index, path,
        reason)`` in the order their batches were delivered (``path``: the file, or
        ``"index i"`` for a dataset not read as files; ``reason``: the error's message), the
        first ``JpegDataset.MAX_SKIPPED_FILES`` of them."""
        if self._files is not None:
            return self._files.skipped_files
        return list(self._skipped_files)

    @property
    def literal_samples(self) -> dict:
        """``{reason: count}`` of the samples a traced transform ran as written on the threads
        engine so far (its trace needed pixel values, or a replay failed); empty otherwise."""
        pipeline = getattr(getattr(self, "_thread_loader", None), "pipeline", None)
        return dict(pipeline.literal_samples) if isinstance(pipeline, TracedPipeline) else {}

    def __repr__(self) -> str:
        return (f"fastprep.data.DataLoader(dataset={type(self.dataset).__name__}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, engine={self.engine!r})")


def _not_native(source: FileSource | HFSource, args: dict, engine: str | None) -> str | None:
    """Why the threads engine may not run a dataset read as ``source`` with these arguments
    (``None``: it may, if the transform compiles)."""
    if engine == "processes":
        return "engine='processes' was asked for"
    given = [name for name in ("batch_sampler", "worker_init_fn") if args[name] is not None]
    if args["collate_fn"] is not None and args["collate_fn"] is not default_collate:
        given.append("collate_fn")
    if given:
        return f"{', '.join(given)} given: your code runs as torch's DataLoader runs it"
    if args["batch_size"] is None:
        return "batch_size=None: unbatched samples"
    if source.transform is None:
        return "the dataset has no transform: its samples are PIL images"
    return None


def _threads_pipeline(source: FileSource, files: JpegDataset):
    """``(pipeline, None)``: the native pipeline of the dataset's transform, or else its traced
    pipeline (:class:`~fastprep.data.traced.TracedPipeline`: the user's code run per sample on a
    stand-in image, its recorded ops replayed); ``(None, reason)`` where neither applies."""
    compiled = None
    if input_kind(source.transform) in ("decoded", "pil"):
        try:
            return native_pipeline(files.transform), None
        except Unsupported as e:
            compiled = str(e)
    try:
        return TracedPipeline.compile(source.transform, getattr(files.transform, "max_pixels", 0)), None
    except Unsupported as e:
        traced = str(e)
    if compiled is None:
        return None, (f"the transform is a {type(source.transform).__name__}, a callable fastprep does not compile "
                      f"(it compiles torchvision's transforms and Compose of them), and {traced}")
    return None, f"{compiled}; and {traced}"


def _file_transform(transform: Any) -> Any:
    """The per-file transform that gives ``transform`` what the dataset gives it, a PIL image as
    ``Image.open(f).convert("RGB")`` makes it: a pipeline whose first step makes that image a
    uint8 tensor (v2 ``ToImage``/``PILToTensor``) runs on fastprep's decode (the same pixels);
    any other on the PIL image itself, natively where its steps are PIL-exact
    (:class:`~fastprep.transforms.OnPIL`)."""
    return OnDecoded(transform) if takes_pil_as_tensor(transform) else OnPIL(transform)


class _Epochs(EpochControl):
    """make_loader's epoch control, leaving a sampler of the user's alone (torch's DataLoader
    never calls its ``set_epoch``; the user does)."""

    def set_epoch(self, epoch: int) -> None:
        if isinstance(self.sampler, EpochSampler):
            self.sampler.set_epoch(epoch)
        self.dataset.set_epoch(epoch)


class _Boxed:
    """A collated batch, carried through the prefetcher untouched (any structure the
    ``collate_fn`` makes: named tuples, custom objects), with its sample count for resuming."""

    __slots__ = ("batch", "sample_count", "skipped")

    def __init__(self, batch, sample_count: int, skipped: tuple = ()):
        self.batch = batch
        self.sample_count = sample_count
        #: the SkippedFile records of the samples substituted in this batch
        self.skipped = skipped

    def pin_memory(self, device=None):
        """torch's ``pin_memory`` of the batch (what its DataLoader pins)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        return _Boxed(pin_memory(self.batch, device), self.sample_count, self.skipped)


class _BoxedCollate:
    """The user's ``collate_fn`` (or torch's default), its batch boxed (:class:`_Boxed`)."""

    def __init__(self, collate_fn, batched: bool):
        self.collate_fn = collate_fn
        self.batched = batched

    def __call__(self, samples):
        if not self.batched:
            if isinstance(samples, _Substituted):
                return _Boxed(self.collate_fn(samples.sample), 1, (samples.record,))
            return _Boxed(self.collate_fn(samples), 1)
        skipped = tuple(s.record for s in samples if isinstance(s, _Substituted))
        if skipped:
            samples = [s.sample if isinstance(s, _Substituted) else s for s in samples]
        return _Boxed(self.collate_fn(samples), len(samples), skipped)


def _named(error: Exception, path: str, index: int) -> Exception:
    """``error`` with the file named on its first line (same type), or ``error`` itself when its
    type cannot be rebuilt from a message."""
    try:
        named = type(error)(f"{path!r} (index {index}): {error}")
    except Exception:  # noqa: BLE001 - an exception type taking other arguments
        return error
    return named


class _KeyedDataset(Dataset):
    """The processes engine's view of the user's dataset: ``dataset[i]`` under
    ``sample_rng(seed, epoch, i)`` (with a seed), errors naming the file where it is known,
    ``on_error="skip"`` substitutes. The epoch and skip counts live in shared memory, so
    workers see the epoch the main process set and the main process sees their skips."""

    def __init__(self, dataset, seed: int | None, on_error: str, files: list[str] | None):
        self.dataset = dataset
        self.seed = seed
        self.on_error = on_error
        self.files = files
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.skip_counts = torch.zeros(_SLOTS, dtype=torch.int64).share_memory_()

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        self._epoch[0] = int(epoch)

    def _load(self, index: int):
        try:
            if self.seed is None:
                return self.dataset[index]
            with sample_rng(self.seed, int(self._epoch[0]), index):
                return self.dataset[index]
        except Exception as e:
            if self.files is None:
                raise
            named = _named(e, self.files[index], index)
            if named is e:
                raise
            raise named from e

    def __getitem__(self, index: int):
        if self.on_error == "raise":
            return self._load(index)
        try:
            return self._load(index)
        except Exception as e:  # noqa: BLE001 -- on_error="skip": any sample that raises
            failure = e
        n = len(self)
        for attempt in range(min(_MAX_SKIP_ATTEMPTS, n - 1)):
            try:
                sample = self._load(substitute_index(index, attempt, n))
            except Exception:  # noqa: BLE001, S112 -- the substitute raises too: the next one
                continue
            info = get_worker_info()
            self.skip_counts[0 if info is None else min(info.id + 1, _SLOTS - 1)] += 1
            path = self.files[index] if self.files is not None else f"index {index}"
            return _Substituted(sample, SkippedFile.from_error(index, path, failure))
        raise failure


class _Substituted(NamedTuple):
    """A substitute sample and the record of the one it replaces, on their way to
    :class:`_BoxedCollate` (which collates the sample and hands the record to the loader)."""

    sample: Any
    record: SkippedFile
