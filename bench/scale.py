"""Scaling benchmark: `python bench/scale.py [--quick] [--only TEXT] [--out FILE]`.

Same as `axsim bench`: wall time, peak RSS, events, events/s and the ratio to the raw
simpy event rate measured in the same run, for the cases of simulator/trials/scaling.py.
"""

import sys

from simulator.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
