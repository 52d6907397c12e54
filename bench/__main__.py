"""``bench/`` holds the project's micro-benchmarks (``python bench/bench_<name>.py``); the
benchmark users run is the package's ``fastprep/bench/`` (``python -m fastprep.bench``).

This file exists for one mistake. Run from the folder that *holds* a checkout named
``fastprep``, ``python -m fastprep.bench`` imports the checkout folder itself as a namespace
package ``fastprep`` (it comes first on ``sys.path``, and an editable install does not win
over it), finds this folder as ``fastprep.bench`` and runs this file instead of the
benchmark. Say so in one line instead of Python's puzzling "cannot be directly executed".
"""

import os
import sys

_checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __spec__ is not None and __spec__.name == "fastprep.bench.__main__":
    print(f"python -m fastprep.bench: the fastprep checkout {_checkout!r} in the current folder hides the "
          "installed package; run the command from inside the checkout or from any other folder", file=sys.stderr)
else:
    print("bench/ holds fastprep's micro-benchmarks: run one as python bench/bench_<name>.py (the benchmark "
          "with pipelines, workers and a trainer is python -m fastprep.bench)", file=sys.stderr)
sys.exit(2)
