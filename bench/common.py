"""Helpers shared by the benchmarks: timing whole processes, medians, raw disk speed."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_process(args: list[str], runs: int, cwd: Path = ROOT, env: dict | None = None) -> float:
    """Median wall time of `runs` fresh processes (each a cold interpreter)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, **(env or {})})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def scratch() -> tempfile.TemporaryDirectory:
    """A temporary directory for a bench's runs, never inside the checkout: under $BENCH_TMPDIR where
    set (put it on the disk whose speed the bench should see), else the system's temporary directory."""
    return tempfile.TemporaryDirectory(prefix="elastic-bench-", dir=os.environ.get("BENCH_TMPDIR"))


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def evict(path: Path) -> None:
    """Drop `path` (a file or every file under a directory) from the page cache, so the next read
    comes from the disk: POSIX_FADV_DONTNEED after the data is synced."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def raw_disk_mb_per_s(directory: Path, nbytes: int) -> tuple[float, float]:
    """Sequential write (1 MiB blocks, fsync) and read of `nbytes` in `directory`: the floor any
    checkpoint writer or reader is measured against."""
    path, block = directory / "raw.bin", os.urandom(1 << 20)
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, nbytes >> 20)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    write = time.perf_counter() - start
    evict(path)
    start = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    read = time.perf_counter() - start
    path.unlink()
    mb = max(1, nbytes >> 20) * (1 << 20) / 1e6
    return mb / write, mb / read
