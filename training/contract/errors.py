"""The user's mistakes: one exception type and one way to print it, shared by the launcher and the trainer."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration mistake a user can fix. Its message is one line: key, value and the fix."""


def report(error: BaseException) -> int:
    """Print a user error as one line on stderr (re-raise it with HYDRA_FULL_ERROR=1 for the
    traceback) and return exit code 2. Shared by the launcher and the trainer."""
    import os
    import sys

    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    # One write: under `python -u` print() writes the text and the newline separately, and the
    # ranks of a job sharing a terminal would interleave them into one line.
    sys.stderr.write(f"error: {error}\n")
    sys.stderr.flush()
    return 2
