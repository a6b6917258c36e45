"""Ranged checkpoint reads: a rank reads the bytes of a stored tensor that it holds after a resize,
every block checked, and gets exactly the elements DCP's own reader would give it; a damaged block
in what it reads fails the load; items saved with one checksum per item (before blocks) still load."""

import io
import zlib

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from training.state import item_checksums
from training.state.item_checksums import BLOCK, ItemChecksumError
from training.state.node_local import SHARED, TieredReader


def saved_tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "rows": torch.randn(2000, 128, generator=g),  # 1 MB: sixteen checksum blocks
        "bf16": torch.randn(70, 33, generator=g).to(torch.bfloat16),
        "transposed": torch.randn(40, 24, generator=g).t(),  # saved in its own (column-major) layout
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 5),  # saved, and nothing to read
    }


class Destinations:
    """The LoadPlanner calls a storage reader makes: where each read goes, and what was committed."""

    def __init__(self):
        self.tensors, self.committed = {}, []

    def resolve_tensor(self, req):
        return self.tensors.setdefault((req.storage_index.fqn, tuple(req.dest_offsets)),
                                       torch.full(tuple(req.lengths), float("nan")))

    def commit_tensor(self, req, tensor):
        self.committed.append(req.storage_index.fqn)


def read(path, boxes, reader_class=TieredReader):
    """Read each fqn's box ((offsets), (lengths)) of the checkpoint at `path` as a rank holding it would."""
    reader = reader_class(path)
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, is_coordinator=True)
    items = [item for fqn, (offsets, lengths) in boxes.items()
             for item in create_read_items_for_chunk_list(fqn, metadata.state_dict_metadata[fqn],
                                                          [ChunkStorageMetadata(torch.Size(offsets),
                                                                                torch.Size(lengths))])]
    planner = Destinations()
    reader.read_data(torch.distributed.checkpoint.planner.LoadPlan(items), planner).wait()
    return {fqn: planner.tensors[(fqn, tuple(0 for _ in offsets))] for fqn, (offsets, _) in boxes.items()}, reader


@pytest.fixture
def checkpoint(tmp_path, process_group):
    dcp.save(saved_tensors(), storage_writer=item_checksums.writer(tmp_path))
    return tmp_path


BOXES = {  # what a rank may hold after a resize: a run of rows, a block of a tensor, the whole tensor
    "rows": ((117, 0), (90, 128)),
    "bf16": ((10, 5), (31, 20)),
    "transposed": ((3, 7), (12, 20)),
    "scalar": ((), ()),
}


def test_a_ranged_read_gives_the_elements_dcps_reader_gives(checkpoint):
    ranged, reader = read(checkpoint, BOXES)
    stock, _ = read(checkpoint, BOXES, lambda path: torch.distributed.checkpoint.FileSystemReader(
        path, _extension_registry=item_checksums.registry()))
    want = saved_tensors()
    for fqn, (offsets, lengths) in BOXES.items():
        box = want[fqn][tuple(slice(o, o + n) for o, n in zip(offsets, lengths))]
        assert torch.equal(ranged[fqn].to(box.dtype), box) and torch.equal(stock[fqn].to(box.dtype), box), fqn


def test_a_rank_holding_part_of_a_tensor_reads_about_that_part(checkpoint):
    rows, row_bytes = 90, 128 * 4
    _, reader = read(checkpoint, {"rows": ((117, 0), (rows, 128))})
    item = reader.storage_data[next(k for k in reader.storage_data if k.fqn == "rows")]
    # its rows, the first block (the tensor's header), at most a block at each end, and the checksums
    assert rows * row_bytes < reader.bytes_read[SHARED] <= rows * row_bytes + 3 * BLOCK + 4 * (item.length // BLOCK + 2)
    assert reader.bytes_read[SHARED] < item.length / 4


def test_a_damaged_block_in_the_range_read_fails_the_read(checkpoint):
    reader = TieredReader(checkpoint)
    info = reader.read_metadata().storage_data
    item = next(v for k, v in info.items() if k.fqn == "rows")
    shard = checkpoint / item.relative_path
    data = bytearray(shard.read_bytes())
    data[item.offset + BLOCK + 10] ^= 0xFF  # inside the second block, which rows 117-206 lie in
    shard.write_bytes(bytes(data))
    with pytest.raises(ItemChecksumError, match="block 1 .* fails its checksum"):
        read(checkpoint, {"rows": BOXES["rows"]})


class OneChecksumPerItem(item_checksums.ItemCrc32):
    """How items were checksummed before blocks: one CRC32 after the whole item."""

    def __init__(self):
        super().__init__("1")

    def transform_to(self, output):
        class Writer(io.RawIOBase):
            crc = 0

            def writable(self):
                return True

            def write(self, data):
                self.crc = zlib.crc32(data, self.crc)
                return output.write(data)

            def close(self):
                if not self.closed:
                    output.write(self.crc.to_bytes(4, "little"))
                    output.close()
                super().close()

        return Writer()


def test_items_saved_with_one_checksum_each_still_load(tmp_path, process_group):
    dcp.save(saved_tensors(), storage_writer=FileSystemWriter(tmp_path, _extensions=[OneChecksumPerItem()]))
    ranged, _ = read(tmp_path, BOXES)
    assert torch.equal(ranged["rows"], saved_tensors()["rows"][117:207])
