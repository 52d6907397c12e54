"""fastprep.transforms._plan: the decode transforms' integer geometry, pure Python.

The module promises no randomness and no torch: it is checked by reading its imports and
by loading it in a fresh interpreter. Its libjpeg scaled size must agree with
:func:`fastprep.io.scaled_size` (the public, argument-checked one).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fastprep.io as fio
from fastprep.transforms import _plan

PLAN_FILE = Path(_plan.__file__)


def test_imports_only_the_standard_typing_modules():
    tree = ast.parse(PLAN_FILE.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported <= {"__future__", "typing"}, imported


def test_loads_without_torch():
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('plan', {str(PLAN_FILE)!r})\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "assert module.plan_scaled_window(3000, 4000, (100, 200, 2000, 2400), (224, 224))[0] == 1\n"
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("num", range(1, 9))
def test_scaled_size_agrees_with_io(num):
    for length in list(range(0, 70)) + [65500, 12345]:
        assert _plan._scaled(length, num) == fio.scaled_size(length, 1, num)[0], (length, num)
        assert _plan._scaled(length, num) == fio.scaled_size(1, length, (num, 8))[1], (length, num)


def test_padded_plan_clips_the_window_to_the_image():
    # 10x20 image padded by (left 3, top 2): the window (0, 0, 6, 8) covers padded rows 0..5
    # and columns 0..7, i.e. image rows 0..3 and columns 0..4, placed at (2, 3).
    plan = _plan.padded_plan(10, 20, (0, 0, 6, 8), (3, 2, 0, 0))
    assert plan == _plan.DecodePlan(8, (0, 0, 4, 5), None, (6, 8), (2, 3))
    # A window entirely in the padding decodes one pixel and places nothing.
    assert _plan.padded_plan(10, 20, (0, 0, 2, 2), (3, 2, 0, 0)).offset is None


def test_center_crop_pads_as_torchvision():
    # torchvision pads (crop - size) // 2 before and the rest after, then crops the centre.
    assert _plan.center_crop(5, 8, (7, 4)) == ((0, 1, 0, 1), (0, 2, 7, 4))
    assert _plan.center_crop(100, 80, (50, 40)) == ((0, 0, 0, 0), (25, 20, 50, 40))


@pytest.mark.parametrize("ratio", [(3 / 4, 4 / 3), (0.5, 0.6), (2.0, 3.0), (1.0, 1.0)])
@pytest.mark.parametrize("hw", [(100, 100), (37, 211), (211, 37), (64, 48)])
def test_centered_ratio_window_is_v2s_fallback(hw, ratio):
    # scale (2, 2) asks for twice the image's area: no draw fits, v2 takes its fallback
    import torch
    from torchvision.transforms import v2

    h, w = hw
    params = v2.RandomResizedCrop(8, scale=(2.0, 2.0), ratio=ratio).make_params([torch.zeros(3, h, w)])
    assert _plan.centered_ratio_window(h, w, ratio) == (params["top"], params["left"], params["height"],
                                                        params["width"])
