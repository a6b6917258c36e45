"""LoRA SFT, DPO, validation and the Hugging Face model at the end: resize parity, exact losses, and
models that transformers and peft load."""

import json
import subprocess
import sys

import pytest
import torch

from conftest import (ROOT, committed_samples, losses, records, render_configs, run_launcher_process, tiny_causal_lm,
                      train)
from training.contract.checkpoint_dirs import latest_checkpoint
from training.state.checkpoint_files import bytes_on_disk

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 8
TINY = ["recipes.training_config.logging.audit_samples=true", f"recipes.training_config.training_args.max_steps={STEPS}",
        "recipes.training_config.checkpoint.save_steps=1000", "recipes.training_config.training_args.eval_steps=2",
        "recipes.training_config.training_args.save_hf_ckpt=false"]


def eval_losses(run_dir) -> dict[int, float]:
    return {r["step"]: r["eval_loss"] for r in records(run_dir) if "eval_loss" in r}


def test_lora_resize_2_3_1_matches_the_fixed_size_run(tmp_path):
    """The resize guarantees hold for LoRA: same losses and samples as a fixed-size run, and the
    validation loss (over the same held-out rows at every size) agrees at 2, 3 and 1 processes."""
    configs = render_configs(tmp_path / "configs", *TINY, recipe="llama/tiny_llama_sft_lora")
    train(configs, tmp_path / "fixed", nodes=2)
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2, stop_at_step=3)
    train(configs, run_dir, nodes=3, stop_at_step=6)
    train(configs, run_dir, nodes=1)
    got, want = losses(run_dir), losses(tmp_path / "fixed")
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    for step in want:
        assert abs(got[step] - want[step]) <= 1e-5 * want[step], (step, got[step], want[step])
    assert committed_samples(run_dir) == committed_samples(tmp_path / "fixed")
    got_eval, want_eval = eval_losses(run_dir), eval_losses(tmp_path / "fixed")
    assert sorted(got_eval) == sorted(want_eval) == [2, 4, 6, 8]  # evaluated at 2, 3, 3 and 1 processes
    for step in want_eval:
        assert abs(got_eval[step] - want_eval[step]) <= 1e-5 * want_eval[step]
    assert got[STEPS] < got[1]


def test_a_lora_checkpoint_holds_only_the_adapters(tmp_path):
    full = render_configs(tmp_path / "full", "recipes.training_config.training_args.max_steps=1")
    lora = render_configs(tmp_path / "lora", "recipes.training_config.training_args.max_steps=1",
                          "recipes.training_config.training_args.save_hf_ckpt=false", recipe="llama/tiny_llama_sft_lora")
    train(full, tmp_path / "full-run", nodes=1)
    train(lora, tmp_path / "lora-run", nodes=1)
    import torch.distributed.checkpoint as dcp

    full_bytes = bytes_on_disk(latest_checkpoint(tmp_path / "full-run" / "checkpoints"))
    lora_checkpoint = latest_checkpoint(tmp_path / "lora-run" / "checkpoints")
    # The model and optimizer entries are the adapters' alone (the tiny model's r=8 adapters are a
    # quarter of its weights; on an 8B model r=16 adapters are ~0.5%).
    tensors = [k for k, v in dcp.FileSystemReader(str(lora_checkpoint)).read_metadata().state_dict_metadata.items()
               if hasattr(v, "chunks") and k.startswith(("model.", "optim.state."))]
    assert tensors and all(".lora_A." in k or ".lora_B." in k for k in tensors), tensors[:5]
    assert bytes_on_disk(lora_checkpoint) * 2.5 < full_bytes, (bytes_on_disk(lora_checkpoint), full_bytes)


def _job(run_dir):
    from training.contract.config import load_job_config

    return load_job_config(run_dir / "job_config.yaml")


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_local_lora_run_leaves_a_merged_model_and_an_adapter(tmp_path):
    """`action=local` ends with hf/ (the merged model, loaded by transformers) and hf_adapter/ (loaded
    by peft onto the base): the same logits. `python -m training.export` from the last checkpoint
    writes the same weights."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from training.model.causal_lm import build_model

    run_dir = tmp_path / "run"
    done = run_launcher_process("recipes=llama/tiny_llama_sft_lora", "action=local", "recipes.trainer.num_nodes=2",
                                f"recipes.run.output_dir={run_dir}", f"output_dir={tmp_path / 'out'}", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stdout + done.stderr  # no library deprecation noise in a user's run
    merged = AutoModelForCausalLM.from_pretrained(run_dir / "hf")
    cfg = _job(run_dir)
    base = build_model(cfg.training_config.model_config, cfg.training_config.training_args.seed)
    ids = torch.randint(0, merged.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    base_logits = _logits(base, ids)
    with_adapter = PeftModel.from_pretrained(base, run_dir / "hf_adapter")  # injects the adapters into `base`
    assert torch.allclose(_logits(merged, ids), _logits(with_adapter, ids), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_logits(merged, ids), base_logits, atol=1e-3)  # the adapters were trained

    checkpoint = latest_checkpoint(run_dir / "checkpoints")
    done = subprocess.run([sys.executable, "-m", "training.export", "--checkpoint", str(checkpoint),
                           "--out", str(tmp_path / "again")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    first, again = load_file(run_dir / "hf" / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)

    def export(*args):
        return subprocess.run([sys.executable, "-m", "training.export", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    # An existing --out (or its _adapter twin) is never silently replaced; a misspelled step is named.
    refused = export("--checkpoint", str(checkpoint), "--out", str(tmp_path / "again"))
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"error: --out {tmp_path / 'again'}: {tmp_path / 'again'} already exists: choose another --out or pass --overwrite"]
    assert export("--checkpoint", str(checkpoint), "--out", str(tmp_path / "again"), "--overwrite").returncode == 0
    missing = export("--checkpoint", str(run_dir / "checkpoints" / "step-20"), "--out", str(tmp_path / "x"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and checkpoint.name in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_dpo_loss_equals_an_independent_computation():
    """Per-sequence log-probs from the model's chunked loss path, and the sigmoid DPO loss, against
    log_softmax over transformers' own logits."""
    from training.batches import collate_pairs
    from training.methods.dpo import PairScores, dpo_loss

    policy, reference = tiny_causal_lm(seed=0), tiny_causal_lm(seed=1)
    policy.lm_head.loss_chunk_tokens = 5  # several chunks per sequence
    rng = torch.Generator().manual_seed(0)

    def pair():
        prompt = torch.randint(0, 97, (4,), generator=rng).tolist()
        sides = {}
        for side in ("chosen", "rejected"):
            answer = torch.randint(0, 97, (int(torch.randint(3, 9, (1,), generator=rng)),), generator=rng).tolist()
            sides[f"{side}_input_ids"] = prompt + answer
            sides[f"{side}_labels"] = [-100] * 4 + answer
        return {**sides, "sample_ids": [0]}

    batch = collate_pairs([pair(), pair(), pair()])
    inputs = {k: batch[k] for k in ("input_ids", "position_ids", "labels")}
    ours = {name: m(**inputs, per_sequence=True) for name, m in (("policy", policy), ("reference", reference))}
    n = batch["pairs"]
    tokens = (batch["labels"] != -100).sum(dim=1)
    losses, chosen, rejected = dpo_loss(PairScores(ours["policy"][:n], ours["policy"][n:], ours["reference"][:n],
                                                   ours["reference"][n:], tokens[:n], tokens[n:]), 0.1, "sigmoid")

    def independent(model):
        hf_logits = model.lm_head(model.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).last_hidden_state)
        logp = torch.log_softmax(hf_logits.double(), -1)
        labels = batch["labels"]
        picked = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return (picked * (labels != -100)).sum(-1)

    pol, ref = independent(policy), independent(reference)
    margin = (pol[:n] - pol[n:]) - (ref[:n] - ref[n:])
    want = -torch.nn.functional.logsigmoid(0.1 * margin)
    assert torch.allclose(ours["policy"].double(), pol, rtol=1e-5)
    assert torch.allclose(losses.double(), want, rtol=1e-5)
    # a difference of two fp32 sums of ~20: absolute error ~1e-6 before the 0.1 factor
    assert torch.allclose(chosen.double(), 0.1 * (pol[:n] - ref[:n]), rtol=1e-5, atol=1e-6)
    losses.sum().backward()  # gradients flow to the policy only through the per-sequence path
    assert all(p.grad is not None for p in policy.parameters() if p.requires_grad)


def test_dpo_run_learns_the_preferences_and_exports_a_model(tmp_path):
    """The tiny DPO recipe (LoRA; the reference is the base with adapters off) on CPU: rewards start
    at exactly 0 (policy = reference), the held-out reward accuracy ends above chance, and the
    merged model loads."""
    from transformers import AutoModelForCausalLM

    run_dir = tmp_path / "run"
    done = run_launcher_process("recipes=llama/tiny_llama_dpo", "action=local", f"recipes.run.output_dir={run_dir}",
                                f"output_dir={tmp_path / 'out'}", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r for r in records(run_dir) if "loss" in r]
    assert steps[0]["rewards_margin"] == 0 and abs(steps[0]["loss"] - 0.6931) < 1e-3  # log 2
    evals = [r for r in records(run_dir) if "eval_rewards_accuracy" in r]
    assert evals[-1]["step"] == 30 and evals[-1]["eval_rewards_accuracy"] > 0.6
    assert evals[-1]["eval_rewards_margin"] > 0
    AutoModelForCausalLM.from_pretrained(run_dir / "hf")


def test_preference_rows_in_both_common_layouts():
    from training.chat_tokens import preference_conversations

    text = {"prompt": "Hi?", "chosen": "Yes.", "rejected": "No."}
    chosen, rejected = preference_conversations(text)
    assert chosen == [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Yes."}]
    assert rejected[-1] == {"role": "assistant", "content": "No."}
    user = {"role": "user", "content": "Hi?"}
    chat = {"prompt": "Hi?", "chosen": [user, {"role": "assistant", "content": "Yes."}],
            "rejected": [user, {"role": "assistant", "content": "No."}]}
    assert preference_conversations(chat) == (chosen, rejected)  # the prompt is not repeated
    only_answers = {"prompt": [user], "chosen": [{"role": "assistant", "content": "Yes."}],
                    "rejected": [{"role": "assistant", "content": "No."}]}
    assert preference_conversations(only_answers) == (chosen, rejected)


def test_a_bad_preference_row_names_its_line(tmp_path):
    from conftest import tiny_tokenizer
    from training.contract.config import DatasetConfig
    from training.contract.errors import ConfigError
    from training.data import build_dataset

    path = tmp_path / "prefs.jsonl"
    path.write_text('{"prompt": "a?", "chosen": "b.", "rejected": "c."}\n{"prompt": "a?", "chosen": "b.", "rejected": 3}\n')
    with pytest.raises(ConfigError, match=f"bad training row at {path} line 2: rejected must be text or a list of messages, got int"):
        build_dataset(DatasetConfig(train_data=str(path)), tiny_tokenizer(), data_format="pairs")


def test_a_pair_answering_two_different_prompts_is_refused_with_its_line(tmp_path):
    from conftest import tiny_tokenizer
    from training.contract.config import DatasetConfig
    from training.contract.errors import ConfigError
    from training.data import build_dataset

    def turns(question: str, answer: str) -> list:
        return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]

    path = tmp_path / "prefs.jsonl"
    path.write_text(json.dumps({"chosen": turns("a?", "b."), "rejected": turns("a?", "c.")}) + "\n"
                    + json.dumps({"chosen": turns("a?", "b."), "rejected": turns("z?", "c.")}) + "\n")
    with pytest.raises(ConfigError, match=f"bad training row at {path} line 2: its chosen and rejected conversations "
                                          f"have different prompts"):
        build_dataset(DatasetConfig(train_data=str(path)), tiny_tokenizer(), data_format="pairs")


def test_the_validation_split_is_seeded_and_leaves_the_rest_for_training():
    from training.data import validation_rows

    held_out = validation_rows(200, 0.9, seed=42)
    assert len(held_out) == 20 and held_out == validation_rows(200, 0.9, seed=42)
    assert held_out != validation_rows(200, 0.9, seed=43)
    assert validation_rows(200, 1.0, seed=42) == set()


def test_epochs_and_warmup_ratio_resolve_to_the_same_steps_at_every_size():
    from training.contract.batching import resolve_schedule
    from training.contract.config import TrainingArgs

    args = TrainingArgs(train_batch_size=8, max_epochs=2, lr_warmup_ratio=0.1, max_steps=5, warmup_steps=1)
    resolved = resolve_schedule(args, train_rows=100)
    assert (resolved.max_steps, resolved.warmup_steps) == (25, 2)  # ceil(2 * 100 / 8), round(0.1 * 25)
    assert resolve_schedule(TrainingArgs(max_steps=7, warmup_steps=3), 100).max_steps == 7


def test_a_lora_learning_rate_copied_into_a_full_parameter_scale_config_is_flagged(launch):
    code, out, err = launch("recipes=llama/llama3_1_8b_sft", "recipes.elastic_policy.is_elastic=true",
                            "++recipes.scale_config.n4.training_config.training_args.learning_rate=4e-4")
    assert code == 0, err
    assert "warning: recipes.scale_config.n4 sets learning_rate=0.0004, 20x the recipe's 2e-05" in out + err
    code, out, err = launch("recipes=llama/llama3_1_8b_sft_lora", "recipes.elastic_policy.is_elastic=true")
    assert code == 0 and "learning_rate=" not in out + err


def test_dpo_with_packing_is_refused(launch):
    code, _, err = launch("recipes=llama/tiny_llama_dpo", "recipes.training_config.datasets.packing=true")
    assert code == 2
    assert "error: training_config.datasets.packing=true with trainer_type=dpo" in err


def test_full_parameter_dpo_resumes_at_another_size_exactly(tmp_path):
    """Full-parameter DPO keeps a frozen reference copy, rebuilt from the initial weights at every
    restart: a run resized 2 -> 1 matches the fixed-size run (pairs are the sampler's unit)."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.model_config.peft_config=null",
                             "recipes.training_config.training_args.max_steps=6",
                             "recipes.training_config.training_args.learning_rate=1e-3",
                             "recipes.training_config.training_args.min_learning_rate=1e-4",
                             "recipes.training_config.logging.audit_samples=true", *TINY[2:], recipe="llama/tiny_llama_dpo")
    train(configs, tmp_path / "fixed", nodes=2)
    train(configs, tmp_path / "run", nodes=2, stop_at_step=3)
    train(configs, tmp_path / "run", nodes=1)
    got, want = losses(tmp_path / "run"), losses(tmp_path / "fixed")
    assert sorted(got) == sorted(want) == list(range(1, 7))
    for step in want:
        assert abs(got[step] - want[step]) <= 1e-5 * want[step], (step, got[step], want[step])
    assert committed_samples(tmp_path / "run") == committed_samples(tmp_path / "fixed")
    assert want[1] == pytest.approx(0.6931, abs=1e-3) and want[6] < want[1]


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
def test_dpo_loss_types_follow_their_definitions(loss_type):
    from training.methods.dpo import PairScores, dpo_loss

    s = PairScores(chosen=torch.tensor([-10.0, -4.0]), rejected=torch.tensor([-12.0, -3.0]),
                   ref_chosen=torch.tensor([-11.0, -4.5]), ref_rejected=torch.tensor([-11.0, -3.5]),
                   chosen_tokens=torch.tensor([4, 2]), rejected_tokens=torch.tensor([5, 2]))
    beta, margin = 0.5, torch.tensor([2.0, 0.0])  # (-10 + 12) - (-11 + 11), (-4 + 3) - (-4.5 + 3.5)
    want = {"sigmoid": -torch.nn.functional.logsigmoid(beta * margin),
            "hinge": torch.relu(1 - beta * margin),
            "ipo": (torch.tensor([1 / 4 + 1 / 5, 0.5 / 2 - 0.5 / 2]) - 1 / (2 * beta)) ** 2}[loss_type]
    losses, chosen, rejected = dpo_loss(s, beta, loss_type)
    assert torch.allclose(losses, want)
    assert torch.allclose(chosen, torch.tensor([0.5, 0.25])) and torch.allclose(rejected, torch.tensor([-0.5, 0.25]))
