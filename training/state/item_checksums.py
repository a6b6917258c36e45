"""A CRC32 for every 64 KiB block of every item of a DCP checkpoint, written as the item is written
and checked on the very bytes a load reads: a corrupted or truncated shard is caught without a
second pass over the files (each byte comes off the disk once), and a rank that needs only part of
a stored tensor (a resize to more ranks) reads only the blocks holding that part.

It is a DCP stream extension: at save the item's bytes pass through `transform_to`, which appends
the blocks' CRC32s and their count after them (4 bytes each, little-endian); the item's metadata
records the extension. A load reads a tensor item's byte range straight into the destination
(`ChecksummedItem`, `tensor_layout`), or, for whole items, DCP hands the item's bytes to
`transform_from`, which checks them before torch.load sees them. Items saved with one CRC per item
(version 1) or with none load as they are.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zlib
from dataclasses import dataclass

from torch.distributed.checkpoint._extension import ExtensionRegistry, StreamTransformExtension
from torch.distributed.checkpoint.filesystem import FileSystemWriter

BLOCK = 64 << 10  # bytes per checksum: what a ranged read reads beyond its range, at most, at each end
NAME = "crc32@elastic-launcher"
BLOCKS_DESCRIPTOR = f"{NAME}/2"  # version 1: one CRC32 after the whole item


class ItemChecksumError(ValueError):
    """An item's bytes are not the bytes that were saved."""


class _BlockCrcs:
    """The CRC32s of consecutive BLOCK-byte blocks of a byte stream fed in pieces of any size."""

    def __init__(self):
        self.done, self.crc, self.filled = [], 0, 0

    def feed(self, data) -> None:
        view, at = memoryview(data).cast("B"), 0
        while at < len(view):
            take = min(BLOCK - self.filled, len(view) - at)
            self.crc = zlib.crc32(view[at : at + take], self.crc)
            self.filled, at = self.filled + take, at + take
            if self.filled == BLOCK:
                self.done.append(self.crc)
                self.crc = self.filled = 0

    def finish(self) -> list[int]:
        """Every block's CRC32, the last one short where the stream ended inside it."""
        return self.done + ([self.crc] if self.filled else [])


class _ChecksummingWriter(io.RawIOBase):
    def __init__(self, output):
        self.output, self.blocks = output, _BlockCrcs()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.blocks.feed(data)
        return self.output.write(data)

    def close(self) -> None:
        if not self.closed:
            crcs = self.blocks.finish()
            self.output.write(struct.pack(f"<{len(crcs)}I", *crcs) + struct.pack("<I", len(crcs)))
            self.output.close()
        super().close()


def _blocks(size: int) -> int:
    return -(-size // BLOCK)


def _payload_size(length: int, count: int) -> int:
    """The payload's size in an item of `length` bytes whose trailer counts `count` blocks."""
    size = length - 4 - 4 * count
    if count < 0 or size < 0 or _blocks(size) != count:
        raise ItemChecksumError(f"an item of {length} bytes has no valid checksum trailer (truncated bytes)")
    return size


def _check_blocks(first: int, segments, crcs) -> None:
    """Check the payload bytes from block `first` on, given as consecutive `segments` that end at a
    block's end or the payload's."""
    blocks = _BlockCrcs()
    for segment in segments:
        blocks.feed(segment)
    for block, crc in enumerate(blocks.finish(), start=first):
        if crc != crcs[block]:
            raise ItemChecksumError(f"block {block} of an item of {len(crcs)} blocks fails its checksum "
                                    f"(corrupted bytes)")


def element_span(size, stride) -> int:
    """Elements from a strided tensor's first to its last, both included (0 when it is empty)."""
    return 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0


class ItemCrc32(StreamTransformExtension):
    def __init__(self, version: str = "2"):
        self.version = version

    @staticmethod
    def registry_name() -> str:
        return NAME

    @staticmethod
    def from_descriptor(version: str) -> "ItemCrc32":
        if version not in ("1", "2"):
            raise ValueError(f"unknown version {version!r} of the item checksum")
        return ItemCrc32(version)

    def get_descriptor(self) -> str:
        return f"{NAME}/{self.version}"

    def transform_to(self, output):
        if self.version != "2":
            raise ValueError("only version 2 of the item checksum is written")
        return _ChecksummingWriter(output)

    def transform_from(self, input):
        data = memoryview(input.read(-1))
        if self.version == "1":
            payload, trailer = data[:-4], data[-4:]
            if len(data) < 4 or zlib.crc32(payload) != int.from_bytes(trailer, "little"):
                raise ItemChecksumError(f"an item of {len(data)} bytes fails its checksum (corrupted or truncated bytes)")
            return io.BytesIO(payload)
        count = int.from_bytes(data[-4:], "little") if len(data) >= 4 else -1
        size = _payload_size(len(data), count)
        _check_blocks(0, [data[:size]], struct.unpack_from(f"<{count}I", data, size))
        return io.BytesIO(data[:size])


class ChecksummedItem:
    """One version-2 item at `offset` in an open file: any byte range of its payload, read with every
    block it touches checked. `bytes_read` counts what came off the file."""

    def __init__(self, file, offset: int, length: int):
        self.fd, self.offset = file.fileno(), offset
        count = int.from_bytes(self._pread(length - 4, 4), "little")
        self.size = _payload_size(length, count)
        self.crcs = struct.unpack(f"<{count}I", self._pread(self.size, 4 * count))
        self.bytes_read = 4 + 4 * count
        self.first = b""  # the first block, once read: where torch.save put the tensor's header

    def first_block(self) -> bytes:
        if not self.first:
            block = bytearray(min(BLOCK, self.size))
            self.read(0, memoryview(block))
            self.first = bytes(block)
        return self.first

    def _pread(self, at: int, size: int) -> bytes:
        data = os.pread(self.fd, size, self.offset + at)
        if len(data) != size:
            raise ItemChecksumError(f"an item ends {size - len(data)} bytes early (truncated file)")
        return data

    def read(self, start: int, into: memoryview) -> None:
        """Fill `into` with payload bytes [start, start + len(into)), checking the blocks around them."""
        into = into.cast("B")
        end = start + len(into)
        if start < 0 or end > self.size:
            raise ItemChecksumError(f"bytes {start}-{end} lie outside an item of {self.size} bytes")
        if start < len(self.first):  # in the first block, already read and checked
            n = min(end, len(self.first)) - start
            into[:n] = self.first[start : start + n]
            start, into = start + n, into[n:]
        if not len(into):
            return
        low, high = start // BLOCK * BLOCK, min(_blocks(end) * BLOCK, self.size)
        head, tail = self._pread(low, start - low), self._pread(end, high - end)
        done = 0
        while done < len(into):  # one read returns at most ~2 GiB
            got = os.preadv(self.fd, [into[done : done + (1 << 30)]], self.offset + start + done)
            if got <= 0:
                raise ItemChecksumError(f"an item ends {len(into) - done} bytes early (truncated file)")
            done += got
        self.bytes_read += high - low
        _check_blocks(low // BLOCK, [head, into, tail], self.crcs)


@dataclass(frozen=True)
class TensorLayout:
    """Where torch.save put a tensor's elements in an item: the first element's byte in the payload,
    and the tensor's shape and strides (in elements)."""

    start: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


class _LayoutUnpickler(pickle.Unpickler):
    """Reads a saved tensor's storage key, offset, shape and strides from torch.save's data.pkl, and
    refuses anything but a plain tensor (which then loads the usual way)."""

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *_: (storage, offset, tuple(size), tuple(stride))
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        if module == "torch" and name.endswith("Storage"):
            return name
        raise pickle.UnpicklingError(f"not a plain tensor: {module}.{name}")

    def persistent_load(self, pid):
        return pid[2]  # ('storage', type, key, location, numel): the key names the record data/<key>


def tensor_layout(item: ChecksummedItem, element_size: int) -> TensorLayout | None:
    """The layout of the tensor torch.save wrote into `item`, read from its first (checked) block;
    None when the item is not one plain tensor."""
    head = item.first_block()
    records = {}  # zip local headers in the first block: name -> where its data begins
    at = head.find(b"PK\x03\x04")
    while at >= 0 and at + 30 <= len(head):
        name_len, extra_len = struct.unpack_from("<HH", head, at + 26)
        records[bytes(head[at + 30 : at + 30 + name_len])] = at + 30 + name_len + extra_len
        at = head.find(b"PK\x03\x04", at + 4)
    pickled = next(((name, begin) for name, begin in records.items() if name.endswith(b"/data.pkl")), None)
    if pickled is None:
        return None
    try:
        key, offset, size, stride = _LayoutUnpickler(io.BytesIO(head[pickled[1] :])).load()
    except Exception:  # noqa: BLE001 - anything else loads through torch.load
        return None
    begin = records.get(pickled[0][: -len(b"data.pkl")] + b"data/" + str(key).encode())
    if begin is None:
        return None
    if begin + (offset + element_span(size, stride)) * element_size > item.size:
        return None
    return TensorLayout(begin + offset * element_size, size, stride)


def writer(path, threads: int = 1, sync: bool = True) -> FileSystemWriter:
    """DCP's file writer, every item with its block checksums; `threads` files per rank, written at
    once; with `sync`, each file reaches the disk before the save returns."""
    return FileSystemWriter(path, thread_count=threads, sync_files=sync, _extensions=[ItemCrc32()])


def registry() -> ExtensionRegistry:
    """What a DCP reader needs to check every checksummed item it reads."""
    extensions = ExtensionRegistry()
    extensions.register(ItemCrc32)
    return extensions
