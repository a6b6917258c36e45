"""An LLM judge as a reward (RLAIF): the settings and templates checked before anything runs, and
the judge's calls against a real OpenAI-compatible server on loopback (scripts/judge_server.py)
through the real `openai` client: verdicts parsed and clamped, retries as the policy says, rate
limits, failures as `on_failure` says, refused credentials, and the verdict ledger."""

import json
import math
import sys
import threading
import time

import pytest

from conftest import ROOT
from training.contract.errors import ConfigError
from training.contract.judge import (JudgeSettings, UnreadableReply, judge_settings, parse_score, render, template,
                                     verdict_key)
from training.contract.rewards import RewardError, RewardOptions, TrainerState, check_rewards

sys.path.insert(0, str(ROOT / "scripts"))
from judge_server import Fault, JudgeServer  # noqa: E402


@pytest.fixture
def server():
    with JudgeServer() as s:
        yield s


def settings(server, **overrides) -> JudgeSettings:
    return judge_settings({"model_id": "openai/tiny-judge", "base_url": f"{server.url}/v1", "timeout": 5,
                           "num_retries": 3, **overrides})


def judge(server, tmp_path, rank=0, world_size=1, size="s1", **overrides):
    from training.rl.judge import Judge

    return Judge(settings(server, **overrides), rank, world_size, tmp_path, size, f"rank{rank}")


def ask(j, completions, step=1, prompts=None):
    prompts = prompts or [f"What is {i} plus 1?" for i in range(len(completions))]
    return j.submit(prompts, completions, {"answer": ["1"] * len(completions)}, lambda row: None, step).result(60)


# --- settings and templates, before anything runs -----------------------------------------------------

@pytest.mark.parametrize("values, says", [
    (None, "method_args.judge is not set"),
    ({"model_id": "anthropic/claude"}, "model_id='anthropic/claude' names no judge: write bedrock/<model id>"),
    ({"model_id": "openai/x"}, "needs training_config.training_args.method_args.judge.base_url"),
    ({"model_id": "bedrock/x", "range": [1, 0]}, "range=[1, 0] is upside down"),
    ({"model_id": "bedrock/x", "range": [0]}, "range=[0] must be [low, high]"),
    ({"model_id": "bedrock/x", "prompt_template": "rubrik"}, "prompt_template='rubrik' is neither a template the "
                                                              "project ships (faithfulness, pairwise, rubric, summary)"),
    ({"model_id": "bedrock/x", "api_key_env": "sk-123"}, "api_key_env='sk-123' is not an environment variable's name"),
    ({"model_id": "bedrock/x", "on_failure": "ignore"}, "on_failure='ignore' is not one of drop, zero, stop"),
    ({"model_id": "bedrock/x", "max_workers": 0}, "max_workers=0 is out of range"),
    ({"model_id": "bedrock/x", "sampling_params": {"temprature": 0}}, "did you mean 'temperature'?"),
])
def test_a_judge_that_cannot_run_is_one_line_naming_its_key(values, says):
    with pytest.raises(ConfigError, match="judge") as e:
        judge_settings(values)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_template_that_does_not_render_with_the_rows_is_refused_with_the_row(tmp_path):
    own = tmp_path / "mine.jinja"
    own.write_text("Rate {{ completion }} against {{ source_text }}.")
    rows = [("data.jsonl line 1", "Summarize: the cat sat.", {"answer": "x"})]
    with pytest.raises(ConfigError, match=r"does not render with the row: 'source_text' is undefined .*"
                                          r"\(the row at data.jsonl line 1\)"):
        check_rewards(["judge"], None, {"answer"}, {"model_id": "bedrock/x", "prompt_template": str(own)}, rows)
    with pytest.raises(ConfigError, match="'reference' is undefined"):  # faithfulness needs a reference answer
        check_rewards(["judge"], None, {"topic"}, {"model_id": "bedrock/x", "prompt_template": "faithfulness"},
                      [("line 1", "Why?", {"topic": "sky"})])
    check_rewards(["judge", "format"], [1.0, 0.5], {"answer"}, {"model_id": "bedrock/x", "prompt_template": "pairwise"},
                  [("line 1", [{"role": "user", "content": "Why?"}], {"answer": "Because."})])
    with pytest.raises(ConfigError, match="judge is set but method_args.rewards does not name it"):
        check_rewards(["format"], None, set(), {"model_id": "bedrock/x"})


def test_every_shipped_template_renders_and_says_how_its_reply_is_read():
    s = judge_settings({"model_id": "bedrock/x", "range": [0, 10]})
    for name, reply in (("rubric", "json"), ("summary", "number"), ("faithfulness", "json"), ("pairwise", "json")):
        request = render(template(name), JudgeSettings(**{**s.__dict__, "prompt_template": name}),
                         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
                         "It is 4.", {}, "4")
        assert request.reply == reply and "What is 2+2?" in request.text and "It is 4." in request.text
        assert "10" in request.text and "Be brief." not in request.text  # the range; the last user turn is the prompt


def test_a_verdict_is_read_as_the_template_declares_and_clamped_to_the_range():
    assert parse_score("0.75", "number", [0, 1]) == 0.75
    assert parse_score("Score: 7", "number", [0, 1]) == 1.0  # clamped
    assert parse_score('```json\n{"score": -2, "reason": "bad"}\n```', "json", [-1, 1]) == -1.0
    for text, reply in (("no idea", "number"), ('{"grade": 1}', "json"), ('{"score": "high"}', "json"),
                        ("7", "json")):
        with pytest.raises(UnreadableReply):
            parse_score(text, reply, [0, 1])


def test_rank_shares_sum_to_the_recipes_limits():
    s = judge_settings({"model_id": "bedrock/x", "max_workers": 10, "requests_per_minute": 600,
                        "tokens_per_minute": 90000})
    shares = [s.share(rank, 3) for rank in range(3)]
    assert [w for w, _, _ in shares] == [4, 3, 3]
    assert sum(r for _, r, _ in shares) == 600 and sum(t for _, _, t in shares) == 90000


# --- the calls, against a real server -----------------------------------------------------------------

def test_verdicts_come_back_in_order_concurrently_up_to_the_workers(server, tmp_path):
    # slow replies: the workers' calls overlap (2 s: a loaded machine may take a second to send one)
    server.faults.extend(Fault(delay=2.0) for _ in range(8))
    j = judge(server, tmp_path, max_workers=4)
    verdicts = ask(j, ["12ab", "abcd", "1234", "1a", "x1", "11", "a", "b"])
    assert [v.score for v in verdicts] == [0.5, 0.0, 1.0, 0.5, 0.5, 1.0, 0.0, 0.0]
    assert server.peak == 4  # as many at once as there are workers, never more
    costs = j.costs()
    assert (costs.judge_calls, costs.judge_cached, costs.judge_retries) == (8, 0, 0)
    assert costs.judge_input_tokens > 0 and costs.judge_output_tokens > 0 and costs.judge_s >= 4.0  # two rounds
    body = server.requests[0]["body"]
    assert body["model"] == "tiny-judge" and body["temperature"] == 0.0 and body["max_completion_tokens"] == 1024


def test_retries_honour_retry_after_and_a_client_error_is_not_retried(server, tmp_path):
    j = judge(server, tmp_path)
    server.faults.extend([Fault(status=429, retry_after=1.0), Fault(status=503)])
    (verdict,) = ask(j, ["12"])
    assert verdict.score == 1.0 and j.costs().judge_retries == 2
    times = [r["time"] for r in server.requests]
    assert times[1] - times[0] >= 1.0  # as long as the server asked
    server.requests.clear()
    server.faults.append(Fault(status=400))
    (verdict,) = ask(j, ["1a2b"])
    assert verdict.score is None and verdict.failure.startswith("status: 400") and len(server.requests) == 1
    costs = j.costs()
    assert (costs.judge_failed_status, costs.judge_retries) == (1, 0)


def test_a_slow_or_unreadable_reply_fails_after_its_retries(server, tmp_path):
    j = judge(server, tmp_path, timeout=0.5, num_retries=1)
    server.faults.extend([Fault(delay=1.5), Fault(delay=1.5)])
    (verdict,) = ask(j, ["12"])
    assert verdict.failure.startswith("timeout") and len(server.requests) == 2
    server.faults.append(Fault(text="I cannot judge this."))
    (verdict,) = ask(j, ["34"])
    assert verdict.failure == "unreadable: no JSON object with a numeric score in 'I cannot judge this.'"
    costs = j.costs()
    assert (costs.judge_failed_timeout, costs.judge_failed_unreadable, costs.judge_retries) == (1, 1, 1)


def test_a_refused_key_ends_at_the_first_call_without_retries(server, tmp_path, monkeypatch):
    server.api_key = "right"
    monkeypatch.setenv("JUDGE_KEY", "wrong")
    j = judge(server, tmp_path, api_key_env="JUDGE_KEY")
    verdicts = ask(j, ["1", "2", "3"])
    assert len(server.requests) == 1 and all(v.failure.startswith("refused: 401") for v in verdicts)
    monkeypatch.setenv("JUDGE_KEY", "right")
    assert [v.score for v in ask(judge(server, tmp_path, size="s2", api_key_env="JUDGE_KEY"), ["1", "2"])] == [1.0, 1.0]
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(ConfigError, match="api_key_env=JUDGE_KEY: the environment variable is not set: export it"):
        judge(server, tmp_path, size="s3", api_key_env="JUDGE_KEY")


def test_requests_per_minute_hold_the_calls_back(server, tmp_path):
    j = judge(server, tmp_path, max_workers=8, requests_per_minute=60)  # a minute's worth at once, then 1 a second
    started = time.monotonic()
    ask(j, [f"{i}" * 2 + "x" for i in range(62)], prompts=[f"q{i}" for i in range(62)])
    assert time.monotonic() - started >= 1.5 and len(server.requests) == 62


# --- failures as the recipe says, and the ledger ---------------------------------------------------------

def pool_with_judge(server, tmp_path, **overrides):
    from training.rl.reward_pool import RewardPool

    pool = RewardPool(["judge", "format"], [1.0, 0.5], RewardOptions(format_pattern=r"\d"), 60.0)
    pool.judge = judge(server, tmp_path, num_retries=0, **overrides)
    return pool


def score(pool, completions, step=3):
    prompts = [f"p{i}" for i in range(len(completions))]
    return pool.score(prompts, completions, {"answer": ["1"] * len(completions)}, list(range(10, 10 + len(completions))),
                      {"completion_ids": [[1]] * len(completions), "trainer_state": TrainerState(step - 1, 0.0)})


@pytest.mark.parametrize("on_failure", ["drop", "zero", "stop"])
def test_a_failed_verdict_costs_what_on_failure_says(server, tmp_path, on_failure):
    pool = pool_with_judge(server, tmp_path, on_failure=on_failure)
    server.faults.extend([Fault(), Fault(status=500)])
    try:
        if on_failure == "stop":
            with pytest.raises(RewardError, match=r"judge openai/tiny-judge: status: 500 .* on sample 11, after 0 "
                                                  r"retries \(method_args.judge.on_failure=stop\); the last checkpoint"):
                score(pool, ["12", "1a"])
            return
        totals, per_function = score(pool, ["12", "1a"])
        assert per_function["format"] == [1.0, 1.0]
        if on_failure == "drop":
            assert totals[0] == 1.5 and math.isnan(totals[1]) and math.isnan(per_function["judge"][1])
        else:
            assert totals == [1.5, 0.5]
    finally:
        pool.close()


def test_dropped_completions_are_left_out_of_their_groups_advantage():
    import torch

    from training.rl.algorithms import group_advantages

    rewards = torch.tensor([1.0, 0.0, math.nan, 0.5, math.nan, 0.3, 0.3, 0.3], dtype=torch.float64)
    got = group_advantages(rewards, 4)
    kept = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    expected = (kept - kept.mean()) / (kept.std() + 1e-6)
    assert torch.equal(got[:4], torch.stack([expected[0], expected[1], torch.tensor(0.0, dtype=torch.float64),
                                             expected[2]]))
    assert torch.equal(got[4:], torch.zeros(4, dtype=torch.float64))  # one dropped, the rest alike: no signal


def test_refused_credentials_end_the_run_whatever_on_failure_says(server, tmp_path):
    pool = pool_with_judge(server, tmp_path, on_failure="zero")
    server.faults.append(Fault(status=403))
    with pytest.raises(RewardError, match=r"^judge openai/tiny-judge refused the credentials: 403 .* \(sample 10\): "
                                          r"check method_args.judge.api_key_env and its Secret"):
        score(pool, ["1"])
    pool.close()


def test_the_ledger_answers_a_redone_step_at_another_size_and_keeps_only_what_a_resume_needs(server, tmp_path):
    first = [judge(server, tmp_path, rank=r, world_size=2, size="a") for r in range(2)]
    ask(first[0], ["1", "2"], step=5)
    ask(first[1], ["3x", "4x"], step=5, prompts=["What is 2 plus 1?", "What is 3 plus 1?"])
    ask(first[0], ["5"], step=6)
    asked = len(server.requests)
    # A resize: one process of a new size finds every verdict, whichever rank asked for it.
    again = judge(server, tmp_path, size="b")
    assert [v.score for v in ask(again, ["1", "2", "3x", "4x"], step=5)] == [1.0, 1.0, 0.5, 0.5]
    assert len(server.requests) == asked and again.costs().judge_cached == 4
    # A checkpoint of step 5: only step 6's verdict can be needed; the earlier size's files folded in.
    again.checkpointed(5, first=True)
    files = sorted(p.name for p in (tmp_path / "judge_ledger").glob("*.jsonl"))
    assert files == ["b-rank0.jsonl"]
    kept = [json.loads(line) for line in (tmp_path / "judge_ledger" / "b-rank0.jsonl").read_text().splitlines()]
    assert [e["step"] for e in kept] == [6] and again.costs().judge_ledger == 1
    assert ask(judge(server, tmp_path, size="c"), ["5"], step=6)[0].score == 1.0 and len(server.requests) == asked


def test_an_audited_runs_every_verdict_is_kept_and_a_replaying_run_takes_them_without_asking(server, tmp_path,
                                                                                               monkeypatch):
    """With audit_samples, a run's judge keeps every verdict (failed ones too) past the ledger's pruning;
    a run started with ELASTIC_JUDGE_REPLAY on it (a rehearsal's reference) takes those verdicts and
    asks the judge only for completions the first run never had."""
    from training.contract.judge import REPLAY_ENV
    from training.rl.judge import Judge

    elastic = tmp_path / "elastic"
    first = Judge(settings(server), 0, 1, elastic, "a", "rank0", audit=True)
    server.faults.append(Fault(status=400))  # not retried: the verdict fails
    assert ask(first, ["1"], step=1)[0].failure.startswith("status: 400")
    assert ask(first, ["2x"], step=2)[0].score == 0.5
    first.checkpointed(2, first=True)  # the ledger keeps nothing a resume from step 2 needs
    first.close()
    assert not (elastic / "judge_ledger" / "a-rank0.jsonl").read_text()
    asked = len(server.requests)
    monkeypatch.setenv(REPLAY_ENV, str(elastic))
    reference = Judge(settings(server), 0, 1, tmp_path / "reference", "r", "rank0")
    replayed = ask(reference, ["1"], step=1) + ask(reference, ["2x"], step=2)
    assert [(v.score, (v.failure or "")[:11]) for v in replayed] == [(None, "status: 400"), (0.5, "")]
    assert len(server.requests) == asked and reference.costs().judge_cached == 2
    assert ask(reference, ["7"], step=3)[0].failure is None and len(server.requests) == asked + 1


def test_a_line_cut_by_a_killed_process_is_skipped(server, tmp_path):
    j = judge(server, tmp_path)
    ask(j, ["12"])
    with open(tmp_path / "judge_ledger" / "s1-rank0.jsonl", "a") as f:
        f.write('{"key": "abc", "sco')
    assert judge(server, tmp_path, size="s2").ledger.get("abc") is None
    request = render(j.template, j.settings, "What is 0 plus 1?", "12", {"answer": "1"}, None)
    assert judge(server, tmp_path, size="s3").ledger.get(verdict_key(j.settings, request)).score == 1.0


def test_each_steps_account_holds_its_own_calls_while_the_next_steps_are_on_their_way(server, tmp_path):
    """A rollout process asks for the next step while this step's last verdicts are on their way: the
    account of a step holds its own calls, retries and tokens, not the next one's."""
    j = judge(server, tmp_path, max_workers=2)
    server.faults.extend([Fault(status=503), Fault(delay=1.0)])  # step 1's first call retried, then slow
    first = j.submit(["q0", "q1"], ["12", "1a"], {"answer": ["1", "1"]}, lambda row: None, 1)
    second = j.submit(["q2", "q3", "q4"], ["a", "b", "1"], {"answer": ["1"] * 3}, lambda row: None, 2)
    first.result(60)
    one = j.costs(1)
    assert (one.judge_calls, one.judge_retries, one.judge_cached) == (2, 1, 0) and one.judge_input_tokens > 0
    second.result(60)
    j.waited(0.25, 2)
    two = j.costs(2)
    assert (two.judge_calls, two.judge_retries, two.judge_wait_s) == (3, 0, 0.25) and two.judge_s > 0
    assert j.costs().judge_calls == 0  # nothing of either step is counted twice


def test_a_judge_of_many_threads_is_thread_safe(server, tmp_path):
    j = judge(server, tmp_path, max_workers=16)
    results = []
    threads = [threading.Thread(target=lambda k=k: results.append(ask(j, [f"{k}a"], prompts=[f"q{k}"])))
               for k in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20 and j.costs().judge_calls == 20


def test_a_local_run_whose_judge_key_is_not_set_stops_before_anything_starts(launch, tmp_path, monkeypatch):
    monkeypatch.delenv("TINY_JUDGE_KEY", raising=False)
    code, out, err = launch("recipes=llama/tiny_llama_grpo_rlaif", "action=local", f"local.run_dir={tmp_path / 'run'}",
                            "+recipes.training_config.training_args.method_args.judge.api_key_env=TINY_JUDGE_KEY")
    assert code != 0 and err.strip() == ("error: training_config.training_args.method_args.judge.api_key_env="
                                         "TINY_JUDGE_KEY: the environment variable is not set: export it (a local run), "
                                         "or reference its Secret with cluster.secret_env.TINY_JUDGE_KEY={secret: "
                                         "<name>, key: <key>} (a cluster job)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("url", ["not-a-url", "htp://my-judge:8000/v1", "my-judge:8000/v1", "http://my-judge:80OO/v1"])
def test_the_dry_run_refuses_a_judge_url_that_is_no_http_address_before_writing_anything(launch, tmp_path, url):
    code, _, err = launch("recipes=llama/tiny_llama_grpo_rlaif",
                          f"recipes.training_config.training_args.method_args.judge.base_url={url}")
    assert code == 2 and not (tmp_path / "out").exists()
    assert err.strip() == (f"error: training_config.training_args.method_args.judge.base_url={url!r} is not an http:// "
                           f"or https:// address with a host: write the server's address, e.g. http://my-judge:8000/v1")


def test_the_dry_run_says_what_the_judge_is_asked_and_warns_where_a_rate_limit_holds_a_step(launch):
    code, out, err = launch("recipes=llama/tiny_llama_grpo_rlaif",
                            "+recipes.training_config.training_args.method_args.judge.requests_per_minute=16")
    assert code == 0, err
    assert ("judge: openai/tiny-judge at http://127.0.0.1:8011/v1 with the rubric template (range [0, 1], "
            "on_failure=drop): 32 calls per step at every size (8 prompts x 4 completions;") in out
    method = next(line for line in out.splitlines() if line.startswith("method:"))
    assert "rewards [judge])" in method and "{" not in method  # the judge's settings are its own line, not a dict
    assert "warning: requests_per_minute=16 holds a step at least 120 s for the judge" in out


def test_a_local_run_of_a_bedrock_judge_needs_boto3_here(launch, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "boto3" else real(name, *a))
    code, out, err = launch("recipes=llama/tiny_llama_grpo_rlaif", "action=local", f"local.run_dir={tmp_path / 'run'}",
                            "recipes.training_config.training_args.method_args.judge.model_id=bedrock/deepseek.v3-v1:0")
    assert code != 0 and err.strip() == ("error: training_config.training_args.method_args.judge.model_id=bedrock/"
                                         "deepseek.v3-v1:0: boto3 is not installed here (the training image has it): "
                                         "pip install boto3 in this environment, or run the job on the cluster")
    assert not (tmp_path / "run").exists()


def test_an_evaluation_records_its_own_judge_account():
    """Verdicts asked by an evaluation are its figures (eval_judge_*), not the next step's; the
    ledger's size stays a step's figure."""
    from types import SimpleNamespace

    from training.contract.methods import method_facts
    from training.methods.grpo import GRPO
    from dataclasses import asdict

    from training.rl.judge import Costs

    options = method_facts("grpo").build_args({"eval_group_size": 2})
    method = SimpleNamespace(options=options, run=SimpleNamespace(plan=SimpleNamespace(dp_size=2)),
                             rewards=SimpleNamespace(judge=object()))
    costs = Costs(judge_calls=12, judge_failed_status=2, judge_s=3.0, judge_ledger=40)
    metrics = GRPO.eval_metrics(method, {"reward": 5.0, "scored": 10.0, "prompts": 6.0, **asdict(costs)})
    assert metrics["eval_reward"] == 0.5 and metrics["eval_judge_calls"] == 12
    assert metrics["eval_judge_dropped"] == 2 and metrics["eval_judge_s"] == 1.5  # the ranks' mean
    assert "eval_judge_ledger" not in metrics


def test_a_cluster_job_gets_its_judges_key_from_a_secret_never_the_manifest(launch, tmp_path):
    key = "+recipes.training_config.training_args.method_args.judge.api_key_env=JUDGE_KEY"
    code, out, err = launch("recipes=llama/tiny_llama_grpo_rlaif", key)
    assert code != 0 and err.strip() == ("error: training_config.training_args.method_args.judge.api_key_env=JUDGE_KEY: "
                                         "no cluster.secret_env.JUDGE_KEY gives the pods the key: set cluster."
                                         "secret_env.JUDGE_KEY={secret: <Secret name>, key: <key in it>}")
    code, out, err = launch("recipes=llama/tiny_llama_grpo_rlaif", key, "+cluster.secret_env.JUDGE_KEY={secret: judge, "
                            "key: api-key}")
    assert code == 0, err
    manifest = (tmp_path / "out" / "tiny-llama-grpo-rlaif" / "manifest.yaml").read_text()
    assert "secretKeyRef:\n" in manifest and "name: judge\n" in manifest and "key: api-key\n" in manifest


@pytest.mark.parametrize("case", ["unreachable", "unknown model", "bare number"])
def test_a_local_run_whose_judge_cannot_judge_stops_before_anything_trains(launch, tmp_path, case):
    """A local run asks its judge once before it starts: a server where nothing listens, a model the
    server does not serve, or a reply that is not what the template asks for (a bare number where the
    rubric asks for JSON) is one line naming the judge and what went wrong; nothing runs."""
    from elastic_launcher.local.hyperpod_agents import free_port

    with JudgeServer(models={"tiny-judge"}) as server:
        url = f"http://127.0.0.1:{free_port()}/v1" if case == "unreachable" else f"{server.url}/v1"
        model = "openai/other-judge" if case == "unknown model" else "openai/tiny-judge"
        if case == "bare number":
            server.faults.append(Fault(text="0.175"))
        key = "recipes.training_config.training_args.method_args.judge"
        code, out, err = launch("recipes=llama/tiny_llama_grpo_rlaif", "action=local", f"local.run_dir={tmp_path / 'run'}",
                                f"{key}.base_url={url}", f"{key}.model_id={model}")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    said = f"error: training_config.training_args.method_args.judge: the judge {model} at {url} "
    assert err.startswith(said), err
    assert {"unreachable": "cannot be reached (connection: Connection error.): start it, or point "
                           "training_config.training_args.method_args.judge.base_url at it",
            "unknown model": "has no such model (404 The model `other-judge` does not exist.): set "
                             "training_config.training_args.method_args.judge.model_id to a model it serves",
            "bare number": "answered '0.175' where the template 'rubric' asks for a JSON object with a numeric score "
                           "(reply: json)"}[case] in err, err
    assert not (tmp_path / "run").exists()
