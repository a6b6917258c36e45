"""Elastic training launcher: `python launcher.py recipes=<recipe> [overrides]` (see README.md and docs/)."""

import sys

from elastic_launcher.cli import main

if __name__ == "__main__":
    sys.exit(main())
