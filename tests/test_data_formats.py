"""The SFT row formats people bring (training.contract.data_formats): each is read as the conversation it
means, token by token, or refused in one line; plain text trains on every token, cut at max_len."""

import csv
import json
import re

import pytest

from conftest import tiny_tokenizer
from training.contract.config import DatasetConfig
from training.contract.errors import ConfigError
from training.batches import IGNORE_INDEX
from training.chat_tokens import tokenize_chat
from training.data import build_dataset


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def trained_spans(tokenizer, row) -> list[str]:
    """The text of each run of trained tokens of a tokenized row."""
    spans, current = [], []
    for token, label in zip(row["input_ids"], row["labels"]):
        if label == IGNORE_INDEX:
            if current:
                spans.append(tokenizer.decode(current))
            current = []
        else:
            assert label == token
            current.append(token)
    return spans + ([tokenizer.decode(current)] if current else [])


def rows_of(path, **settings):
    train, _, stats = build_dataset(DatasetConfig(train_data=path, max_len=settings.pop("max_len", 512), **settings),
                                    tiny_tokenizer())
    return list(train), stats


def as_messages(conversation):
    return tokenize_chat(conversation, tiny_tokenizer(), 1 << 30)


def test_sharegpt_roles_are_mapped_and_a_weight_0_answer_is_context(tmp_path):
    row = {"system": "Be brief.", "conversations": [
        {"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello.", "weight": 0},
        {"from": "human", "value": "Weather?"}, {"from": "function_response", "value": "sunny"},
        {"from": "gpt", "value": "Sunny."}]}
    (got,), stats = rows_of(write_jsonl(tmp_path / "d.jsonl", [row]))
    want = as_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
                        {"role": "assistant", "content": "Hello.", "weight": 0}, {"role": "user", "content": "Weather?"},
                        {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}])
    assert stats["format"] == "sharegpt"
    assert (got["input_ids"], got["labels"]) == (want["input_ids"], want["labels"])
    assert trained_spans(tiny_tokenizer(), got) == ["Sunny.<|eos|>"]  # only the weighted answer, with its end of turn


def test_alpaca_joins_instruction_and_input_as_the_user_turn(tmp_path):
    rows = [{"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
            {"instruction": "Say hi.", "input": "", "output": "Hi!"}]
    got, stats = rows_of(write_jsonl(tmp_path / "d.jsonl", rows))
    assert stats["format"] == "alpaca"
    for row, (user, answer) in zip(got, [("Add the numbers.\n\n2 and 3", "5"), ("Say hi.", "Hi!")]):
        want = as_messages([{"role": "user", "content": user}, {"role": "assistant", "content": answer}])
        assert (row["input_ids"], row["labels"]) == (want["input_ids"], want["labels"])
        assert trained_spans(tiny_tokenizer(), row) == [f"{answer}<|eos|>"]


def test_prompt_completion_is_one_exchange_of_text_or_messages(tmp_path):
    rows = [{"prompt": "Capital of France?", "completion": "Paris."},
            {"prompt": [{"role": "system", "content": "Geo."}, {"role": "user", "content": "Of Peru?"}],
             "completion": [{"role": "assistant", "content": "Lima."}]}]
    got, stats = rows_of(write_jsonl(tmp_path / "d.jsonl", rows))
    assert stats["format"] == "prompt_completion"
    assert [trained_spans(tiny_tokenizer(), row) for row in got] == [["Paris.<|eos|>"], ["Lima.<|eos|>"]]
    want = as_messages([{"role": "system", "content": "Geo."}, {"role": "user", "content": "Of Peru?"},
                        {"role": "assistant", "content": "Lima."}])
    assert got[1]["input_ids"] == want["input_ids"]


@pytest.mark.parametrize("packing", [False, True], ids=["rows", "packed"])
def test_plain_text_trains_every_token_and_a_long_document_is_cut_not_truncated(tmp_path, packing):
    tokenizer = tiny_tokenizer()
    long, short = " ".join(f"word{i}" for i in range(60)), "a short note"
    got, stats = rows_of(write_jsonl(tmp_path / "d.jsonl", [{"text": long}, {"text": short}]), max_len=64,
                         packing=packing)
    assert stats["format"] == "text" and stats["truncated"] == 0
    whole = [tokenizer(t)["input_ids"] + [tokenizer.eos_token_id] for t in (long, short)]
    assert len(whole[0]) > 2 * 64  # the long document spans several rows
    assert all(row["labels"] == row["input_ids"] and len(row["input_ids"]) <= 64 for row in got)
    # every token of both documents, once, each document closed by its end-of-sequence token
    documents = sorted(whole, key=len)
    pieces = [(row["sample_ids"], row["lengths"], row["input_ids"]) for row in got]
    by_document: dict[int, list[int]] = {}
    for sample_ids, lengths, ids in pieces:
        start = 0
        for sample, n in zip(sample_ids, lengths):
            by_document.setdefault(sample, []).extend(ids[start:start + n])
            start += n
    assert sorted(by_document.values(), key=len) == documents


def test_the_format_is_recognized_or_named_and_a_mismatch_is_one_line(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "Q?", "answer": "A."}])
    with pytest.raises(ConfigError, match=r"its columns \(question, answer\) match no SFT format: messages .*sharegpt "
                                          r"\(conversations\), alpaca \(instruction, output\)"):
        rows_of(path)
    alpaca = write_jsonl(tmp_path / "a.jsonl", [{"instruction": "I", "output": "O"}])
    with pytest.raises(ConfigError, match=r"datasets.format='sharegpt': conversations is not a column of .*a.jsonl' "
                                          r"\(columns: instruction, output\)"):
        rows_of(alpaca, format="sharegpt")
    with pytest.raises(ConfigError, match=r"bad training row at .*s.jsonl line 1: conversations\[0\] must be \{from: "
                                          r"one of human, user, gpt"):
        rows_of(write_jsonl(tmp_path / "s.jsonl", [{"conversations": [{"from": "narrator", "value": "x"}]}]))


def test_csv_rows_are_read(tmp_path):
    with open(tmp_path / "d.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["instruction", "input", "output"])
        writer.writeheader()
        writer.writerow({"instruction": "Double it.", "input": "4", "output": "8"})
    (row,), stats = rows_of(str(tmp_path / "d.csv"))
    assert stats["format"] == "alpaca" and trained_spans(tiny_tokenizer(), row) == ["8<|eos|>"]


def test_a_format_with_preference_training_is_refused():
    from training.contract.config import TrainingSection, check_methods
    from training.contract.typed import build

    section = build(TrainingSection, {"training_args": {"trainer_type": "dpo"}, "datasets": {"format": "alpaca"}},
                    "training_config")
    with pytest.raises(ConfigError, match=r"datasets.format='alpaca' with trainer_type=dpo: formats are SFT's"):
        check_methods(section)


def test_every_example_row_of_the_data_page_reads_as_its_format(tmp_path):
    """docs/your-data.md shows one row per format: each is recognized as the format it is shown under,
    and trains on its last answer (the whole text, for plain text)."""
    import re

    from conftest import ROOT

    page = (ROOT / "docs" / "your-data.md").read_text()
    examples = re.findall(r"\*\*(\w+)\*\*(?:(?!\*\*).)*?```json\n(.*?)\n```", page, re.S)
    assert [name for name, _ in examples] == ["messages", "sharegpt", "alpaca", "prompt_completion", "text"]
    for name, row in examples:
        (got,), stats = rows_of(write_jsonl(tmp_path / f"{name}.jsonl", [json.loads(row)]))
        assert stats["format"] == name
        assert trained_spans(tiny_tokenizer(), got)
    pair = re.search(r"## Preference pairs.*?```json\n(.*?)\n```", page, re.S).group(1)
    train, _, stats = build_dataset(DatasetConfig(train_data=write_jsonl(tmp_path / "pairs.jsonl", [json.loads(pair)])),
                                    tiny_tokenizer(), "pairs")
    assert stats["kept"] == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_on_alpaca_rows_says_how_it_read_them(tmp_path):
    """From the launcher to the trainer: rows recognized as alpaca train, and start-up says so once."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, losses, render_configs

    rows = [{"instruction": f"Repeat {i}.", "input": "" if i % 2 else "slowly", "output": f"{i} {i}."} for i in range(32)]
    data = write_jsonl(tmp_path / "alpaca.jsonl", rows)
    configs = render_configs(tmp_path / "configs", f"recipes.training_config.datasets.train_data={data}",
                             "recipes.training_config.training_args.max_steps=2")
    done = subprocess.run([sys.executable, "-m", "training", f"--config-dir={configs}", f"--run-dir={tmp_path / 'run'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count(f"data: {data} read as alpaca rows") == 1
    assert len(losses(tmp_path / "run")) == 2


def test_plain_text_needs_no_chat_template_and_chat_rows_do(tmp_path):
    """A base model's tokenizer (no chat template) tokenizes plain text; chat rows with it are refused,
    naming the tokenizer."""
    from training.contract.config import ModelConfig
    from training.data import build_data

    base = base_tokenizer(tmp_path)
    model = ModelConfig(tokenizer_name_or_path=str(base))

    def build(rows):
        data = DatasetConfig(train_data=write_jsonl(tmp_path / f"{len(rows)}.jsonl", rows), max_len=64)
        return build_data(data, model, None, tmp_path / "cache", True, "chat", 0)

    assert build([{"text": "plain words to continue pre-training on"}]).stats["format"] == "text"
    with pytest.raises(ConfigError, match=r"the tokenizer '.*base' has no chat template"):
        build([{"prompt": "Q?", "completion": "A."}, {"prompt": "Q2?", "completion": "A2."}])


def base_tokenizer(tmp_path):
    """The tiny tokenizer saved without a chat template, as a base model's is."""
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path / "base")
    (tmp_path / "base" / "chat_template.jinja").unlink(missing_ok=True)
    return tmp_path / "base"


def test_the_dry_run_reads_a_sample_of_local_data(launch, tmp_path):
    """Before anything is submitted: the format the rows are read in and their token lengths against
    max_len; a row the trainer would stop on, or a tokenizer without a chat template for chat rows,
    is one line and nothing is written."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n{"messages": "oops"}\n')
    code, out, err = launch("recipes=llama/tiny_llama_sft", f"recipes.training_config.datasets.train_data={bad}")
    assert code == 2 and err == (f"error: bad training row at {bad} line 2: messages must be a non-empty list of "
                                 f"{{role, content}}: fix or remove the row\n")
    code, _, err = launch("recipes=llama/tiny_llama_sft",
                          f"recipes.training_config.model_config.tokenizer_name_or_path={base_tokenizer(tmp_path)}")
    assert code == 2 and "has no chat template, which renders every training row" in err and "\n" not in err.strip()
    assert not (tmp_path / "out").exists()
    alpaca = write_jsonl(tmp_path / "a.jsonl", [{"instruction": "Say it.", "output": " ".join(["word"] * n)}
                                                 for n in (3, 80)])
    code, out, err = launch("recipes=llama/tiny_llama_sft", f"recipes.training_config.datasets.train_data={alpaca}",
                            "recipes.training_config.datasets.max_len=64")
    assert code == 0, err
    assert re.search(rf"^data: {re.escape(alpaca)} read as alpaca rows \(2 sampled, the longest ~\d+ tokens; 1 of them "
                     r"longer than datasets.max_len=64, which cuts them\)$", out, re.M), out


@pytest.mark.parametrize("data_format, train_data", [("chat", "data/sft_tiny.jsonl"), ("pairs", "data/dpo_tiny.jsonl"),
                                                     ("prompts", "data/grpo_tiny.jsonl"), ("prompts", "data/agent_tiny.jsonl")])
def test_a_restart_reads_the_cached_rows_as_datasets_wrote_them(tmp_path, data_format, train_data):
    """The data cache is written by `datasets` once and read by every later start with pyarrow alone
    (training.cached_rows): each split's rows, every column, in order, as `datasets` reads them."""
    import datasets

    from conftest import ROOT
    from training.data import SPLITS, load_or_build

    cfg = DatasetConfig(train_data=str(ROOT / train_data), max_len=96, train_val_split_ratio=0.9)
    *splits, _ = load_or_build(cfg, tiny_tokenizer(), "tiny", tmp_path, builder=True, data_format=data_format,
                              prompt_limit=64)
    (cache,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    for name, rows in zip(SPLITS, splits):
        written = datasets.load_from_disk(str(cache / name))
        assert len(rows) == len(written) > 0 and rows.column_names == written.column_names
        assert [rows[i] for i in range(len(rows))] == list(written)
        assert rows[-1] == written[len(written) - 1]
        with pytest.raises(IndexError):
            rows[len(rows)]
