"""The validation package's CLI commands, one module each (see validation/cli.py)."""
