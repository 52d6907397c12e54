#!/usr/bin/env bash
# Packaging check: build an sdist, build a wheel from that sdist alone (against the
# installed torch, no build isolation: an isolated build would download a second,
# multi-GB torch), install the wheel into a FRESH virtual environment (no system site
# packages) with the dependencies it declares, and check, from a directory outside the
# source tree, that fastprep comes from the wheel and that its compiled ops load and decode.
# A dependency missing from pyproject.toml fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
here="$PWD/ci"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python -m build --sdist --no-isolation --outdir "$work/sdist" . >"$work/sdist.log" 2>&1 \
  || { tail -40 "$work/sdist.log"; exit 1; }
sdist="$(ls "$work"/sdist/fastprep-*.tar.gz)"
listing="$(tar tzf "$sdist")"
for f in $(git ls-files 'csrc/*' 'fastprep/_kernels/*.pyx' 'fastprep/_kernels/*.h' setup.py pyproject.toml MANIFEST.in README.md); do
  grep -qE "^fastprep-[^/]+/$f\$" <<<"$listing" || { echo "sdist lacks $f" >&2; exit 1; }
done

pip wheel --no-build-isolation --no-deps --wheel-dir "$work/wheel" "$sdist" >"$work/wheel.log" 2>&1 \
  || { tail -40 "$work/wheel.log"; exit 1; }
wheel="$(ls "$work"/wheel/fastprep-*.whl)"

# The torch the wheel was compiled against (its C++ ABI is tied to that release).
torch_version="$(python -c 'import torch; print(torch.__version__.split("+")[0])')"
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel" "torch==$torch_version" >"$work/install.log" 2>&1 \
  || { tail -40 "$work/install.log"; exit 1; }

mkdir "$work/elsewhere"
cd "$work/elsewhere"
"$work/venv/bin/python" -W error "$here/check_installed.py" "$work/venv"
