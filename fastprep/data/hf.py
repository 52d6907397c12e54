"""Hugging Face ``datasets`` on the threads engine: :func:`hf_source`.

A ``datasets.Dataset`` with an ``Image()`` column and a transform set by ``set_transform`` /
``with_transform`` -- the idiom of Hugging Face's image-classification examples::

    def preprocess(batch):
        batch["pixel_values"] = [train_tf(image.convert("RGB")) for image in batch["image"]]
        del batch["image"]
        return batch

    ds = load_from_disk("imagenet-train").with_transform(preprocess)
    loader = fastprep.data.DataLoader(ds, batch_size=256, shuffle=True, num_workers=8, seed=0)

gives, for index ``i``, ``preprocess({column: [value of row i]})`` unnested to one row:
``{"label": 3, "pixel_values": tensor}``. The drop-in reads such a dataset without Hugging
Face's per-row formatting and without decoding the image with Pillow:

* the image column's **encoded bytes** come straight from the Arrow table (a view of the
  memory-mapped buffer, no copy; a row that holds only a local ``path`` is read from it);
* the transform is **traced** (:class:`~fastprep.data.traced.TracedPipeline`): it is called per
  sample under the sample's seeds on a stand-in image, with stand-ins for the other columns
  (:class:`_Column`), and its recorded ops are replayed natively on the JPEG's decoded window;
* each output key is either the image's views (tensors made by ``ToTensor``/``PILToTensor``)
  or a column passed through unchanged (``batch["label"]``); the loader collates the
  passed-through columns from the dataset itself (``default_collate`` of the rows' values,
  as torch's DataLoader collates the samples' dicts).

A sample Hugging Face would not hand over as the JPEG's own pixels -- not a three-component
JPEG (``datasets`` gives a gray JPEG as an ``"L"`` image, a PNG as it is stored), or one with an
EXIF orientation (``datasets`` applies ``exif_transpose``) -- runs as written: the column's
own ``decode_example`` and the transform, under the same seeds. Either way the batch is
``default_collate([ds[i] for i in batch_indices])`` under ``sample_rng(seed, epoch, i)``, bit
for bit.

A transform that computes anything from the other columns (``label + 1``, a lookup, a
comparison), a dataset with two image columns, an ``Image(decode=False)`` column, a format
other than a custom transform (``with_format("torch")``), or rows whose images live behind
remote paths run as written on the processes engine, and ``DataLoader.engine_reason`` says
which. ``datasets`` is never imported by fastprep: a dataset is recognised by its class.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import default_collate

from ._files import read_regular_file
from .datasets import JpegDataset
from .fallback import exif_orientation
from .sources import NoFileSource

__all__ = ["HFSource", "HFImages", "hf_source", "is_hf_dataset"]


def is_hf_dataset(dataset: Any) -> bool:
    """True for a ``datasets.Dataset`` (map-style; ``datasets`` already imported by the caller)."""
    module = sys.modules.get("datasets")
    cls = getattr(module, "Dataset", None) if module is not None else None
    return isinstance(cls, type) and isinstance(dataset, cls)


class _ColumnRead(TypeError):
    """The traced transform used a column's value: it runs as written."""


class _Column:
    """Stand-in for a non-image column's value while a transform is traced. Passing it
    through (``batch["label"]`` into the output) is all it allows: reading it -- comparing,
    hashing, converting, arithmetic, attributes -- raises :class:`_ColumnRead`, so a
    transform whose result depends on a column's value is never traced as if it did not."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def _read(self, *args, **kwargs):
        raise _ColumnRead(f"the transform reads column {object.__getattribute__(self, 'name')!r} (only columns "
                          "passed through unchanged are read by the loader itself)")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _read
    __bool__ = __int__ = __float__ = __index__ = __len__ = __iter__ = __getitem__ = _read
    __contains__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _read
    __floordiv__ = __mod__ = __neg__ = __str__ = __format__ = __array__ = __call__ = _read

    def __getattr__(self, name: str):
        self._read()

    def __repr__(self) -> str:
        return f"<column {object.__getattribute__(self, 'name')!r} (traced)>"


class _RowCall:
    """The user's batch transform as a transform of one image: builds the one-row batch
    ``{column: [value]}`` the way ``datasets`` does (the columns of the dataset's format, in
    the table's order; the image column holding ``image``, every other a :class:`_Column`),
    calls the transform, unnests the row and returns the image's views, flat (one tensor, or
    a list when there are several). ``template`` records, per output key, ``("views", n)``
    (one view, ``n`` = 0, or a list of ``n`` views) or ``("column", name)``."""

    def __init__(self, fn, image_column: str, columns: list[str], extra: list[str]) -> None:
        self.fn = fn
        self.image_column = image_column
        self.columns = columns
        self.extra = extra  # output_all_columns: the other columns, appended as datasets does
        self.template: tuple | None = None

    def __call__(self, image):
        batch = {c: [image if c == self.image_column else _Column(c)] for c in self.columns}
        out = self.fn(batch)
        if not isinstance(out, Mapping):
            raise TypeError(f"the transform returned a {type(out).__name__}, not a dict of lists (datasets needs one "
                            "to pick a row)")
        row = {key: value[0] for key, value in out.items()}
        for c in self.extra:
            row[c] = _Column(c)
        views: list = []
        template = []
        for key, value in row.items():
            if isinstance(value, torch.Tensor):
                views.append(value)
                template.append((key, "views", 0))
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
                views.extend(value)
                template.append((key, "views", len(value)))
            elif type(value) is _Column:
                template.append((key, "column", object.__getattribute__(value, "name")))
            else:
                raise _ColumnRead(f"the transform's output {key!r} is a {type(value).__name__} (only the image's "
                                  "tensors and columns passed through unchanged run natively)")
        if not views:
            raise _ColumnRead("the transform's output holds no tensor made from the image")
        found = tuple(template)
        if self.template is None:
            self.template = found
        elif found != self.template:
            raise ValueError(f"the transform's output changed layout ({found} after {self.template}): a batch "
                             "needs one")
        shaped = [t for t in found if t[1] == "views"]
        return views[0] if len(shaped) == 1 and shaped[0][2] == 0 else views


class _StoredImage:
    """The per-sample transform of encoded bytes: the image as the column's own
    ``decode_example`` gives it, then :class:`_RowCall`."""

    def __init__(self, feature, call: _RowCall) -> None:
        self.feature = feature
        self.call = call

    def open(self, data: bytes):
        return self.feature.decode_example({"bytes": data, "path": None})

    def __call__(self, data: torch.Tensor):
        return self.call(self.open(data.numpy().tobytes()))

    def reason(self, data: torch.Tensor, components: int | None) -> str | None:
        """Why ``datasets`` would not give this image as the JPEG's decoded RGB pixels
        (``components``: the JPEG's, ``None`` for another format), or ``None`` when it would:
        another format or mode (given as stored), or EXIF data (``exif_transpose``)."""
        if components is None:
            return "not a JPEG (datasets gives it as stored)"
        if self.feature.mode is None and components != 3:
            return f"a {components}-component JPEG (datasets gives it in its own mode)"
        head = data[:1 << 16].numpy().tobytes()
        if b"Exif\x00\x00" in head and exif_orientation(head) != 1:
            return "a JPEG with EXIF data (datasets applies its orientation)"
        return None


class HFImages(JpegDataset):
    """The encoded images of a ``datasets.Dataset``'s ``Image()`` column, as a
    :class:`~fastprep.data.JpegDataset`: ``read_encoded(i)`` is row ``i``'s bytes (a view of
    the Arrow buffer; a row that holds only a local ``path``: that file's bytes); ``targets``
    are the row indices (the loader collates the other columns itself); ``files`` name the
    rows for errors (``"<column>[i]"``, or the row's path where it has one)."""

    def __init__(self, dataset, column: str, transform, on_error: str = "raise", seed=None) -> None:
        super().__init__([], None, transform, on_error, seed=seed)
        n = len(dataset)
        table = dataset.data.table
        indices = getattr(dataset, "_indices", None)
        rows = np.arange(n, dtype=np.int64) if indices is None else \
            indices.column(0).to_numpy().astype(np.int64)
        import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

        chunk_of, local, starts, lengths, valid = [], [], [], [], []
        self._buffers: list[torch.Tensor] = []
        self._path_chunks: list = []  # per chunk, its paths (an Arrow array), read for rows without bytes
        for k, chunk in enumerate(table.column(column).chunks):
            fields = {f.name: a for f, a in zip(chunk.type, chunk.flatten())}
            data = fields.get("bytes")
            if data is None:
                raise NoFileSource(f"the {column!r} column has no bytes field")
            if not (pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type)):
                data = data.cast(pa.large_binary())
            buffers = data.buffers()
            dtype = np.int64 if pa.types.is_large_binary(data.type) else np.int32
            offsets = np.frombuffer(buffers[1], dtype=dtype)[data.offset:data.offset + len(data) + 1] \
                if len(data) else np.zeros(1, dtype)
            starts.append(offsets[:-1].astype(np.int64))
            lengths.append(np.diff(offsets).astype(np.int64))
            ok = np.asarray(data.is_valid().to_numpy(zero_copy_only=False), dtype=bool) & \
                np.asarray(chunk.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            valid.append(ok)
            chunk_of.append(np.full(len(data), k, dtype=np.int32))
            local.append(np.arange(len(data), dtype=np.int64))
            path = fields.get("path")
            self._path_chunks.append(path)
            if not ok.all():
                missing = [None] * int((~ok).sum()) if path is None else path.filter(pa.array(~ok)).to_pylist()
                bad = [p for p in missing if p is None or "://" in p]
                if bad:
                    raise NoFileSource(f"rows of the {column!r} column hold no bytes and no local path ({bad[0]!r})")
            body = buffers[2]
            with warnings.catch_warnings():  # Arrow's buffers are read-only: only read from here
                warnings.simplefilter("ignore", UserWarning)
                self._buffers.append(torch.from_numpy(np.frombuffer(body, dtype=np.uint8))
                                     if body is not None and body.size else torch.empty(0, dtype=torch.uint8))

        def cat(parts: list, dt) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dt)

        self._chunk = cat(chunk_of, np.int32)[rows]
        self._local = cat(local, np.int64)[rows]
        self._start = cat(starts, np.int64)[rows]
        self._length = cat(lengths, np.int64)[rows]
        self._valid = cat(valid, bool)[rows]
        self.column = column
        self.files = _RowNames(column, n)  # type: ignore[assignment]
        self.targets = range(n)  # type: ignore[assignment]

    #: the loader's readers plan whole batches (fallback_reason routes nothing elsewhere)
    plans_in_batches = True

    def fallback_reason(self, data: torch.Tensor) -> str | None:
        return None  # the transform decodes every format itself, as datasets does

    def read_encoded(self, index: int) -> tuple[torch.Tensor, str]:
        name = self.files[index]
        if not self._valid[index]:
            path = self._path_chunks[int(self._chunk[index])][int(self._local[index])].as_py()
            return read_regular_file(path), path
        start, length = int(self._start[index]), int(self._length[index])
        return self._buffers[int(self._chunk[index])][start:start + length], name


class _RowNames(Sequence):
    """``"<column>[i]"`` for every row, without a list of strings."""

    def __init__(self, column: str, n: int) -> None:
        self.column, self.n = column, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return f"{self.column}[{i % self.n}]"


class HFSource(NamedTuple):
    """What the drop-in needs of a ``datasets.Dataset`` (:func:`hf_source`)."""

    dataset: Any
    column: str
    transform: Any  # the user's batch transform
    call: _RowCall
    stored: _StoredImage
    mode: str | None  # the Image feature's mode (None: as stored)

    def images(self, on_error: str, seed) -> HFImages:
        return HFImages(self.dataset, self.column, self.stored, on_error, seed)

    def columns(self) -> dict[str, list]:
        """The passed-through columns' values (``datasets``' Python values, per row)."""
        assert self.call.template is not None
        names = [t[2] for t in self.call.template if t[1] == "column"]
        plain = self.dataset.with_format(None)
        return {name: list(plain[name]) for name in dict.fromkeys(names)}


def hf_source(dataset) -> HFSource:
    """The image column, transform and layout of a ``datasets.Dataset`` (see the module's
    docstring).

    Raises:
        NoFileSource: the dataset runs as written; the message says why.
    """
    fmt = dataset.format
    if fmt["type"] != "custom":
        kind = "no format" if fmt["type"] is None else f"with_format({fmt['type']!r})"
        raise NoFileSource(f"the datasets.Dataset has {kind} and no transform of its images (set_transform / "
                           "with_transform make the samples tensors the loader builds natively)")
    fn = fmt["format_kwargs"].get("transform")
    if not callable(fn):
        raise NoFileSource("the datasets.Dataset's custom format has no transform")
    features = dataset.features
    table_columns = list(dataset.data.table.column_names)
    columns = [c for c in table_columns if c in fmt["columns"]]
    extra = [c for c in table_columns if c not in fmt["columns"]] if fmt["output_all_columns"] else []
    images = [c for c in columns if type(features[c]).__name__ == "Image"
              and type(features[c]).__module__.startswith("datasets.")]
    if len(images) != 1:
        raise NoFileSource(f"the transform is given {len(images)} Image() columns ({images}); one is read natively")
    column = images[0]
    feature = features[column]
    if not feature.decode:
        raise NoFileSource(f"column {column!r} is Image(decode=False): the transform is given bytes, not images")
    mode = feature.mode
    if mode not in (None, "RGB"):
        raise NoFileSource(f"column {column!r} is Image(mode={mode!r}); an image as stored or RGB is read natively")
    call = _RowCall(fn, column, columns, extra)
    return HFSource(dataset, column, fn, call, _StoredImage(feature, call), mode)


def collate_columns(template: tuple, views, rows: torch.Tensor, columns: dict[str, list]) -> dict:
    """The batch of dict samples: per output key in ``template``'s order, the views' batch
    (one tensor, or a list of ``n``) or ``default_collate`` of the passed-through column's
    values at ``rows``."""
    views = views if isinstance(views, list) else [views]
    at = rows.tolist()
    out: dict = {}
    k = 0
    for key, kind, arg in template:
        if kind == "column":
            out[key] = default_collate([columns[arg][i] for i in at])
        elif arg == 0:
            out[key] = views[k]
            k += 1
        else:
            out[key] = views[k:k + arg]
            k += arg
    return out

