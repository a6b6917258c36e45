"""An evaluation that survives the capacity moving under it: work sharded by sample, every finished unit kept.

lm-eval turns a task into requests (a log-likelihood, a generation). `ShardedLM` cuts the whole list into
units of `unit` consecutive requests, a cut that depends on the data alone, never on the number of
processes. Unit i belongs to process i mod N at size N; a finished unit is appended to the `WorkStore`
shared by every process at every size, and a unit already there is never asked again. Killed half-way
and started at another size, the evaluation asks only what was in flight, and every unit's batch is the
same at any size, so greedy scores are the same bits. lm-eval's own cache is per rank and cannot do this
(a resume needs the same GPU count).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Callable

from lm_eval.api.model import LM


class WorkStore:
    """Finished units in a directory of JSONL files, one per process life (no two writers share a file).
    A line is {"asked": key, "n": requests} before a unit is sent to the model and {"key": key, "out": [...]}
    once it is answered and on disk; a line cut short by a kill is ignored."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.own = self.dir / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self.done: dict[str, list] = {}
        self.asked = 0  # requests sent to a model, by every process of every size so far
        self._read: dict[Path, int] = {}

    def refresh(self) -> None:
        for file in sorted(self.dir.glob("*.jsonl")):
            with file.open("rb") as f:
                f.seek(self._read.get(file, 0))
                data = f.read()
            whole = data[: data.rfind(b"\n") + 1]  # a last line without its newline is still being written
            self._read[file] = self._read.get(file, 0) + len(whole)
            for line in whole.splitlines():
                record = json.loads(line)
                if "key" in record:
                    self.done[record["key"]] = record["out"]
                else:
                    self.asked += record["n"]

    def _append(self, record: dict) -> None:
        with self.own.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def asking(self, key: str, n: int) -> None:
        self._append({"asked": key, "n": n})

    def put(self, key: str, out: list) -> None:
        self._append({"key": key, "out": out})
        self.done[key] = out


def unit_key(kind: str, args: list) -> str:
    return hashlib.sha256(json.dumps([kind, args], sort_keys=True, default=str).encode()).hexdigest()


class ShardedLM(LM):
    """An lm-eval model that runs its share of every request list through `make_model()` (built on first
    need: a resume whose units are all kept loads no model) and reads the rest from the store.
    To lm-eval it is one process of one: every process builds all requests and scores all of them."""

    def __init__(self, make_model: Callable[[], LM], store: WorkStore, rank: int, world: int, unit: int,
                 tokenizer=None, chat_template_args: dict | None = None, wait_s: float = 3600.0):
        super().__init__()
        self._make_model, self._model = make_model, None
        self.store, self.shard_rank, self.shard_world, self.unit = store, rank, world, unit
        self.requests = 0  # every request lm-eval made of this model, kept or asked
        self.tokenizer, self.chat_template_args, self.wait_s = tokenizer, chat_template_args or {}, wait_s

    @property
    def model(self) -> LM:
        if self._model is None:
            self._model = self._make_model()
        return self._model

    def _run(self, kind: str, requests) -> list:
        self.requests += len(requests)
        units = [requests[i:i + self.unit] for i in range(0, len(requests), self.unit)]
        keys = [unit_key(kind, [r.args for r in u]) for u in units]
        self.store.refresh()
        for i in range(self.shard_rank, len(units), self.shard_world):
            if keys[i] not in self.store.done:
                self.store.asking(keys[i], len(units[i]))
                out = getattr(self.model, kind)(units[i])
                self.store.put(keys[i], [list(o) if isinstance(o, tuple) else o for o in out])
        self._wait_for(keys)
        done = self.store.done
        return [tuple(o) if kind == "loglikelihood" else o for key in keys for o in done[key]]

    def _wait_for(self, keys: list[str]) -> None:
        """The other processes' units; a process that died is restarted by its agent, or the job ends."""
        deadline = time.monotonic() + self.wait_s
        while missing := [k for k in keys if k not in self.store.done]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(missing)} units of the evaluation were not answered by the other "
                                   f"processes within {self.wait_s:.0f} s ({self.store.dir})")
            time.sleep(0.2)
            self.store.refresh()

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        return self._run("loglikelihood", requests)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        return self._run("loglikelihood_rolling", requests)

    def generate_until(self, requests, disable_tqdm: bool = False):
        return self._run("generate_until", requests)

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if not chat_template or self.tokenizer is None:
            return None
        return self.tokenizer.chat_template if isinstance(chat_template, bool) else chat_template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt,
                                                  **self.chat_template_args)
