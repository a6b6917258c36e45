"""Agent environments as TRL users write them, checked before anything runs (training.contract.environments),
and tool calls read from a model's own output in its family's format (training.contract.tool_calls)."""

import re

import pytest

from conftest import ROOT

from training.contract.environments import check_environment, load_environment, tools
from training.contract.errors import ConfigError
from training.contract.tool_calls import ToolCall, format_of, parse

CALCULATOR = '''
class Calculator:
    """Sums a list of numbers, one tool call at a time."""

    def reset(self, numbers: list, **row) -> str:
        self.numbers, self.total = numbers, 0
        return f"Add up {numbers}."

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    def _private(self):
        return None
'''


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "calc.py"
    path.write_text(CALCULATOR)
    return path


def test_an_environments_public_methods_are_its_tools_with_json_schemas(env_file):
    cls = load_environment(f"{env_file}:Calculator")
    (add,) = tools(cls)
    assert add.name == "add"
    assert add.schema == {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "the first"},
                                                        "b": {"type": "integer", "description": "the second"}},
                       "required": ["a", "b"]},
        "return": {"type": "integer"}}}


@pytest.mark.parametrize("source, spec, says", [
    (CALCULATOR, "{path}:Calculater", "has no class 'Calculater': did you mean 'Calculator'?"),
    (CALCULATOR, "{dir}/nothing.py:Calculator", "the file {dir}/nothing.py of"),
    ("def Calculator(): pass\n", "{path}:Calculator", "names function 'Calculator', not a class"),
    ("class Calculator:\n    def add(self, a: int) -> int:\n        '''Add.\n\n        Args:\n            a: a\n        '''\n",
     "{path}:Calculator", "has no reset(**row) method"),
    ("class Calculator:\n    def reset(self, **row): pass\n    def add(self, a, b):\n        '''Add.'''\n",
     "{path}:Calculator", "the tool Calculator.add cannot be offered to the model"),
    ("class Calculator:\n    def reset(self, **row): pass\n", "{path}:Calculator", "has no public method besides reset"),
    ("class Calculator:\n    def reset(self, **row): pass\n", "{path}",
     "env.py' names no class: write 'path/to/file.py:Class' or 'package.module:Class'"),
])
def test_an_environment_that_cannot_run_is_one_line(tmp_path, source, spec, says):
    path = tmp_path / "env.py"
    path.write_text(source)
    with pytest.raises(ConfigError, match="environment") as e:
        check_environment(spec.format(path=path, dir=tmp_path), [])
    assert says.format(dir=tmp_path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("recipe", ["llama/tiny_llama_agent", "qwen/qwen3_6_27b_agent_lora"])
def test_an_agent_recipe_plans_from_any_directory(launch, tmp_path, monkeypatch, recipe):
    """The shipped environment file is found as reward and data files are: from the working
    directory, then from the project (as the console command runs from anywhere)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, _, err = launch(f"recipes={recipe}")
    assert code == 0, err
    config = (tmp_path / "out").glob("*/configs/config.yaml")
    assert "environment: data/" in next(config).read_text()  # the pods' config keeps the path as the job runs it


def test_a_reward_that_reads_environments_needs_one(tmp_path, env_file):
    rewards = tmp_path / "rewards.py"
    rewards.write_text("def solved(completions, environments, **kw):\n    return [1.0 for _ in completions]\n")
    with pytest.raises(ConfigError, match=r"reward function .*rewards.py:solved takes `environments`, and no "
                                          r"training_config.training_args.method_args.environment is set"):
        check_environment(None, ["math_verify", f"{rewards}:solved"])
    assert [t.name for t in check_environment(f"{env_file}:Calculator", [f"{rewards}:solved"])] == ["add"]


@pytest.mark.parametrize("template, fmt", [
    ("{% for t in tools %}{{ t }}{% endfor %}<tool_call>\\n{{ call }}</tool_call>", "hermes"),
    ("<tool_call>\\n<function={{ name }}>", "xml_function"),
    ("{{- '<|python_tag|>' }}{% if message.role == 'ipython' %}", "llama3_json"),
    ("{{ 'to=functions.' + name }}<|call|>", "harmony"),
    ("{{- '<|tool_call>call:' + name }}{{ '<tool_call|>' }}", "gemma4"),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", None),
])
def test_the_tool_call_format_is_the_one_the_chat_template_teaches(template, fmt):
    assert format_of(template) == fmt


def test_tool_calls_are_read_in_each_familys_format_and_a_bad_one_keeps_its_error():
    assert parse('Let me add.<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', "hermes") == \
        [ToolCall("add", {"a": 1, "b": 2})]
    assert parse("<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nten\n</parameter>\n"
                 "</function>\n</tool_call>", "xml_function") == [ToolCall("add", {"a": 1, "b": "ten"})]
    assert parse('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', "llama3_json") == \
        [ToolCall("add", {"a": 1, "b": 2})]
    assert parse("<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}<|call|>",
                 "harmony") == [ToolCall("add", {"a": 1, "b": 2})]
    assert parse('<|tool_call>call:add{a:1,b:2,note:<|"|>one, two: "x"<|"|>}<tool_call|>', "gemma4") == \
        [ToolCall("add", {"a": 1, "b": 2, "note": 'one, two: "x"'})]
    assert parse("The sum is 3.", "hermes") == [] and parse("The sum is 3.", "llama3_json") == []
    (bad,) = parse('<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>', "hermes")
    assert bad.name == "" and bad.error.startswith("not JSON (Expecting property name")
    (bad,) = parse("to=functions.add<|message|>{\"a\": <|call|>", "harmony")
    assert bad.name == "add" and bad.error.startswith("arguments are not JSON")
    (two, three) = parse('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", '
                         '"arguments": "{\\"x\\": 2}"}</tool_call>', "hermes")
    assert (two, three) == (ToolCall("a", {}), ToolCall("b", {"x": 2}))


def test_a_tokenizer_that_declares_a_response_template_is_read_by_transformers_response_parsing():
    from training.contract.tool_template import ToolTemplate

    tok = tokenizer()
    tok.response_template = {"start_anchor": "<|im_start|>assistant\n", "fields": {
        "content": {"content": "text"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json", "repeats": True,
                       "transform": {"type": "function", "function": "{content}"}}}}
    template = ToolTemplate(tok, [])
    assert template.format == "response_template"
    prefix = tok("<|im_start|>user\nAdd.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert template.calls('<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>', prefix) == \
        [ToolCall("add", {"a": 1})]
    (bad,) = template.calls('<tool_call>\n{"name": "add", "arguments": {"a": 1}}}\n</tool_call>', prefix)
    assert bad.name == "" and bad.error.startswith("json parser could not parse region as JSON")


# --- the chat template's tool turns (training.contract.tool_template) ---

QWEN = "data/tiny_tokenizers/qwen2_5"  # Qwen 2.5's template with its tool calling


def tokenizer(name=QWEN):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(ROOT / name))


def test_a_tool_reply_is_the_templates_tool_turn_tokenized_alone_and_the_whole_matches_the_template(env_file):
    """The model's turn (its own tokens, through its stop token) followed by the reply's tokens is the
    template's rendering of the whole conversation, token for token: nothing is re-tokenized."""
    from training.contract.tool_template import ToolReply, ToolTemplate

    tok, schemas = tokenizer(), [t.schema for t in tools(load_environment(f"{env_file}:Calculator"))]
    template = ToolTemplate(tok, schemas)
    question = [{"role": "user", "content": "Add 2 and 3."}]
    call = ToolCall("add", {"a": 2, "b": 3})
    said = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
    trajectory = template.prompt_ids(question) + tok(said, add_special_tokens=False)["input_ids"]
    trajectory += template.reply_ids([call], [ToolReply("add", "5")], "<|im_end|>")
    whole = question + [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "name": "add", "content": "5"}]
    assert trajectory == tok.apply_chat_template(whole, tools=schemas, add_generation_prompt=True, tokenize=True,
                                                 return_dict=True)["input_ids"]
    assert "<tool_response>\n5\n</tool_response>" in tok.decode(trajectory)


def test_a_chat_template_that_cannot_carry_an_agent_is_one_line(env_file):
    from training.contract.tool_template import check_tool_template

    schemas = [t.schema for t in tools(load_environment(f"{env_file}:Calculator"))]
    assert check_tool_template(tokenizer(), schemas, "k").format == "hermes"
    with pytest.raises(ConfigError, match="teaches no tool-call format this project reads"):
        check_tool_template(tokenizer("data/tiny_tokenizers/chatml_qwen2"), schemas, "k")  # its tool calling left out
    tok = tokenizer()
    tok.chat_template = tok.chat_template.replace("{{- tool | tojson }}", "")
    with pytest.raises(ConfigError, match="does not render the tools \\(no 'add' in the prompt"):
        check_tool_template(tok, schemas, "k")


def test_an_agents_transcripts_train_with_their_tools_and_the_replies_as_context():
    """SFT rows with TRL's `tools` column render with the tools offered; the model's tool calls and
    answer are trained, the tool's reply is not."""
    import json

    from training.batches import IGNORE_INDEX

    from training.chat_tokens import tokenize_chat

    row = json.loads((ROOT / "data" / "agent_tiny_sft.jsonl").read_text().splitlines()[0])
    tok = tokenizer()
    out = tokenize_chat(row["messages"], tok, 1 << 30, row["tools"])
    trained = tok.decode([t for t, label in zip(out["input_ids"], out["labels"]) if label != IGNORE_INDEX])
    word, number = row["messages"][1]["tool_calls"][0]["function"]["arguments"]["word"], row["messages"][2]["content"]
    assert trained == (f'<tool_call>\n{{"name": "lookup", "arguments": {{"word": "{word}"}}}}\n</tool_call><|im_end|>'
                       f"The secret number of {word} is {number}.<|im_end|>")
    assert '"name": "lookup"' in tok.decode(out["input_ids"][:out["labels"].index(next(
        label for label in out["labels"] if label != IGNORE_INDEX))])  # the tools, offered in the prompt


# --- the environments in the reward process (training.rl.environment_pool), called in-process here ---

TOOLS = '''
import threading
import time

MEETING = threading.Barrier(2, timeout=30)


class Tools:
    def reset(self, word: str = "", seed: int = 0, **row) -> str:
        self.word, self.seed = word, seed
        return f"The word is {word}."

    def echo(self, text: str) -> str:
        """Echo.

        Args:
            text: what to echo
        """
        return text

    def fail(self) -> str:
        """Fail."""
        raise ValueError("out of paper")

    def hang(self) -> str:
        """Hang."""
        time.sleep(60)
        return "late"

    def meet(self) -> dict:
        """Wait for another trajectory's call to meet this one."""
        MEETING.wait()
        return {"met": True}
'''


@pytest.fixture
def pool(tmp_path):
    from training.rl import environment_pool

    (tmp_path / "tools_env.py").write_text(TOOLS)
    spec = f"{tmp_path / 'tools_env.py'}:Tools"
    yield environment_pool, spec
    environment_pool._live.clear()


def test_an_episode_starts_from_its_row_and_seed_and_each_trajectory_has_its_own_environment(pool):
    environment_pool, spec = pool
    keys = [(7, 0, 3), (7, 1, 3)]
    observations = environment_pool.start_episodes(spec, [(k, {"word": "apple", "other": 1}, 100 + k[1]) for k in keys])
    assert observations == ["The word is apple.", "The word is apple."]
    first, second = (environment_pool._live[k] for k in keys)
    assert first is not second and (first.seed, second.seed) == (100, 101)
    environment_pool.release(keys)
    assert not environment_pool._live


def test_a_bad_tool_call_is_an_error_reply_and_a_hung_tool_ends_its_trajectory(pool):
    environment_pool, spec = pool
    environment_pool.start_episodes(spec, [((1, 0, 0), {}, 0), ((1, 1, 0), {}, 0)])
    calls = [ToolCall("echo", {"text": "hi"}), ToolCall("nope", {}), ToolCall("echo", {"words": "hi"}),
             ToolCall("fail", {}), ToolCall("", error="not JSON")]
    (replies, other) = environment_pool.call_tools([((1, 0, 0), calls), ((1, 1, 0), [ToolCall("hang", {}),
                                                                                      ToolCall("echo", {"text": "x"})])],
                                                   timeout_s=0.5, max_concurrency=4)
    assert [(r.status, r.content) for r, _ in replies] == [
        ("ok", "hi"), ("error", "Error: there is no tool 'nope'; the tools are echo, fail, hang, meet"),
        ("error", "Error: echo cannot take these arguments: missing a required argument: 'text'"),
        ("raised", "Error: ValueError: out of paper"), ("error", "Error: the tool call could not be read: not JSON")]
    assert [(r.status, r.name) for r, _ in other] == [("timeout", "hang")]  # nothing after a timeout


def test_trajectories_tools_run_concurrently(pool):
    """Two trajectories' calls meet at a barrier: they only return if they ran at once."""
    environment_pool, spec = pool
    environment_pool.start_episodes(spec, [((2, 0, 0), {}, 0), ((2, 1, 0), {}, 0)])
    replies = environment_pool.call_tools([((2, i, 0), [ToolCall("meet", {})]) for i in range(2)], timeout_s=20,
                                          max_concurrency=2)
    assert [r.content for (r, _), in replies] == ['{"met": true}'] * 2


def test_reward_functions_read_the_trajectories_environments(pool, tmp_path):
    from training.contract.rewards import RewardOptions

    environment_pool, spec = pool
    (tmp_path / "reward.py").write_text("def seen(completions, environments, **kw):\n"
                                        "    return [float(e.seed) for e in environments]\n")
    keys = [(3, 0, 0), (3, 1, 0)]
    environment_pool.start_episodes(spec, [(k, {}, 5 * k[1]) for k in keys])
    assert environment_pool.score(f"{tmp_path / 'reward.py'}:seen", RewardOptions(), ["p", "p"], ["a", "b"], {}, {},
                                  keys) == [0.0, 5.0]


# --- the multi-turn rollout (training.rl.agent_rollout) with a scripted policy ---

AGENT_ENV = f"{ROOT / 'data' / 'agent_tiny_env.py'}:SecretNumbers"


class InProcess:
    """The reward process's place, here: the environments' functions run in threads of this process."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self.executor = ThreadPoolExecutor(1)

    def run(self, fn, *args):
        return self.executor.submit(fn, *args)


class ScriptedPolicy:
    """A sampler that calls `lookup` until it has read a reply (or always, `stubborn`), then answers."""

    def __init__(self, tok, stubborn=False):
        import torch

        self.tok, self.stubborn, self.device, self.seed, self.sync_s = tok, stubborn, torch.device("cpu"), 0, 0.0

    def session(self):
        from contextlib import nullcontext

        return nullcontext()

    def close(self):
        pass

    def sample(self, prompt, generators, params, max_new_tokens, interrupted):
        seen = self.tok.decode(prompt.tolist())
        text = ("The secret number of apple is 17." if "</tool_response>" in seen and not self.stubborn else
                '<tool_call>\n{"name": "lookup", "arguments": {"word": "apple"}}\n</tool_call>') + "<|im_end|>"
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return [(ids[:max_new_tokens], len(ids) <= max_new_tokens, [None] * min(len(ids), max_new_tokens))
                for _ in generators]


def agent_rollout(policy, max_turns=3, max_total_tokens=256):
    from training.contract.environments import load_environment
    from training.contract.tool_template import ToolTemplate
    from training.rl.agent_rollout import AgentRollout
    from training.rl.environment_pool import Environments

    tok = policy.tok
    schemas = [t.schema for t in tools(load_environment(AGENT_ENV))]
    return AgentRollout(policy, Environments(AGENT_ENV, InProcess(), 5.0, 4), ToolTemplate(tok, schemas), tok,
                        max_turns, max_total_tokens, 1024), schemas


def one_group(rollout, schemas, n=2):
    from training.rl.rollout import PromptGroup
    from training.rl.sampling import SamplingParams

    prompt = [{"role": "user", "content": "What is the secret number of apple?"}]
    ids = tuple(rollout.template.prompt_ids(prompt))
    group = PromptGroup(5, ids, {"prompt": prompt, "columns": {"word": "apple"}})
    params = SamplingParams(max_new_tokens=64, stop_token_ids=(rollout.tokenizer.convert_tokens_to_ids("<|im_end|>"),))
    (completions,) = rollout.generate([group], n, params, step=1)
    return completions


def test_an_agents_trajectory_is_its_turns_and_the_tools_replies_with_the_loss_on_its_own_tokens():
    from training.rl.experience import training_row
    from training.rl import environment_pool
    from training.rl.rollout import PromptGroup

    tok = tokenizer()
    rollout, schemas = agent_rollout(ScriptedPolicy(tok))
    completions = one_group(rollout, schemas)
    assert len(completions) == 2 and completions[0].token_ids == completions[1].token_ids
    c = completions[0]
    mask, ids = c.loss_mask, c.token_ids
    reply = [t for t, m in zip(ids, mask) if not m]
    assert tok.decode(reply) == "\n<|im_start|>user\n<tool_response>\n17\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert re.fullmatch("1+0+1+", "".join(map(str, mask)))  # a turn, its reply, the answer
    assert tok.decode([t for t, m in zip(ids, mask) if m]).endswith("<|im_end|>The secret number of apple is 17.<|im_end|>")
    assert c.stopped and c.trace.ended == "answer" and c.trace.calls == {"lookup": 1} and len(c.trace.turns) == 2
    assert c.trace.turns[0]["replies"] == [{"name": "lookup", "content": "17", "status": "ok"}]
    # the updates train the model's own tokens only
    row = training_row(PromptGroup(5, tuple(range(3))), c)
    assert [t for t in row["labels"] if t != -100] == [t for t, m in zip(ids, mask) if m]
    # the reward reads the finished environment
    messages = [{"role": "assistant", "content": t["model"]} for t in c.trace.turns]
    assert environment_pool.score(f"{ROOT / 'data' / 'agent_tiny_env.py'}:found", None, [None] * 2,
                                  [messages] * 2, {}, {}, [x.trace.key for x in completions]) == [1.0, 1.0]
    environment_pool._live.clear()


def test_an_agent_that_keeps_calling_ends_at_max_turns_and_one_out_of_room_at_max_total_tokens():
    from training.rl import environment_pool

    tok = tokenizer()
    rollout, schemas = agent_rollout(ScriptedPolicy(tok, stubborn=True), max_turns=3)
    (c, _) = one_group(rollout, schemas)
    assert c.trace.ended == "max_turns" and c.trace.calls == {"lookup": 2} and len(c.trace.turns) == 3
    rollout, schemas = agent_rollout(ScriptedPolicy(tok, stubborn=True), max_turns=8, max_total_tokens=120)
    (c, _) = one_group(rollout, schemas)
    assert c.trace.ended == "max_total_tokens" and len(c.token_ids) <= 120 and not c.stopped
    environment_pool._live.clear()


PATIENT_ENV = '''
import os
import time


class Patient:
    """Its lookup of "apple" answers only once the flag file exists."""

    def reset(self, flag: str, **kwargs):
        self.flag = flag

    def lookup(self, word: str) -> str:
        """The secret number of a word.

        Args:
            word: the word
        """
        while word == "apple" and not os.path.exists(self.flag):
            time.sleep(0.01)
        return "17"
'''


class Signalling(ScriptedPolicy):
    """The scripted policy, which makes the flag file when it generates a turn of the pear's prompt."""

    def __init__(self, tok, flag):
        super().__init__(tok)
        self.flag = flag

    def sample(self, prompt, *args):
        if "pear" in self.tok.decode(prompt.tolist()):
            self.flag.touch()
        return super().sample(prompt, *args)


def test_one_groups_tools_run_while_another_group_generates(tmp_path):
    """The apple group's tool answers only after the pear group's first turn is generated: were the
    groups taken one after the other, it would pass tool_timeout and end its trajectories."""
    from training.contract.tool_template import ToolTemplate
    from training.rl import environment_pool
    from training.rl.agent_rollout import AgentRollout
    from training.rl.environment_pool import Environments
    from training.rl.rollout import PromptGroup
    from training.rl.sampling import SamplingParams

    (tmp_path / "patient.py").write_text(PATIENT_ENV)
    spec, flag, tok = f"{tmp_path / 'patient.py'}:Patient", tmp_path / "generated", tokenizer()
    schemas = [t.schema for t in tools(load_environment(spec))]
    rollout = AgentRollout(Signalling(tok, flag), Environments(spec, InProcess(), 3.0, 4), ToolTemplate(tok, schemas),
                           tok, 3, 256, 1024)
    groups = []
    for sample_id, word in enumerate(("apple", "pear")):
        prompt = [{"role": "user", "content": f"What is the secret number of {word}?"}]
        groups.append(PromptGroup(sample_id, tuple(rollout.template.prompt_ids(prompt)),
                                  {"prompt": prompt, "columns": {"flag": str(flag)}}))
    params = SamplingParams(max_new_tokens=64, stop_token_ids=(tok.convert_tokens_to_ids("<|im_end|>"),))
    completions = list(rollout.generate(groups, 2, params, step=1))
    assert [[c.sample_id for c in group] for group in completions] == [[0, 0], [1, 1]]  # in the groups' order
    assert [c.trace.ended for group in completions for c in group] == ["answer"] * 4
    environment_pool._live.clear()


def test_a_timed_out_trajectorys_reward_is_as_on_tool_timeout_says():
    import math

    from training.rl.experience import after_timeouts
    from training.rl.agent_rollout import Trace
    from training.rl.rollout import Completion

    done, timed_out = (Completion(0, i, (), True, trace=Trace(ended=e)) for i, e in enumerate(("answer", "tool_timeout")))
    assert after_timeouts([0.5, 0.7], [done, timed_out], "score") == [0.5, 0.7]
    assert after_timeouts([0.5, 0.7], [done, timed_out], "zero") == [0.5, 0.0]
    kept, dropped = after_timeouts([0.5, 0.7], [done, timed_out], "drop")
    assert kept == 0.5 and math.isnan(dropped)


def test_the_docs_calculator_is_the_shipped_one_and_answers_and_errs_as_agents_see_it():
    """docs/agents.md shows data/calculator_env.py as it is; its tool computes, a bad expression is an
    error the model reads, and its reward reads the finished environment."""
    from training.rl import environment_pool

    page = (ROOT / "docs" / "agents.md").read_text()
    block = page[page.index("```python\n# data/calculator_env.py\n"):].split("\n", 2)[2].split("```", 1)[0]
    assert block in (ROOT / "data" / "calculator_env.py").read_text()
    spec = f"{ROOT / 'data' / 'calculator_env.py'}:Calculator"
    assert [t.name for t in check_environment(spec, [f"{ROOT / 'data' / 'calculator_env.py'}:used_the_calculator"])] \
        == ["calculate"]
    environment_pool.start_episodes(spec, [((0, 0, 0), {"answer": "400"}, 0)])
    ((good, _), (bad, _)), = environment_pool.call_tools(
        [((0, 0, 0), [ToolCall("calculate", {"expression": "17 * 23 + 9"}),
                      ToolCall("calculate", {"expression": "__import__('os')"})])], 5.0, 2)
    assert (good.content, bad.status) == ("400", "raised") and bad.content.startswith("Error: ValueError: cannot evaluate")
    answer = [{"role": "assistant", "content": "It is 400."}]
    assert environment_pool.score(f"{ROOT / 'data' / 'calculator_env.py'}:used_the_calculator", None, [None], [answer],
                                  {}, {}, [(0, 0, 0)]) == [1.0]
    environment_pool._live.clear()


AGENT_ARG = "recipes.training_config.training_args.method_args."


@pytest.mark.parametrize("overrides, says", [
    ([f"{AGENT_ARG}environment=data/no_such_env.py:Calculator"], "the file data/no_such_env.py of"),
    ([f"{AGENT_ARG}environment=data/calculator_env.py:Calculater"], "has no class 'Calculater'"),
    ([f"{AGENT_ARG}environment=null"], "takes `environments`, and no training_config.training_args.method_args."
                                       "environment is set"),
    ([f"+{AGENT_ARG}rollout_engine=vllm"], "an agent's multi-turn rollouts run on the trainer's own sampler"),
    (["recipes.training_config.model_config.tokenizer_name_or_path=data/tiny_tokenizers/chatml_qwen2"],
     "teaches no tool-call format this project reads"),
])
def test_an_agent_recipe_that_cannot_run_is_one_line_before_anything_is_written(launch, tmp_path, overrides, says):
    code, out, err = launch("recipes=llama/tiny_llama_agent", *overrides)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


# --- an OpenEnv environment over HTTP (training.contract.openenv), against a server on loopback ---

OPENENV_CLIENT = '''
from training.contract.openenv import OpenEnvHTTP


class Echo(OpenEnvHTTP):
    base_url = "{url}"

    def step(self, message: str) -> str:
        """Send a message to be echoed.

        Args:
            message: The message.
        """
        return self._act({{"message": message}})


def echoed(completions, environments, **kwargs):
    return [sum(env.rewards) for env in environments]
'''


@pytest.fixture
def echo_server():
    """OpenEnv's echo environment's HTTP protocol: /reset and /step answer observation, reward, done;
    each reset starts an episode of its own (the requests carry no episode: a client per trajectory)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            if self.path == "/reset":
                answer = {"observation": {"echoed_message": "", "seed": body.get("seed")}, "reward": None, "done": False}
            else:
                message = body["action"]["message"]
                answer = {"observation": {"echoed_message": message}, "reward": len(message), "done": message == "bye"}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_an_openenv_environment_over_http_is_an_agents_environment(echo_server, tmp_path):
    from training.rl import environment_pool

    url, seen = echo_server
    (tmp_path / "echo_env.py").write_text(OPENENV_CLIENT.format(url=url))
    spec = f"{tmp_path / 'echo_env.py'}:Echo"
    (step,) = check_environment(spec, [f"{tmp_path / 'echo_env.py'}:echoed"])
    assert step.schema["function"]["parameters"]["properties"] == {"message": {"type": "string",
                                                                               "description": "The message."}}
    keys = [(4, 0, 2), (4, 1, 2)]
    first = environment_pool.start_episodes(spec, [(k, {"question": "q"}, 7 + k[1]) for k in keys])
    assert first == ['{"echoed_message": "", "seed": 7}', '{"echoed_message": "", "seed": 8}']
    replies = environment_pool.call_tools([(keys[0], [ToolCall("step", {"message": "hello"}),
                                                      ToolCall("step", {"message": "bye"}),
                                                      ToolCall("step", {"message": "again"})]),
                                           (keys[1], [ToolCall("step", {"message": "hi"})])], 5.0, 2)
    assert [(r.status, r.content) for r, _ in replies[0]] == [
        ("ok", '{"echoed_message": "hello"}'), ("ok", '{"echoed_message": "bye"}'),
        ("raised", "Error: RuntimeError: the episode is over: answer without calling the environment again")]
    assert ("/step", {"action": {"message": "hi"}}) in seen
    assert environment_pool.score(f"{tmp_path / 'echo_env.py'}:echoed", None, [None] * 2, ["a", "b"], {}, {},
                                  keys) == [8.0, 2.0]
    environment_pool._live.clear()


UNREACHABLE = f'''
import sys
sys.path.insert(0, {str(ROOT / "data")!r})
from agent_tiny_env import SecretNumbers, found


class Unreachable(SecretNumbers):
    def lookup(self, word: str) -> str:
        """Look up the secret number of a word.

        Args:
            word: The word whose secret number to return.
        """
        raise ConnectionError("the secrets service refused the connection")
'''


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_an_environment_whose_every_tool_call_fails_is_said_each_step_and_stops_the_run_with_a_checkpoint(tmp_path):
    """The tiny agent's environment, its service down: every `lookup` raises. Each step warns naming
    the environment, the kind and one reply; after tool_max_failed_steps (2) such steps the run stops
    with one error line and that step's checkpoint, instead of training on error replies."""
    import subprocess
    import sys

    from conftest import records

    (tmp_path / "env.py").write_text(UNREACHABLE)
    spec = f"{tmp_path / 'env.py'}:Unreachable"
    done = subprocess.run([sys.executable, str(ROOT / "launcher.py"), "recipes=llama/tiny_llama_agent", "action=local",
                           f"{AGENT_ARG}environment={spec}", f"{AGENT_ARG}rewards=[{tmp_path / 'env.py'}:found]",
                           f"+{AGENT_ARG}tool_max_failed_steps=2", "recipes.training_config.training_args.max_steps=6",
                           "recipes.training_config.training_args.train_batch_size=4",
                           f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=360)
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (f"error: the environment {spec} failed every tool call for 2 steps in a row (training_config."
            f"training_args.method_args.tool_max_failed_steps=2)") in done.stderr, done.stderr[-3000:]
    warnings = [r for r in records(tmp_path / "run") if r.get("event") == "warning"]
    failed = [w for w in warnings if w["message"].startswith(f"the environment {spec}: ")]
    assert [w["step"] for w in failed] == [1, 2], warnings
    assert re.search(r"(\d+) of \1 tool calls failed at step 1 \(\d+ raised\); one of them: lookup: Error: "
                     r"ConnectionError: the secrets service refused the connection$", failed[0]["message"]), failed
    assert max(r["step"] for r in records(tmp_path / "run") if "reward" in r) == 2
    assert (tmp_path / "run" / "checkpoints" / "step-00000002" / "COMPLETE").exists()
