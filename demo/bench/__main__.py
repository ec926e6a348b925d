"""`python -m demo.bench`: the benchmark's command line (demo.bench.benchmark.main)."""

import sys

from .benchmark import main

if __name__ == "__main__":
    sys.exit(main())
