"""The rows of a tokenized split in the run's data cache, read with pyarrow alone.

The cache is written once by `datasets` (`save_to_disk`: Arrow stream files listed in state.json).
Every later start only reads it, and `datasets` (with pandas behind it) costs a worker's start more
than the read itself, so the files are memory-mapped and rows come back as `datasets` returns them:
a dict of plain Python values per row.
"""

from __future__ import annotations

import json
from pathlib import Path


class CachedRows:
    """`len(rows)` and `rows[i]` (a dict of column -> value) over one saved split, memory-mapped."""

    def __init__(self, directory: Path):
        import pyarrow as pa

        state = json.loads((Path(directory) / "state.json").read_text())
        tables = [pa.ipc.open_stream(pa.memory_map(str(Path(directory) / f["filename"]))).read_all()
                  for f in state["_data_files"]]
        self.table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        self.table = self.table.replace_schema_metadata(None)  # datasets' features: not needed to read plain columns

    @property
    def column_names(self) -> list[str]:
        return self.table.column_names

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        return self.table.slice(index % len(self), 1).to_pylist()[0]
