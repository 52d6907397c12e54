"""Build the compiled parts of fastprep (metadata lives in pyproject.toml).

* ``fastprep._C``: the C++ torch extension (``torch.ops.fastprep.*``) over the
  system libjpeg-turbo.
* ``fastprep._kernels._color``: Cython kernels (RGB->YUV, scale, fused paths) over the C
  span kernels in ``_color_kernels.h``, with baseline, AVX2 and AVX-512 variants chosen at
  import (docs/kernels.md).

Build against the installed torch: ``pip install --no-build-isolation .``
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup


def _fail(msg):
    sys.stderr.write(f"\nfastprep build error: {msg}\n\n")
    raise SystemExit(1)


def _find_libjpeg():
    """Locate libjpeg-turbo headers and library; return (include_dirs, library_dirs, version)."""
    include_dirs, library_dirs = [], []
    if shutil.which("pkg-config"):
        try:
            cflags = subprocess.check_output(["pkg-config", "--cflags", "libjpeg"], text=True).split()
            libs = subprocess.check_output(["pkg-config", "--libs-only-L", "libjpeg"], text=True).split()
            include_dirs += [f[2:] for f in cflags if f.startswith("-I")]
            library_dirs += [f[2:] for f in libs if f.startswith("-L")]
        except (subprocess.CalledProcessError, OSError):
            pass
    prefix = os.environ.get("LIBJPEG_TURBO_ROOT")
    if prefix:
        include_dirs.insert(0, os.path.join(prefix, "include"))
        library_dirs.insert(0, os.path.join(prefix, "lib"))
    candidates = include_dirs + ["/usr/include", "/usr/local/include", "/opt/libjpeg-turbo/include"]
    header = None
    for d in candidates:
        if os.path.exists(os.path.join(d, "jpeglib.h")):
            header = d
            break
    if header is None:
        _fail(
            "jpeglib.h (libjpeg-turbo development headers) not found.\n"
            "  On Debian/Ubuntu: apt-get install libjpeg62-turbo-dev   (or libjpeg-turbo8-dev)\n"
            "  On Fedora/RHEL:   dnf install libjpeg-turbo-devel\n"
            "  Or set LIBJPEG_TURBO_ROOT to an install prefix."
        )
    # Read the version through the compiler so multiarch jconfig.h locations are honoured.
    version = "unknown"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "v.c")
        with open(src, "w") as f:
            f.write("#include <stdio.h>\n#include <jpeglib.h>\nLIBJPEG_TURBO_VERSION\n")
        try:
            cc = os.environ.get("CC", "cc")
            out = subprocess.check_output(
                [cc, "-E", "-P"] + [f"-I{d}" for d in [header] + include_dirs] + [src],
                text=True, stderr=subprocess.DEVNULL,
            )
            m = re.search(r"(\d+\.\d+\.\d+)\s*$", out.strip())
            if m:
                version = m.group(1)
            else:
                _fail("jpeglib.h was found but is not libjpeg-turbo (LIBJPEG_TURBO_VERSION undefined). "
                      "Install libjpeg-turbo's development package (Debian: libjpeg62-turbo-dev).")
        except (subprocess.CalledProcessError, OSError):
            pass
    return [header] + include_dirs, library_dirs, version


def _build_ext_class():
    """torch's BuildExtension for the C++ op; plain setuptools for the Cython modules.

    BuildExtension compiles every source with the C++ compiler and adds C++-only flags,
    which breaks Cython's C output, so only ``fastprep._C`` goes through it.
    """
    from setuptools.command.build_ext import build_ext as plain_build_ext
    from torch.utils.cpp_extension import BuildExtension

    class build_ext(BuildExtension.with_options(use_ninja=True)):
        def build_extensions(self):
            all_exts = self.extensions
            torch_exts = [e for e in all_exts if e.name == "fastprep._C"]
            for ext in all_exts:
                if ext not in torch_exts:
                    plain_build_ext.build_extension(self, ext)
            self.extensions = torch_exts
            try:
                super().build_extensions()
            finally:
                self.extensions = all_exts

    return build_ext


def _find_openssl():
    """``(macros, libraries)`` for TLS in the native S3 client (csrc/readers/http_get.cpp):
    OpenSSL's headers found (``apt-get install libssl-dev``) and ``FASTPREP_NO_OPENSSL`` unset,
    else none (the client then reads plain ``http://`` endpoints only; https goes through obstore)."""
    if os.environ.get("FASTPREP_NO_OPENSSL", "0") not in ("", "0"):
        return [], []
    for d in ["/usr/include", "/usr/local/include"]:
        if os.path.exists(os.path.join(d, "openssl", "ssl.h")):
            return [("FASTPREP_HAVE_OPENSSL", "1")], ["ssl", "crypto"]
    print("fastprep: OpenSSL headers not found: the native S3 client is built without TLS")
    return [], []


def _sanitizer_flags():
    """``FASTPREP_SANITIZE=1``: build the C++ op with AddressSanitizer and UBSan (for fuzzing
    and tests; Python then needs libasan preloaded, see docs/fuzzing.md)."""
    if os.environ.get("FASTPREP_SANITIZE", "0") in ("", "0"):
        return [], []
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined",
             "-g", "-O1"]
    return flags, ["-fsanitize=address,undefined"]


def main():
    from Cython.Build import cythonize
    from torch.utils.cpp_extension import CppExtension

    include_dirs, library_dirs, version = _find_libjpeg()
    ssl_macros, ssl_libraries = _find_openssl()
    print(f"fastprep: libjpeg-turbo {version} (headers in {include_dirs[0]})")
    san_compile, san_link = _sanitizer_flags()
    if san_compile:
        print(f"fastprep: sanitizers for the C++ op: {' '.join(san_compile)}")

    csrc = "csrc"
    # csrc/ and its layer folders (jpeg/, ops/, batch/, readers/)
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(csrc) for f in names)
    sources = [f for f in files if f.endswith(".cpp")]
    headers = [f for f in files if f.endswith(".h")]
    cpp_ext = CppExtension(
        "fastprep._C",
        sources=sources,
        include_dirs=include_dirs + [os.path.abspath(csrc)],
        library_dirs=library_dirs,
        libraries=["jpeg"] + ssl_libraries,
        depends=headers,
        # No FP contraction: the batch op's float conversion and the pixel kernels must round
        # each multiply and add as the torch code they reproduce does (they write fma where
        # torch fuses one). -fno-trapping-math changes no value (IEEE rounding, NaNs, signed
        # zeros and reciprocals stay as written); it lets loops whose selects compare floats
        # vectorize (the pixel kernels).
        extra_compile_args={"cxx": ["-O3", "-ffp-contract=off", "-fno-trapping-math"] + san_compile},
        extra_link_args=san_link,
        define_macros=[("FASTPREP_LIBJPEG_VERSION", f'"{version}"')] + ssl_macros,
    )
    cython_exts = cythonize(
        [
            Extension(
                "fastprep._kernels._color",
                ["fastprep/_kernels/_color.pyx"],
                depends=["fastprep/_kernels/_color_kernels.h"],
                # The AVX2 / AVX-512 variants are selected at run time by per-function
                # target attributes inside the module, so the module itself stays at the
                # x86-64 baseline and imports on any CPU. No FP contraction: no variant
                # may fuse a multiply-add, which keeps the variants bit-identical.
                extra_compile_args=["-O3", "-ffp-contract=off"],
            ),
        ],
        compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
        quiet=True,
    )
    setup(ext_modules=[cpp_ext] + cython_exts, cmdclass={"build_ext": _build_ext_class()})


if __name__ == "__main__":
    main()
