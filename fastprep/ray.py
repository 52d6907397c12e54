"""The name of earlier releases for :mod:`fastprep.data.ray` (the Ray Data engine, beside
the loader's other engines); everything here is that module's."""

from .data.ray import DecodeBatch, RayLoader, image_columns, read_jpegs

__all__ = ["DecodeBatch", "RayLoader", "image_columns", "read_jpegs"]
