"""fastprep._kernels' shared pieces and the compiled interfaces they mirror: the one set of
YUV coefficients, the one ISA switch, jpeg_info's field list, and the ``.pyi`` stubs."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fastprep
from fastprep import _C, _ops
from fastprep._kernels import _color, coeffs, isa


def test_the_kernels_use_the_one_coefficient_tuple():
    assert _color.COEFFS is coeffs.YUV_COEFFS
    assert coeffs.YUV_COEFFS[1] == (-0.16874, -0.33126, 0.5, 128.0)  # JFIF 1.02 section 7
    # what the compiled kernel computes is those rows, rounded to float32
    rgb = torch.tensor([[[10.0], [200.0], [33.0]]]).numpy()
    out = torch.empty((1, 3, 1)).numpy()
    _color.yuv(rgb, out, 1.0)
    r, g, b = 10.0, 200.0, 33.0
    for c, (m0, m1, m2, o) in enumerate(coeffs.YUV_COEFFS):
        f = [torch.tensor(v, dtype=torch.float32) for v in (m0, m1, m2, o)]
        want = f[0] * r + f[1] * g + f[2] * b + f[3]
        assert out[0, c, 0] == want.item()


def test_set_isa_switches_the_colour_and_resize_kernels():
    try:
        assert isa.set_isa("baseline") == "baseline" == isa.active_isa()
        assert _C.native_isa(-1) == 0
        best = isa.set_isa("auto")
        assert best == isa.supported_isas()[-1]
        assert _C.native_isa(-1) == (1 if best != "baseline" else 0)
    finally:
        isa.set_isa("auto")


def test_fastprep_isa_reaches_the_resize_kernel():
    code = "import fastprep; from fastprep import _C; print(_C.native_isa(-1))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "FASTPREP_ISA": "baseline"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr[-2000:]


def test_jpeg_header_mirrors_the_cpp_field_list():
    assert _ops.JpegHeader._fields == _C.jpeg_info_fields
    assert len(_C.jpeg_info_fields) == 17


def test_jpeg_header_reads_the_op(photo_420):
    data = torch.frombuffer(bytearray(photo_420), dtype=torch.uint8)
    header = _ops.JpegHeader._make(torch.ops.fastprep.jpeg_info(data).tolist())
    info = fastprep.io.jpeg_info(data)
    assert (header.height, header.width, header.components) == (info.height, info.width, info.num_components)
    assert header.sampling_factors() == info.sampling_factors == ((2, 2), (1, 1), (1, 1))
    assert (header.h_samp3, header.v_samp3) == (0, 0)


def _stub_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("module", [_C, _color], ids=["_C", "_color"])
def test_stubs_list_every_public_name(module):
    stub = Path(module.__file__).parent / (module.__name__.rsplit(".", 1)[1] + ".pyi")
    public = {n for n in vars(module) if not n.startswith("_")}
    public -= {"cython_function_or_method"}
    assert _stub_names(stub) == public
