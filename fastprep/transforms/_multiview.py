"""Several views of one image: :class:`MultiView` (multi-crop for DINO / SimCLR / BYOL, repeated
augmentation)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import io as fio
from ._compile import input_kind
from ._decode import Mode, OnDecoded, _encoded, _file_named, is_decode_transform
from ._pil import OnPIL

__all__ = ["MultiView", "register_per_sample_runner"]

#: ``runner(multiview, tensor) -> list | None``: the views of one encoded JPEG planned as one
#: decode (the loader's union plan), or ``None`` where it does not apply. Set by
#: :mod:`fastprep.data` when it is imported (this layer does not import the data layer).
_per_sample_runner: Callable[[Any, torch.Tensor], list | None] | None = None


def register_per_sample_runner(runner: Callable[[Any, torch.Tensor], list | None] | None) -> None:
    """Set the function :meth:`MultiView.forward` first offers each sample to (``None``: none).

    ``runner(multiview, tensor)`` returns the views of the encoded JPEG ``tensor``, drawn from
    the default generator in view order exactly as the views themselves draw, or ``None``
    without having drawn anything (then the views run one by one)."""
    global _per_sample_runner
    if runner is not None and not callable(runner):
        raise TypeError(f"runner must be callable or None, got {type(runner).__name__}")
    _per_sample_runner = runner


class MultiView(torch.nn.Module):
    """Several views of one image: ``MultiView(views)(data)`` is ``[view(data) for view in views]``.

    Each view is a pipeline on the encoded file (a fastprep decode transform first, such as
    ``DecodeRandomResizedCrop``) or an unchanged torchvision v2 pipeline on decoded images
    (which sees the file decoded by :func:`fastprep.io.decode_jpeg`, as :class:`OnDecoded`
    would give it), or a pipeline on PIL images (wrapped in :class:`OnPIL`: it sees
    ``Image.open(f).convert("RGB")``). The views draw their random parameters one after the other, in list order,
    exactly as the list comprehension would; the v2 views share one decode of the file (the
    same pixels as decoding it again per view).

    ``make_loader(transform=MultiView(...))`` yields ``(views, targets)`` with ``views`` a list
    of batches, one per view. The threads engine decodes each image once per DCT scale its views
    use (the union of their windows; ``docs/multiview.md``), and gives the same bits as this
    per-sample call, which the processes engine runs.

    The per-sample call plans the views as the threads engine does -- one decode of the file for
    all of them (one per DCT scale their windows use), then each view cut, resized and
    augmented from it natively, on the calling thread -- once :mod:`fastprep.data` has been
    imported (it registers that path; ``import fastprep.transforms`` alone keeps the
    view-by-view path) and the views compile natively. Both paths give the same bits under the
    same seed; a file the native path does not take (not a JPEG, a decode warning or error),
    and a call under a torch function mode, run view by view from the same generator state.

    Repeated augmentation: ``MultiView([view] * k)`` (the same object k times; each repetition
    draws its own parameters).

    Args:
        views: the per-view pipelines (at least one).
        mode, max_pixels, strict, max_scans: the decode of the v2 views (see :class:`OnDecoded`).

    Output: a list with one tensor per view.
    """

    def __init__(self, views: Sequence[Any], mode: Mode = "RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS,
                 strict: bool = False, max_scans: int | None = None) -> None:
        super().__init__()
        views = list(views) if not isinstance(views, (str, bytes)) else []
        if not views:
            raise ValueError("MultiView needs at least one view")
        for k, view in enumerate(views):
            if not callable(view):
                raise TypeError(f"views[{k}] must be callable, got {type(view).__name__}")
        # a view written for PIL images opens the file as ImageFolder does (OnPIL)
        self.views = [OnPIL(v, max_pixels=max_pixels) if input_kind(v) == "pil" else v for v in views]
        self._decoded = [input_kind(v) == "decoded" for v in self.views]
        self.decode = OnDecoded(_Identity(), mode, max_pixels=max_pixels, strict=strict, max_scans=max_scans)

    @property
    def mode(self) -> Mode:
        return self.decode.mode

    def view_transforms(self) -> list[Any]:
        """Each view as a transform of the encoded file: the v2 views wrapped in :class:`OnDecoded`
        (with this MultiView's decode options), the others as they are."""
        d = self.decode
        return [OnDecoded(v, d.mode, max_pixels=d.max_pixels, strict=d.strict, max_scans=d.max_scans)
                if decoded else v for v, decoded in zip(self.views, self._decoded)]

    def forward(self, data: Any) -> list:
        """The views of one encoded image (a path, bytes or a uint8 1-D tensor)."""
        tensor, path = _encoded(data, type(self).__name__)
        if _per_sample_runner is not None:
            views = _per_sample_runner(self, tensor)
            if views is not None:
                return views
        image = None
        out = []
        for view, decoded in zip(self.views, self._decoded):
            if not decoded:
                with _file_named(path):
                    out.append(view(tensor))
                continue
            if image is None:
                with _file_named(path):
                    image = self.decode(tensor)
            # a view that modifies its input in place must not change what the next one sees
            out.append(view(image if is_geometry_first(view) else image.clone()))
        return out

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_fastprep_native", None)  # the per-sample runner's compiled pipeline (rebuilt)
        return state

    def decoded_equivalent(self) -> Any:
        """The views on a decoded image, for files fastprep's JPEG decode does not take (the
        dataset's full-decode fallback); ``None`` where a view has no such form."""
        from torchvision.transforms import v2

        def equivalent(view, decoded):
            if decoded:
                return view
            hook = getattr(view, "decoded_equivalent", None)
            return hook() if callable(hook) else None

        views = [equivalent(v, d) for v, d in zip(self.views, self._decoded)]
        if any(v is None for v in views):
            return None
        return _ViewsOnImage([v2.Compose([v]) for v in views])

    def extra_repr(self) -> str:
        return f"views={len(self.views)}, mode={self.mode!r}"


class _Identity(torch.nn.Module):
    def forward(self, x):
        return x


class _ViewsOnImage(torch.nn.Module):
    """Each view applied to the same decoded image, in order."""

    def __init__(self, views):
        super().__init__()
        self.views = views

    def forward(self, image):
        return [view(image.clone()) for view in self.views]


def is_geometry_first(view: Any) -> bool:
    """Whether ``view``'s first step makes a new image (a crop or resize): then the shared
    decoded image can be handed to it without a copy."""
    from torchvision.transforms import v2

    first = view
    while isinstance(first, v2.Compose) and first.transforms:
        first = first.transforms[0]
    return isinstance(first, (v2.RandomResizedCrop, v2.Resize, v2.CenterCrop, v2.RandomCrop)) or \
        is_decode_transform(first)
