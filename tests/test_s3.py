"""Checkpoints, data and models in S3 (`checkpoint.uri: s3://bucket/prefix`) against a real S3 on loopback
(moto's server): written and read through s3torchconnector with only the standard AWS variables set,
resumed from the bucket in a fresh run directory at any size, after a graceful stop or a SIGKILL of the
whole job. The demo trace's rehearsal keeps its checkpoints in a bucket too (tests/test_rehearsal.py)."""

import http.client
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from s3torchconnector._s3client import S3Client

from conftest import (ROOT, bucket_keys, committed_samples, completion_rewards, killed_if_left, local_job, losses,
                      records, render_configs, step_records, train, wait_for)
from training.contract.buckets import checkpoint_steps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 8
TINY = ["recipes.training_config.logging.audit_samples=true", f"recipes.training_config.training_args.max_steps={STEPS}"]


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory):
    """The reference: 8 steps on 2 processes with checkpoints on the run's volume, never interrupted."""
    tmp = tmp_path_factory.mktemp("fixed")
    train(render_configs(tmp / "configs", *TINY, "recipes.training_config.checkpoint.save_steps=1000"), tmp / "run",
          nodes=2)
    return tmp / "run"


def bucket_configs(tmp_path, uri, *overrides):
    return render_configs(tmp_path / "configs", *TINY, f"+recipes.training_config.checkpoint.uri={uri}", *overrides)


def assert_the_fixed_runs_steps(run_dirs, fixed_run):
    """The runs' steps, later runs' over earlier ones' (a step redone after a kill counts as redone), are
    the fixed run's: its losses and the same samples, none repeated or skipped."""
    got, samples = {}, {}
    for run_dir in run_dirs:
        got.update(losses(run_dir))
        samples.update(committed_samples(run_dir))
    want = losses(fixed_run)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    for step in want:
        assert abs(got[step] - want[step]) <= 1e-6 * abs(want[step]), (step, got[step], want[step])
    assert samples == committed_samples(fixed_run)


def test_checkpoints_in_a_bucket_survive_a_resize_and_a_sigkill_with_nothing_on_any_volume(s3, fixed_run, tmp_path):
    """2 nodes to step 3 (a graceful stop); 3 nodes in the same run directory (pods that stayed: their shards
    come from node memory) to step 5; then 1 node in a fresh run directory, killed outright (SIGKILL of the
    whole job) after step 7 was trained, step 6 its newest checkpoint; a save of step 7 cut off mid-upload;
    then 2 nodes in another fresh run directory to the end, from step 6. Together: the uninterrupted run's
    losses and samples, and the bucket holds the newest `keep_last` complete checkpoints."""
    uri = f"s3://{s3}/runs/tiny"
    configs = bucket_configs(tmp_path, uri, "recipes.training_config.checkpoint.save_steps=2",
                             "recipes.training_config.checkpoint.keep_last=2")
    first, fresh, last = tmp_path / "first", tmp_path / "fresh", tmp_path / "last"
    train(configs, first, nodes=2, stop_at_step=3)
    assert checkpoint_steps("test", uri) == [2, 3]
    assert not (first / "checkpoints").exists()
    train(configs, first, nodes=3, stop_at_step=5)
    resumed = [r for r in records(first) if r.get("event") == "resume"][-1]
    assert resumed["step"] == 3 and resumed["read_mb"]["node memory"] > 0 and resumed["read_mb"]["bucket"] > 0, resumed

    job = local_job(configs, fresh)
    with open(tmp_path / "fresh.log", "wb") as log, killed_if_left(job.start(1, log=log, pause_at=[7])) as proc:
        wait_for(lambda: any(r.get("step") == 7 and "loss" in r for r in records(fresh)), timeout=240, interval=0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # paused after step 7, whose checkpoint was never due
        proc.wait(timeout=30)
    assert [r["step"] for r in records(fresh) if r.get("event") == "resume"] == [5]
    assert checkpoint_steps("test", uri) == [5, 6]  # keep_last 2
    # An upload of step 7 cut off: every object of a checkpoint there but its COMPLETE marker.
    client = S3Client("us-east-1", endpoint=os.environ["AWS_ENDPOINT_URL"])
    for key in bucket_keys(s3, "runs/tiny/step-00000006/"):
        if not key.endswith("/COMPLETE"):
            client.copy_object(s3, key, s3, key.replace("step-00000006", "step-00000007"))

    train(configs, last, nodes=2)
    assert [r["step"] for r in records(last) if r.get("event") == "resume"] == [6]  # not the cut-off 7
    assert_the_fixed_runs_steps([first, fresh, last], fixed_run)
    assert checkpoint_steps("test", uri) == [6, 8]
    assert not bucket_keys(s3, "runs/tiny/step-00000007/")  # removed once a newer checkpoint completed
    files = {key.split("/", 3)[3] for key in bucket_keys(s3, "runs/tiny/step-00000008/")}
    assert {"COMPLETE", "train_state.json", ".metadata", "__0_0.distcp", "__1_0.distcp", "rng/rank0.pt",
            "rng/rank1.pt"} <= files, files


SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your '
             b'request rate.</Message><RequestId>0</RequestId></Error>')


@contextmanager
def throttled(endpoint: str, every: int):
    """A proxy on loopback in front of the S3 at `endpoint` that answers every `every`-th request with S3's
    throttling answer (503 SlowDown) and forwards the others: its URL, and a Counter of the requests it
    throttled by method."""
    target, lock, seen, slowed = urlsplit(endpoint), threading.Lock(), [0], Counter()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as S3 answers

        def log_message(self, *args):
            pass

        def answer(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                seen[0] += 1
                slow = seen[0] % every == 0
                slowed[self.command] += slow
            if slow:
                status, headers, reply = 503, [("Content-Type", "application/xml")], SLOW_DOWN
            else:
                upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                sent = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                upstream.request(self.command, self.path, body=body, headers={**sent, "Content-Length": str(len(body))})
                response = upstream.getresponse()
                status, headers, reply = response.status, response.getheaders(), response.read()
                upstream.close()
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", slowed
    finally:
        server.shutdown()
        server.server_close()


def test_s3s_throttling_answers_are_retried_with_backoff(s3, s3_server, fixed_run, tmp_path, monkeypatch):
    """Every 4th request to the bucket answered 503 SlowDown (S3's "reduce your request rate"), saves,
    listings and reads alike: the run stops at step 4 and resumes from the bucket at another size to the
    end, with the uninterrupted run's losses; the throttled requests were retried."""
    with throttled(s3_server, every=4) as (endpoint, slowed):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        configs = bucket_configs(tmp_path, f"s3://{s3}/throttled", "recipes.training_config.checkpoint.save_steps=2")
        train(configs, tmp_path / "first", nodes=2, stop_at_step=4)
        train(configs, tmp_path / "second", nodes=1)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    assert [r["step"] for r in records(tmp_path / "second") if r.get("event") == "resume"] == [4]
    assert_the_fixed_runs_steps([tmp_path / "first", tmp_path / "second"], fixed_run)
    assert checkpoint_steps("test", f"s3://{s3}/throttled")[-1] == STEPS
    assert slowed["PUT"] > 0 and slowed["GET"] > 0, slowed  # uploads' parts, listings and reads


def test_the_grpo_twins_checkpoints_and_judge_ledger_in_a_bucket_survive_a_sigkill_in_a_fresh_pod(s3, tmp_path):
    """The RLAIF twin (GRPO judged by an LLM on loopback), checkpoints and the judge's ledger in the bucket:
    2 nodes killed outright after step 3 (its checkpoint is step 2's), then 1 node in a fresh run directory.
    The redone step 3 takes every verdict from the bucket's ledger (the judge is not asked), draws the same
    completions with the same rewards, and the ledger left at the end holds nothing a resume could need."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from judge_server import JudgeServer

    uri = f"s3://{s3}/grpo"
    with JudgeServer() as server:
        configs = render_configs(tmp_path / "configs", "recipes.training_config.logging.audit_samples=true",
                                 "recipes.training_config.training_args.max_steps=4",
                                 "recipes.training_config.checkpoint.save_steps=2",
                                 f"+recipes.training_config.checkpoint.uri={uri}",
                                 f"recipes.training_config.training_args.method_args.judge.base_url={server.url}/v1",
                                 recipe="llama/tiny_llama_grpo_rlaif")
        killed, fresh = tmp_path / "killed", tmp_path / "fresh"
        with open(tmp_path / "killed.log", "wb") as log, \
                killed_if_left(local_job(configs, killed).start(2, log=log, pause_at=[3])) as proc:
            wait_for(lambda: any(r.get("step") == 3 and "loss" in r for r in records(killed)), timeout=400,
                     interval=0.05)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        assert checkpoint_steps("test", uri) == [2]
        ledger = bucket_keys(s3, "grpo/judge_ledger/")
        assert len(ledger) == 2 and all(key.endswith(".jsonl") for key in ledger), ledger  # one per rank
        asked = len(server.requests)

        train(configs, fresh, nodes=1, timeout=400)
        steps = step_records(fresh)
    assert [r["step"] for r in records(fresh) if r.get("event") == "resume"] == [2]
    assert steps[3]["judge_calls"] == 0 and steps[3]["judge_cached"] == 32, steps[3]
    assert completion_rewards(fresh)[3] == completion_rewards(killed)[3]
    assert steps[4]["judge_calls"] > 0 and len(server.requests) - asked == steps[4]["judge_calls"]
    assert checkpoint_steps("test", uri) == [2, 4]
    # The files of both sizes folded into one at the last checkpoint, and pruned: no step after it.
    assert list(bucket_keys(s3, "grpo/judge_ledger/").values()) == [0]


def test_a_missing_bucket_or_one_holding_checkpoints_without_resume_is_one_line_before_anything_is_written(s3, tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "launcher.py", "recipes=llama/tiny_llama_sft", "action=local",
                          "+recipes.training_config.checkpoint.uri=s3://no-such-bucket/tiny", f"local.run_dir={run_dir}",
                          f"output_dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == (
        "error: training_config.checkpoint.uri=s3://no-such-bucket/tiny: the bucket no-such-bucket does not exist: "
        "create it (aws s3 mb s3://no-such-bucket) or point training_config.checkpoint.uri at one that does")
    assert len(out.stderr.strip().splitlines()) == 1 and not run_dir.exists()
    # A prefix that holds a checkpoint is resumed from, unless local.resume=false: then one line.
    S3Client("us-east-1", endpoint=os.environ["AWS_ENDPOINT_URL"]).put_object(s3, "tiny/step-00000002/COMPLETE").close()
    out = subprocess.run([sys.executable, "launcher.py", "recipes=llama/tiny_llama_sft", "action=local", "local.resume=false",
                          f"+recipes.training_config.checkpoint.uri=s3://{s3}/tiny", f"local.run_dir={run_dir}",
                          f"output_dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and not run_dir.exists()
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: s3://{s3}/tiny holds checkpoints and local.resume=false: remove them or point "
        f"training_config.checkpoint.uri at a new prefix")


def test_data_and_a_model_read_from_a_bucket_train_and_the_export_lands_beside_the_checkpoints(s3, tmp_path,
                                                                                                monkeypatch):
    """train_data and model_name_or_path in the bucket (fetched once per node into the S3 cache); the
    export at the end lands in <checkpoint.uri>/hf, and transformers loads it from the bucket's files."""
    import torch
    from transformers import AutoModelForCausalLM

    from training.contract.buckets import download, upload

    upload("test", ROOT / "data" / "tiny_agent_model", f"s3://{s3}/models/tiny")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "chats.jsonl").write_bytes((ROOT / "data" / "sft_tiny.jsonl").read_bytes())
    upload("test", tmp_path / "data", f"s3://{s3}/data")
    monkeypatch.setenv("ELASTIC_S3_CACHE", str(tmp_path / "cache"))
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=2",
                             "recipes.training_config.model_config.architecture=null",
                             f"recipes.training_config.model_config.model_name_or_path=s3://{s3}/models/tiny",
                             "recipes.training_config.model_config.tokenizer_name_or_path=null",
                             f"recipes.training_config.datasets.train_data=s3://{s3}/data/chats.jsonl",
                             f"+recipes.training_config.checkpoint.uri=s3://{s3}/run",
                             "recipes.training_config.training_args.save_hf_ckpt=true")
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2)
    model_event = next(r for r in records(run_dir) if r.get("event") == "model")
    assert model_event["weights"] == "files" and model_event["files"].startswith(str(tmp_path / "cache"))
    assert next(r for r in records(run_dir) if r.get("event") == "data")["rows"] == 512
    assert [r["dirs"] for r in records(run_dir) if r.get("event") == "export"] == [[f"s3://{s3}/run/hf"]]
    exported = download("test", f"s3://{s3}/run/hf", tmp_path / "fetched")
    assert sorted(p.name for p in exported.iterdir()) == sorted(p.name for p in (run_dir / "hf").iterdir())
    model = AutoModelForCausalLM.from_pretrained(exported)
    local = AutoModelForCausalLM.from_pretrained(run_dir / "hf")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), local.state_dict().values()))
    assert {**model.config.to_dict(), "_name_or_path": None} == {**local.config.to_dict(), "_name_or_path": None}

    # The same export from the checkpoint in the bucket, with the run's config (the bucket holds none).
    def export(*args):
        return subprocess.run([sys.executable, "-m", "training.export", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    done = export("--checkpoint", f"s3://{s3}/run/step-00000002", "--config", str(run_dir / "job_config.yaml"),
                  "--out", str(tmp_path / "again"))
    assert done.returncode == 0, done.stderr[-3000:]
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "again")
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), local.state_dict().values()))
    missing = export("--checkpoint", f"s3://{s3}/run/step-00000009", "--config", str(run_dir / "job_config.yaml"),
                     "--out", str(tmp_path / "x"))
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"error: --checkpoint s3://{s3}/run/step-00000009 is not a complete checkpoint: complete checkpoints under "
        f"s3://{s3}/run: step-00000002"]
    no_config = export("--checkpoint", f"s3://{s3}/run/step-00000002", "--out", str(tmp_path / "x"))
    assert no_config.returncode == 2 and "pass --config" in no_config.stderr and not (tmp_path / "x").exists()

