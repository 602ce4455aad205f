#!/usr/bin/env python3
"""Start tmy from a checkout: ``python run.py`` (the daemon) or ``python run.py --help``."""

import sys

from tmy.cli import main

if __name__ == "__main__":
    sys.exit(main())
