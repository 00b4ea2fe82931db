"""`python -m validation.torch4d ARGS` = `axsim trace-torch ARGS` (handy under torchrun:
`torchrun --nproc-per-node 4 -m validation.torch4d --grid 2,2,1,1 --out DIR`)."""

from __future__ import annotations

import sys

from simulator.cli import main

if __name__ == "__main__":
    sys.exit(main(["trace-torch", *sys.argv[1:]]))
