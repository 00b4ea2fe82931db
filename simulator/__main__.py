"""`python -m simulator ...` is the same as the `axsim` command."""

import sys

from simulator.cli import main

sys.exit(main())
