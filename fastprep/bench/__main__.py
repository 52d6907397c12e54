"""``python -m fastprep.bench``: see :mod:`fastprep.bench.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
