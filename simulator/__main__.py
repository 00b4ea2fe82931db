"""`python -m simulator ...` is the same as the `axsim` command."""

import sys

try:
    from simulator.cli import main
except KeyboardInterrupt:  # Ctrl-C while the modules load: nothing started, nothing written
    sys.stderr.write("axsim: interrupted before it started\n")
    sys.exit(130)

sys.exit(main())
