"""`python -m demo.calibrate`: measure this machine for a preset (demo.calibrate.calibration.main)."""

import sys

from .calibration import main

if __name__ == "__main__":
    sys.exit(main())
