"""`python -m demo.bench`: the benchmark's command line (demo.bench.cli.main)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
