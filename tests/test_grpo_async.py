"""GRPO whose rollout runs behind its policy (`method_args.max_steps_off_policy`, s): step t's batch is
drawn by the policy after step max(0, t-1-s), on a schedule by step number, so the tiny twin with a
rollout process per node (`rollout_ranks_per_node`), rehearsed through traces/demo.yaml (every resize
direction and a node killed), matches its fixed-size run bitwise; killed outright and started again at
another size with the training ranks drawing, it draws and trains every step as the uninterrupted run
did (the checkpoint holds the policies its next rollouts are drawn by); a resume with another s is
refused in one line."""

import os
import signal

import pytest
from safetensors.torch import load_file

from conftest import (ROOT, completions_by_step, killed_if_left, local_job, records, render_configs,
                      run_launcher_process, step_records, train, wait_for)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("test_grpo_async")]
RECIPE = "llama/tiny_llama_grpo_async"  # s = 2, each node's one training process beside one rollout process
STEPS, BEHIND = 36, 2  # the demo trace's last event comes at step 30
ON_THE_TRAINING_RANKS = ["recipes.training_config.training_args.method_args.rollout_ranks_per_node=0",
                         "recipes.trainer.nproc_per_node=1"]


def configs(tmp, behind=BEHIND, *overrides, name="configs"):
    return render_configs(tmp / f"{name}-{behind}", f"recipes.training_config.training_args.max_steps={STEPS}",
                          f"recipes.training_config.training_args.method_args.max_steps_off_policy={behind}",
                          *overrides, recipe=RECIPE)


def assert_drawn_and_trained_as(run_dir, reference_dir) -> None:
    """Every step's completions, token for token, and rewards are the reference run's, each step drawn
    BEHIND steps behind once the pipeline is full, and the final weights the same but for float32's
    reorderings at other world sizes (each update's gradient summed over another count of training
    ranks), far below a step's change (lr 3e-3 on weights of order 1)."""
    got, want = step_records(run_dir), step_records(reference_dir)
    assert completions_by_step(run_dir) == completions_by_step(reference_dir)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    assert all(abs(got[t]["reward"] - want[t]["reward"]) <= 1e-12 for t in want)  # summed in another order
    assert {t: r["policy_lag"] for t, r in got.items()} == {t: min(t - 1, BEHIND) for t in range(1, STEPS + 1)}
    final, reference = (load_file(d / "hf" / "model.safetensors") for d in (run_dir, reference_dir))
    scale = max(w.abs().max().item() for w in reference.values())
    assert max((final[k].double() - w.double()).abs().max().item() for k, w in reference.items()) <= 1e-5 * scale


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The twin as shipped (s = 2, a rollout process beside each node's training process), rehearsed
    through traces/demo.yaml (2 -> 3 -> 1 -> 2 nodes, a node killed at step 26), then its fixed-size run at
    2 nodes, which the kill-and-restart test below takes as the uninterrupted run."""
    tmp = tmp_path_factory.mktemp("behind")
    done = run_launcher_process(f"recipes={RECIPE}", "recipes.elastic_policy.is_elastic=true", "action=rehearse",
                                f"recipes.training_config.training_args.max_steps={STEPS}",
                                f"local.trace={ROOT / 'traces' / 'demo.yaml'}", f"local.run_dir={tmp / 'run'}",
                                "local.timeout=500", f"output_dir={tmp / 'out'}", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, tmp / "run", tmp / "run" / "fixed"


def test_the_demo_trace_rehearsed_two_steps_behind_matches_the_fixed_size_run(rehearsal):
    """Through every resize (a process restart each) and the node killed mid-window (resumed from the
    peer copies, the step after the newest copy drawn again by the restarted job's rollout processes),
    at 1, 2 and 3 training ranks, the run draws and trains as its fixed-size run."""
    stdout, run_dir, fixed_dir = rehearsal
    assert "vs fixed-size run: MATCHED" in stdout and "consumed sample ids and completions identical" in stdout
    assert {r["world_size"] for r in step_records(run_dir).values()} == {1, 2, 3}
    resumes = [r for r in records(run_dir) if r.get("event") == "resume"]
    # Four resizes from their checkpoints; the node failure after step 26 from the peer copies (the
    # kept policies and the window with them): at most the step whose copy was in flight drawn again.
    assert [r["source"] for r in resumes] == ["durable"] * 3 + ["peers", "durable"]
    steps = [r["step"] for r in records(run_dir) if "reward" in r]
    assert sorted(s for s in set(steps) if steps.count(s) > 1) == list(range(resumes[3]["step"] + 1, 27))
    assert resumes[3]["step"] >= 25
    assert_drawn_and_trained_as(run_dir, fixed_dir)


def test_a_rollout_behind_killed_and_resumed_at_another_size_draws_and_trains_as_the_uninterrupted_run(
        rehearsal, tmp_path):
    """2 nodes, each a training process and its rollout process, killed outright (SIGKILL) after step 5,
    the newest checkpoint step 4's; then 1 node from it, its training process drawing the rollouts. Steps
    5 and 6 are drawn by the policies after steps 2 and 3, which only the checkpoint holds: the same
    completions, token for token, and rewards at every step as the uninterrupted run (the rehearsal's
    fixed-size run), each step recording how far behind its batch was drawn, and the same final weights.
    Then a start with s = 1 is refused in one line."""
    uninterrupted = rehearsal[2]
    save = "recipes.training_config.checkpoint.save_steps=2"
    run_dir, behind = tmp_path / "run", configs(tmp_path, BEHIND, save)
    with open(tmp_path / "killed.log", "wb") as log, \
            killed_if_left(local_job(behind, run_dir).start(2, log=log, pause_at=[5])) as proc:
        wait_for(lambda: 5 in step_records(run_dir), timeout=300, interval=0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert {r["batch_wait_s"] >= 0 and r["rollout_idle_s"] >= 0 for r in step_records(run_dir).values()} == {True}
    train(configs(tmp_path, BEHIND, save, *ON_THE_TRAINING_RANKS, name="trained"), run_dir, nodes=1, timeout=300)
    assert [r["step"] for r in records(run_dir) if r.get("event") == "resume"] == [4]
    assert_drawn_and_trained_as(run_dir, uninterrupted)
    # auto: per token, where it runs behind
    assert all(r["rollout_correction_weight"] > 0 for r in step_records(run_dir).values())

    # Even with ignore_fingerprint: the checkpoint holds another count of policies.
    other = local_job(configs(tmp_path, 1, "recipes.training_config.checkpoint.ignore_fingerprint=true"), run_dir)
    with open(tmp_path / "refused.log", "wb") as log:
        assert other.start(1, log=log).wait(timeout=300) != 0
    errors = [line for line in (tmp_path / "refused.log").read_text().splitlines() if line.startswith("error:")]
    assert errors and errors[0].endswith(
        "was written with training_args.method_args.max_steps_off_policy=2, this run sets 1: it holds the 2 older "
        "policies its next rollouts are drawn by; resume with 2 or use a new run.output_dir"), errors
