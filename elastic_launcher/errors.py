"""The one user-facing error type and how it reaches the terminal."""

from __future__ import annotations

from training.contract.errors import ConfigError, report  # noqa: F401 - one way to print a user error, shared with the trainer


class LauncherError(Exception):
    """Something the user can fix that is not a config value: cluster access, a name taken, ...
    Its message is one line that says what happened and what to do."""


USER_ERRORS = (ConfigError, LauncherError)
