"""How a node's peer copies reach the other nodes: each node serves the `peer/` directory of its memory
volume over HTTP (one server per node, in its first process), and the others put, get and remove
files there. HTTP rather than the training's process group: a copy and a recovery move files between
two nodes whenever one is ready, with no collective every rank must enter; a recovery reads only the
items its rank needs (`RemoteFile`: byte ranges); and the server of a node that died is simply gone (the
request fails at once), where a collective with a dead peer waits out its timeout.

Paths are `step-<8 digits>/<name>` under the root; `GET /index` lists every file held with its size.
A file put is written beside its place and renamed into it: it is there whole or not at all.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

TIMEOUT_S = 60.0  # a request to a live node answers long before; a dead node's refuses at once
CHUNK = 1 << 20


class PeerError(OSError):
    """A node's server could not be reached or refused a request."""


def held_files(root: Path) -> dict[str, dict[str, int]]:
    """Step directory -> {file name: size} of every file under `root` (temporary ones left out)."""
    found: dict[str, dict[str, int]] = {}
    if root.is_dir():
        for step in root.glob("step-*"):
            found[step.name] = {str(f.relative_to(step)): f.stat().st_size for f in step.rglob("*")
                                if f.is_file() and ".tmp-" not in f.name}
    return found


def _local_path(root: Path, path: str) -> Path | None:
    """The file a request names, or None when it names anything outside a step directory."""
    parts = path.strip("/").split("/")
    if not parts[0].startswith("step-") or any(p in ("", ".", "..") for p in parts):
        return None
    return root.joinpath(*parts)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept open: a recovery asks one node for many ranges
    root: Path

    def log_message(self, *args) -> None:  # the training log is not the server's access log
        pass

    def _reply(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(code)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/index":
            self._reply(200, json.dumps(held_files(self.root)).encode())
            return
        path = _local_path(self.root, self.path)
        if path is None or not path.is_file():
            self._reply(404)
            return
        size = path.stat().st_size
        start, end = 0, size - 1
        if rng := self.headers.get("Range"):  # bytes=a-b: one range, what RemoteFile asks for
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start, end = int(a), min(int(b) if b else size - 1, size - 1)
        length = max(0, end - start + 1)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            while length > 0 and (block := f.read(min(CHUNK, length))):
                self.wfile.write(block)
                length -= len(block)

    def do_PUT(self) -> None:
        path = _local_path(self.root, self.path)
        length = int(self.headers.get("Content-Length", 0))
        if path is None:
            self.rfile.read(length)
            self._reply(400)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{threading.get_ident()}")
        try:
            with open(tmp, "wb") as f:
                while length > 0 and (block := self.rfile.read(min(CHUNK, length))):
                    f.write(block)
                    length -= len(block)
            if length:
                raise OSError("the body ended early")
            os.replace(tmp, path)
        except OSError as e:  # e.g. the memory volume is full
            tmp.unlink(missing_ok=True)
            self._reply(507, str(e).encode())
            return
        self._reply(201)

    def do_DELETE(self) -> None:
        path = _local_path(self.root, self.path)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        self._reply(204 if path is not None else 400)


class NodeServer:
    """This node's peer directory, served to the other nodes from a daemon thread for the life of the
    process (under in-place restarts, across world sizes)."""

    def __init__(self, root: Path, host: str):
        root.mkdir(parents=True, exist_ok=True)
        handler = type("PeerHandler", (_Handler,), {"root": root})
        self._server = ThreadingHTTPServer(("127.0.0.1" if host == "127.0.0.1" else "0.0.0.0", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="peer-server", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _request(url: str, method: str, body=None, headers: dict | None = None) -> bytes:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
    try:
        conn.request(method, parts.path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
    except OSError as e:
        raise PeerError(f"{method} {url}: {e}") from None
    finally:
        conn.close()
    if response.status >= 300:
        raise PeerError(f"{method} {url}: HTTP {response.status} {data[:200].decode(errors='replace')}".strip())
    return data


def fetch(url: str) -> bytes:
    return _request(url, "GET")


def send(url: str, data: bytes | Path) -> None:
    """Put `data` (bytes, or a file's bytes streamed) at `url`."""
    if isinstance(data, Path):
        with open(data, "rb") as f:
            _request(url, "PUT", f, {"Content-Length": str(data.stat().st_size)})
    else:
        _request(url, "PUT", data, {"Content-Length": str(len(data))})


def remove(url: str) -> None:
    _request(url, "DELETE")


def index(server: str) -> dict[str, dict[str, int]]:
    return json.loads(fetch(f"{server}/index"))


class RemoteFile(io.RawIOBase):
    """A file on another node, read as the byte ranges asked for (one connection, kept open)."""

    def __init__(self, url: str, size: int):
        parts = urlsplit(url)
        self.name, self.size, self._path, self._pos = url, size, parts.path, 0
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = {0: 0, 1: self._pos, 2: self.size}[whence] + offset
        return self._pos

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self.size - self._pos)
        if want <= 0:
            return 0
        try:
            self._conn.request("GET", self._path, headers={"Range": f"bytes={self._pos}-{self._pos + want - 1}"})
            response = self._conn.getresponse()
            if response.status != 206:
                raise PeerError(f"GET {self.name}: HTTP {response.status}")
            got = response.readinto(memoryview(buffer)[:want])
        except (OSError, http.client.HTTPException) as e:
            raise PeerError(f"GET {self.name}: {e}") from None
        self._pos += got
        return got

    def close(self) -> None:
        self._conn.close()
        super().close()
