"""The one user-facing error type and how it reaches the terminal."""

from __future__ import annotations

from pathlib import Path

from training.contract.errors import ConfigError, report  # noqa: F401 - one way to print a user error, shared with the trainer


class LauncherError(Exception):
    """Something the user can fix that is not a config value: cluster access, a name taken, ...
    Its message is one line that says what happened and what to do."""


USER_ERRORS = (ConfigError, LauncherError)


def make_dir(path: Path, setting: str) -> Path:
    """`path` as a directory (parents made), or a LauncherError naming the setting that chose it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        file = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        why = f"{file} is a file" if file else f"cannot make the directory {path} ({e.strerror or type(e).__name__})"
        raise LauncherError(f"{setting}: {why}: set {setting} to a directory you can write") from None
    return path
