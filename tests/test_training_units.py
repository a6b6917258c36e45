"""Single-process pieces of the trainer: batch split, sampler, SFT masking, collation, schedule,
checkpoint validity and the resume fingerprint."""

import json
import re
import random

import pytest

from training.contract.batching import plan_batches
from training.contract.config import TrainingArgs, UnevenBatch
from training.contract.errors import ConfigError
from training.runtime.elastic import finishing_fits
from training.batches import IGNORE_INDEX, collate
from training.chat_tokens import tokenize_chat
from training.contract.checkpoint_dirs import COMPLETE, latest_checkpoint, step_dir
from training.state.checkpoint import Checkpointer
from training.state.checkpoint_files import STATE_FILE
from training.state.sampler import GlobalBatchSampler
from training.state.schedule import lr_factor

from conftest import ROOT, tiny_tokenizer


def test_uneven_split_keeps_the_global_batch_and_micro_step_count():
    plan = plan_batches(TrainingArgs(train_batch_size=128, micro_train_batch_size=4), 24)
    assert plan.local_batches == (5,) * 16 + (6,) * 8 and sum(plan.local_batches) == 128
    assert plan.grad_accum_steps == 2  # every rank runs 2 micro-steps, the 5-sample ranks too
    explicit = plan_batches(TrainingArgs(train_batch_size=128, uneven_batch=UnevenBatch(True, 16, 2, 3)), 48)
    assert explicit.local_batches == (2,) * 16 + (3,) * 32


def stream(dataset_len, batch, sizes_by_step, seed=7):
    """Concatenated global windows, with each step read rank by rank at the DP size of that step."""
    out, consumed = [], 0
    for dp in sizes_by_step:
        plan = plan_batches(TrainingArgs(train_batch_size=batch, micro_train_batch_size=2), dp)
        step = []
        for rank in range(dp):
            sampler = GlobalBatchSampler(dataset_len, plan, rank, seed, consumed)
            step += [i for micro in sampler.rank_micro_batches(consumed) for i in micro]
        out.append(step)
        consumed += batch
    return out


@pytest.mark.parametrize("trial", range(20))
def test_sample_stream_is_independent_of_resizes(trial):
    rng = random.Random(trial)
    dataset_len, batch, steps = rng.randrange(5, 60), rng.randrange(3, 13), 25
    fixed = stream(dataset_len, batch, [2] * steps)
    resized = stream(dataset_len, batch, [rng.randrange(1, batch + 1) for _ in range(steps)])
    assert resized == fixed
    flat = [i for step in fixed for i in step]
    # Each epoch is a permutation: every sample exactly once before any repeats.
    for epoch in range(len(flat) // dataset_len):
        assert sorted(flat[epoch * dataset_len:(epoch + 1) * dataset_len]) == list(range(dataset_len))


def test_rank_slices_are_disjoint_and_padded_with_empty_micro_batches():
    plan = plan_batches(TrainingArgs(train_batch_size=8, micro_train_batch_size=2), 3)  # 2 + 3 + 3
    per_rank = [GlobalBatchSampler(100, plan, r, 0).rank_micro_batches(0) for r in range(3)]
    assert [len(m) for m in per_rank] == [2, 2, 2]
    assert [len(b) for b in per_rank[0]] == [2, 0]
    ids = [i for rank in per_rank for micro in rank for i in micro]
    assert len(ids) == len(set(ids)) == 8


def test_prompt_tokens_are_masked_and_assistant_turns_trained():
    tok = tiny_tokenizer()
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 plus 3?"},
                {"role": "assistant", "content": "2 plus 3 is 5."}, {"role": "user", "content": "And backwards?"},
                {"role": "assistant", "content": "Backwards it is 5."}]
    row = tokenize_chat(messages, tok, max_len=512)
    trained = tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != IGNORE_INDEX])
    assert trained == "2 plus 3 is 5.<|eos|>Backwards it is 5.<|eos|>"
    truncated = tokenize_chat(messages, tok, max_len=10)
    assert len(truncated["input_ids"]) == len(truncated["labels"]) == 10


def test_an_assistant_turn_of_weight_0_is_context_only():
    """OpenAI's fine-tuning format marks turns not to learn with `weight: 0`: they stay in the
    input, out of the labels; a weight other than 0 or 1 is a bad row."""
    from training.data import check_messages

    tok = tiny_tokenizer()
    messages = [{"role": "user", "content": "What is 2 plus 3?"},
                {"role": "assistant", "content": "2 plus 3 is 6.", "weight": 0},
                {"role": "user", "content": "Check again?"}, {"role": "assistant", "content": "It is 5.", "weight": 1}]
    row = tokenize_chat(messages, tok, max_len=512)
    trained = tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != IGNORE_INDEX])
    assert trained == "It is 5.<|eos|>" and "2 plus 3 is 6." in tok.decode(row["input_ids"])
    with pytest.raises(ValueError, match="message 1 has weight 0.5: a turn's weight is 1 .trained. or 0"):
        check_messages([messages[0], {**messages[1], "weight": 0.5}])


def test_a_tokenizer_without_a_chat_template_is_named_and_a_recipe_can_give_one(tmp_path):
    from training.data import with_chat_template

    tok = tiny_tokenizer()
    template, tok.chat_template = tok.chat_template, None
    with pytest.raises(ConfigError, match="the tokenizer 'base-model' has no chat template, which renders every "
                                          "training row: use a chat model's tokenizer"):
        with_chat_template(tok, "base-model", None)
    (tmp_path / "chat.jinja").write_text(template)
    with_chat_template(tok, "base-model", str(tmp_path / "chat.jinja"))  # from a file
    row = tokenize_chat([{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Yes."}], tok, 64)
    assert tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != IGNORE_INDEX]) == "Yes.<|eos|>"
    tok.chat_template = None
    with_chat_template(tok, "base-model", template)  # as text
    assert tok.chat_template == template
    with pytest.raises(ConfigError, match="datasets.chat_template='missing.jinja' is neither Jinja text nor a file"):
        with_chat_template(tok, "base-model", "missing.jinja")


def test_collate_shifts_labels_and_builds_a_masked_dummy():
    batch = collate([{"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "sample_ids": [7], "lengths": [3]},
                     {"input_ids": [4, 5], "labels": [-100, 5], "sample_ids": [9], "lengths": [2]}])
    assert batch["labels"].tolist() == [[2, 3, -100], [5, -100, -100]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 1, 2]] and batch["sample_ids"] == [7, 9]
    assert (batch["label_tokens"], batch["tokens"]) == (3, 5)
    dummy = collate([])
    assert (dummy["labels"] == IGNORE_INDEX).all() and dummy["sample_ids"] == [] and dummy["label_tokens"] == 0


def test_lr_schedule_is_warmup_then_cosine_to_the_floor():
    args = TrainingArgs(learning_rate=1e-3, min_learning_rate=1e-4, warmup_steps=4, max_steps=20)
    lrs = [args.learning_rate * lr_factor(s, args) for s in range(21)]
    assert lrs[0] == pytest.approx(2.5e-4) and lrs[3] == pytest.approx(1e-3)
    assert lrs[20] == pytest.approx(1e-4) and all(a >= b for a, b in zip(lrs[4:], lrs[5:]))


def fake_checkpoint(root, step, complete=True, fingerprint=None):
    path = step_dir(root, step)
    path.mkdir(parents=True)
    (path / STATE_FILE).write_text(json.dumps({"step": step, "consumed_samples": step * 8, "world_size": 2,
                                               "fingerprint": fingerprint or {"train_batch_size": 8}}))
    if complete:
        (path / COMPLETE).touch()
    return path


def test_incomplete_newest_checkpoint_is_ignored(tmp_path):
    fake_checkpoint(tmp_path, 4)
    fake_checkpoint(tmp_path, 8, complete=False)
    assert latest_checkpoint(tmp_path) == step_dir(tmp_path, 4)


def test_resume_refuses_a_changed_fingerprint_with_a_clear_error(tmp_path, process_group):
    fake_checkpoint(tmp_path, 4, fingerprint={"train_batch_size": 8, "max_len": 64})
    ckpt = Checkpointer(tmp_path, keep_last=3, async_save=False, rank=0, world_size=1)
    with pytest.raises(ConfigError, match=r"train_batch_size: 8 -> 16.*ignore_fingerprint=true"):
        ckpt.load(None, None, {"train_batch_size": 16, "max_len": 64}, ignore_fingerprint=False)


def test_parquet_data_with_packing_keeps_every_sample_once(tmp_path):
    import datasets

    from training.contract.config import DatasetConfig
    from training.data import build_dataset

    datasets.load_dataset("json", data_files=str(ROOT / "data" / "sft_tiny.jsonl"), split="train").to_parquet(
        str(tmp_path / "sft.parquet"))
    plain, _, _ = build_dataset(DatasetConfig(train_data=str(tmp_path / "sft.parquet"), max_len=64), tiny_tokenizer())
    packed, _, stats = build_dataset(DatasetConfig(train_data=str(tmp_path), max_len=64, packing=True), tiny_tokenizer())
    assert len(packed) < len(plain) // 2 and stats["packing_fill"] > 0.9
    assert all(len(row["input_ids"]) == len(row["labels"]) == sum(row["lengths"]) <= 64 for row in packed)
    ids = [i for row in packed for i in row["sample_ids"]]
    assert sorted(ids) == sorted(i for row in plain for i in row["sample_ids"])


def test_a_directory_of_train_and_test_files_trains_on_its_split_only(tmp_path):
    """train.jsonl and test.jsonl side by side are two splits, as Hugging Face datasets reads them:
    the default split trains on train.jsonl's rows only, `split=test` reads the other, and a split
    the file names do not make is refused in one line naming those they do."""
    from training.contract.config import DatasetConfig
    from training.data import build_dataset

    def rows(tag: str, n: int) -> str:
        return "".join(json.dumps({"messages": [{"role": "user", "content": f"{tag} question {i}?"},
                                                {"role": "assistant", "content": f"{tag} answer {i}."}]}) + "\n"
                       for i in range(n))

    (tmp_path / "train.jsonl").write_text(rows("TRAIN", 5))
    (tmp_path / "test.jsonl").write_text(rows("TEST", 3))
    tokenizer = tiny_tokenizer()

    def texts(split: str) -> list[str]:
        train, _, _ = build_dataset(DatasetConfig(train_data=str(tmp_path), split=split, max_len=64), tokenizer)
        return [tokenizer.decode(row["input_ids"]) for row in train]

    assert len(texts("train")) == 5 and all("TRAIN" in t and "TEST" not in t for t in texts("train"))
    assert len(texts("test")) == 3 and all("TEST" in t for t in texts("test"))
    with pytest.raises(ConfigError, match=r"datasets.split='train_sft' is not a split of train_data=.*, whose file "
                                          r"names make the splits test, train: set training_config.datasets.split"):
        texts("train_sft")
    (tmp_path / "train.jsonl").rename(tmp_path / "part1.jsonl")  # no split names: every file is training data
    (tmp_path / "test.jsonl").rename(tmp_path / "part2.jsonl")
    assert len(texts("train_sft")) == 8


def test_a_held_out_split_is_the_validation_set_unless_rows_are_carved_out(tmp_path):
    """With no rows carved out (train_val_split_ratio=1), a directory's validation split (else its
    test split), or a saved DatasetDict's, is the validation set; a ratio below 1 carves from the
    training split instead. The training rows are the train split's either way."""
    import datasets

    from training.contract.config import DatasetConfig
    from training.data import build_dataset

    def rows(tag: str, n: int) -> list[dict]:
        return [{"messages": [{"role": "user", "content": f"{tag} question {i}?"},
                              {"role": "assistant", "content": f"{tag} answer {i}."}]} for i in range(n)]

    def write(path, items):
        path.write_text("".join(json.dumps(row) + "\n" for row in items))

    (tmp_path / "files").mkdir()
    for name, n in (("train", 6), ("test", 3), ("validation", 2)):
        write(tmp_path / "files" / f"{name}.jsonl", rows(name.upper(), n))
    tokenizer = tiny_tokenizer()

    def built(path, **settings):
        """(training rows, (validation rows, their tags), the split they came from, the training rows' tags)"""
        train, val, stats = build_dataset(DatasetConfig(train_data=str(path), max_len=64, **settings), tokenizer)
        tags = lambda ds: {re.search(r"(\w+) question", tokenizer.decode(row["input_ids"])).group(1) for row in ds}
        return len(train), (len(val), tags(val)) if val else None, stats["validation_split"], tags(train)

    assert built(tmp_path / "files") == (6, (2, {"VALIDATION"}), "validation", {"TRAIN"})
    (tmp_path / "files" / "validation.jsonl").unlink()
    assert built(tmp_path / "files") == (6, (3, {"TEST"}), "test", {"TRAIN"})
    assert built(tmp_path / "files", train_val_split_ratio=0.5) == (3, (3, {"TRAIN"}), None, {"TRAIN"})
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows("TRAIN", 4)),
                          "validation": datasets.Dataset.from_list(rows("VALIDATION", 2))}).save_to_disk(
        str(tmp_path / "saved"))
    assert built(tmp_path / "saved") == (4, (2, {"VALIDATION"}), "validation", {"TRAIN"})


def test_a_save_to_disk_directory_is_read_as_datasets_wrote_it(tmp_path):
    """A Dataset or DatasetDict written by `save_to_disk` is data, not a folder of bad JSON rows; a
    DatasetDict's split is the configured one, and a missing split is named in one line."""
    import datasets

    from training.contract.config import DatasetConfig
    from training.data import build_dataset

    rows = datasets.load_dataset("json", data_files=str(ROOT / "data" / "sft_tiny.jsonl"), split="train")
    rows.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": rows.select(range(10)), "test": rows.select(range(10, 14))}).save_to_disk(
        str(tmp_path / "both"))
    tokenizer = tiny_tokenizer()

    def kept(path, split="train"):
        return build_dataset(DatasetConfig(train_data=str(tmp_path / path), split=split, max_len=256), tokenizer)[2]["rows"]

    assert (kept("one"), kept("both"), kept("both", "test")) == (len(rows), 10, 4)
    with pytest.raises(ConfigError, match=r"datasets.split='train_sft' is not a split of train_data=.*both' \(a saved "
                                          r"DatasetDict of test, train\)"):
        kept("both", "train_sft")


def test_rows_cut_at_max_len_are_counted_and_named(tmp_path):
    """A kept row whose answer runs past max_len trains on a cut answer without its end of turn: the
    data statistics count it and the start-up warning says so, beside the rows dropped outright."""
    from training.contract.config import DatasetConfig
    from training.data import build_dataset, describe_drops

    def row(question: str, answer: str) -> str:
        return json.dumps({"messages": [{"role": "user", "content": question},
                                        {"role": "assistant", "content": answer}]}) + "\n"

    (tmp_path / "d.jsonl").write_text(row("Short?", "Yes.") + row("Long?", " ".join(["word"] * 200))
                                      + row(" ".join(["ask"] * 200) + "?", "No."))
    train, _, stats = build_dataset(DatasetConfig(train_data=str(tmp_path / "d.jsonl"), max_len=48), tiny_tokenizer())
    assert (stats["kept"], stats["truncated"], stats["dropped"]) == (2, 1, {"truncated_away": 1})
    assert max(len(r["input_ids"]) for r in train) == 48
    longest = stats["longest_truncated"]
    assert describe_drops(stats) == (
        "dropped 1 of 3 training rows: 1 with no assistant tokens within max_len (raise datasets.max_len); 1 of 3 "
        f"rows (33%) are longer than datasets.max_len=48 and train on a cut answer without its end of turn: "
        f"datasets.max_len={longest} keeps them whole")
    _, _, whole = build_dataset(DatasetConfig(train_data=str(tmp_path / "d.jsonl"), max_len=longest), tiny_tokenizer())
    assert whole["truncated"] == 0 and "longer than" not in describe_drops(whole)  # the long prompt stays dropped
    few = {**stats, "dropped": {}, "rows": 20}  # 1 row in 20: counted in the record, below the warning's 5%
    assert describe_drops(few) is None


def test_unknown_messages_column_is_a_clear_error(tmp_path):
    from training.contract.config import DatasetConfig
    from training.data import build_dataset

    (tmp_path / "d.jsonl").write_text('{"conversation": []}\n')
    with pytest.raises(ConfigError, match=r"its columns \(conversation\) match no SFT format: messages \(column "
                                          r"datasets.messages_key='messages'\)"):
        build_dataset(DatasetConfig(train_data=str(tmp_path / "d.jsonl")), tiny_tokenizer())


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_mfu_count_is_the_flops_that_run(lora):
    """The MFU numerator (weight matmuls and attention, training.model.causal_lm) equals what torch's
    FlopCounterMode counts over a forward and backward: LoRA's frozen base at 4 FLOPs per parameter
    and token (no weight gradient), attention over each row's own length."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    from conftest import tiny_architecture
    from training.contract.config import PeftConfig
    from training.model.causal_lm import CausalLM
    from training.model.flops import attention_flops, matmul_flops_per_token
    from training.model.lora import apply_lora

    arch = tiny_architecture("llama")
    arch.pop("model_type")
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", vocab_size=97, **arch), attn_implementation="eager")
    if lora:
        hf = apply_lora(hf, PeftConfig(r=4, lora_dropout=0.0))
        # As under activation checkpointing: the first layer's input takes a gradient, so its frozen
        # weights cost an input gradient too.
        hf.get_input_embeddings().register_forward_hook(lambda module, args, out: out.requires_grad_(True))
    model = CausalLM(hf, loss_chunk_tokens=0)
    rows = [{"input_ids": list(range(1, n + 1)), "labels": list(range(1, n + 1)), "sample_ids": [n], "lengths": [n]}
            for n in (12, 12)]
    batch = collate(rows)
    with FlopCounterMode(display=False) as counter:
        model(batch["input_ids"], batch["position_ids"], batch["labels"]).backward()
    counted = matmul_flops_per_token(model) * batch["tokens"] + attention_flops(model, batch["squared_lengths"])
    assert counter.get_total_flops() == counted


def test_collectives_outlast_a_checkpoint_write(monkeypatch):
    """A slow rank's checkpoint timeout fires before its peers' collective timeout, so the error
    names the checkpoint; a timeout set below that is refused in one line."""
    from training.runtime.topology import PG_TIMEOUT_ENV, collective_timeout

    monkeypatch.delenv(PG_TIMEOUT_ENV, raising=False)
    assert collective_timeout() == 1800 and collective_timeout(1800) == 2100
    monkeypatch.setenv(PG_TIMEOUT_ENV, "1800")
    with pytest.raises(ConfigError, match=f"{PG_TIMEOUT_ENV}=1800 must exceed checkpoint.save_timeout=1800"):
        collective_timeout(1800)
    monkeypatch.setenv(PG_TIMEOUT_ENV, "3600")
    assert collective_timeout(1800) == 3600


def test_a_local_job_in_a_deep_run_dir_keeps_multiprocessings_sockets_short(tmp_path):
    """multiprocessing puts AF_UNIX sockets (at most 107 characters) under TMPDIR, e.g. when data
    loader workers pass tensors back: a local job's TMPDIR stays short however deep its run dir."""
    from conftest import local_job

    deep = tmp_path / ("a-long-directory-name" * 4) / "run"
    tmpdir = local_job(tmp_path / "configs", deep).env(1)["TMPDIR"]
    assert len(tmpdir) + len("/pymp-12345678/listener-12345678") <= 107 and str(deep) not in tmpdir
    assert tmpdir == local_job(tmp_path / "configs", deep).env(2)["TMPDIR"]  # one per run dir, not per launch


def test_a_stop_between_updates_finishes_the_step_only_where_that_and_its_save_fit():
    """GRPO's updates after a stop: one of four took 2 s and the last save 3 s, so finishing takes
    9 s; with 9 s of the graceful timeout left the step is finished and saved, with less it is
    abandoned (nothing saved: the restart resumes from the newest checkpoint). A timeout of 0 never
    leaves time."""
    assert finishing_fits(done=1, total=4, seconds=2.0, save_s=3.0, seconds_left=9.0)
    assert not finishing_fits(done=1, total=4, seconds=2.0, save_s=3.0, seconds_left=8.9)
    assert finishing_fits(done=3, total=4, seconds=6.0, save_s=1.0, seconds_left=3.0)
    assert not finishing_fits(done=1, total=2, seconds=0.01, save_s=0.0, seconds_left=-0.02)
