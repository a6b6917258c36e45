"""A CRC32 for every item of a DCP checkpoint, written as the item is written and checked on the very
bytes DCP reads to load it: a corrupted or truncated shard is caught without a second pass over the
files (each byte comes off the disk once).

It is a DCP stream extension: at save the item's bytes pass through `transform_to`, which appends
their CRC32 (4 bytes, little-endian) after them; the item's metadata records the extension, so at
load DCP hands the item's bytes, trailer included, to `transform_from`, which checks them before
torch.load sees them. Items saved without it (older checkpoints) load as they are.
"""

from __future__ import annotations

import io
import zlib

from torch.distributed.checkpoint._extension import ExtensionRegistry, StreamTransformExtension
from torch.distributed.checkpoint.filesystem import FileSystemWriter

TRAILER = 4


class ItemChecksumError(ValueError):
    """An item's bytes are not the bytes that were saved."""


class _ChecksummingWriter(io.RawIOBase):
    def __init__(self, output):
        self.output, self.crc = output, 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.crc = zlib.crc32(data, self.crc)
        return self.output.write(data)

    def close(self) -> None:
        if not self.closed:
            self.output.write(self.crc.to_bytes(TRAILER, "little"))
            self.output.close()
        super().close()


class ItemCrc32(StreamTransformExtension):
    @staticmethod
    def registry_name() -> str:
        return "crc32@elastic-launcher"

    @staticmethod
    def from_descriptor(version: str) -> "ItemCrc32":
        if version != "1":
            raise ValueError(f"unknown version {version!r} of the item checksum")
        return ItemCrc32()

    def get_descriptor(self) -> str:
        return f"{self.registry_name()}/1"

    def transform_to(self, output):
        return _ChecksummingWriter(output)

    def transform_from(self, input):
        data = input.read(-1)
        payload, trailer = memoryview(data)[:-TRAILER], data[-TRAILER:]
        if len(data) < TRAILER or zlib.crc32(payload) != int.from_bytes(trailer, "little"):
            raise ItemChecksumError(f"an item of {len(data)} bytes fails its checksum (corrupted or truncated bytes)")
        return io.BytesIO(payload)


def writer(path, threads: int = 1) -> FileSystemWriter:
    """DCP's file writer, every item with its checksum; `threads` files per rank, written at once."""
    return FileSystemWriter(path, thread_count=threads, _extensions=[ItemCrc32()])


def registry() -> ExtensionRegistry:
    """What a DCP reader needs to check every checksummed item it reads."""
    extensions = ExtensionRegistry()
    extensions.register(ItemCrc32)
    return extensions
