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


def report_crash(error: BaseException, rank: str) -> int:
    """Print a failure that is no user error as one line, the exception that started it (the root of
    its `raise ... from` chain) with where it was raised, then its traceback for the log (a local
    run's terminal shows the first line only). Returns exit code 1."""
    import sys
    import traceback

    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    frames = traceback.extract_tb(root.__traceback__)
    where = f", {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    message = (str(root).strip().splitlines() or [""])[0]
    sys.stderr.write(f"error: {type(root).__name__}: {message} (rank {rank}{where})\n")
    sys.stderr.write("".join(traceback.format_exception(error)))
    sys.stderr.flush()
    return 1
