"""The one user-facing error type and how it reaches the terminal."""

from __future__ import annotations

import os
import sys

from training.config import ConfigError


class LauncherError(Exception):
    """Something the user can fix that is not a config value: cluster access, a name taken, ...
    Its message is one line that says what happened and what to do."""


USER_ERRORS = (ConfigError, LauncherError)


def report(error: BaseException) -> int:
    """Print `error` as one line (or re-raise it with HYDRA_FULL_ERROR=1) and return the exit code."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    print(f"error: {error}", file=sys.stderr)
    return 2
