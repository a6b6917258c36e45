"""Every bad input the launcher catches: one line naming the key, the value and the fix, a non-zero
exit, no traceback, and nothing written."""

import pytest

from conftest import MAIN_COMMAND, ROOT, run_launcher_process

ELASTIC = ["recipes.elastic_policy.is_elastic=true"]
TINY = ["recipes=llama/tiny_llama_sft", *ELASTIC]
TINY_ARGS = "recipes.training_config.training_args"
TINY_DATA = "recipes.training_config.datasets"

CASES = {
    "unknown recipe": (["recipes=llama/llama3_1_8b_stf"], "did you mean llama/llama3_1_8b_sft"),
    "unknown scale-config set": (["scale_configs@recipes.scale_config=llama3_8b_p4"], "did you mean llama3_8b_p4d"),
    "misspelled override key": ([f"{TINY_ARGS}.lerning_rate=1"], f"did you mean '{TINY_ARGS}.learning_rate'"),
    "misspelled key added with +": ([f"+{TINY_ARGS}.lerning_rate=1"], "unknown key 'recipes.training_config."
                                    "training_args.lerning_rate': did you mean 'learning_rate'"),
    "a method key the recipe leaves at its default, without +": (
        ["recipes=llama/tiny_llama_grpo", f"{TINY_ARGS}.method_args.clip_ratio_c=2"],
        f"'{TINY_ARGS}.method_args.clip_ratio_c' is a method key the recipe leaves at its default: set it with "
        f"+{TINY_ARGS}.method_args.clip_ratio_c=..."),
    "vLLM rollouts on an instance without GPUs": (
        ["recipes=llama/tiny_llama_grpo", f"+{TINY_ARGS}.method_args.rollout_engine=vllm"],
        "method_args.rollout_engine=vllm needs GPUs, and ml.m5.2xlarge has none (the image's vLLM is its CUDA build; "
        "action=local runs vLLM's CPU build): set rollout_engine=trainer or a GPU instance type"),
    "a local train_data that does not exist, at the dry run": (
        ["recipes=llama/tiny_llama_grpo", f"{TINY_DATA}.train_data=data/grpo_tin.jsonl"],
        "training_config.datasets.train_data='data/grpo_tin.jsonl' does not exist (did you mean "
        "'data/grpo_tiny.jsonl'?)"),
    "a local train_data that does not exist, before a local run starts": (
        ["recipes=llama/tiny_llama_sft", f"{TINY_DATA}.train_data=data/sft_tiyn.jsonl", "action=local"],
        "does not exist (did you mean 'data/sft_tiny.jsonl'?)"),
    "a misspelled reward function, before a local run starts": (
        ["recipes=llama/tiny_llama_grpo", f"{TINY_ARGS}.method_args.rewards=[data/grpo_tiny_rewards.py:digitz]",
         "action=local"],
        "grpo_tiny_rewards.py has no function 'digitz': did you mean 'digits'?"),
    "vLLM's batch invariance for a model with linear attention": (
        ["recipes=qwen/qwen3_5_4b_grpo_lora", f"+{TINY_ARGS}.method_args.rollout_batch_invariant=true"],
        "method_args.rollout_batch_invariant=true: vLLM has no batch-invariant kernels for this model's linear_attention "
        "layers (it refuses to start): set it false"),
    "a vLLM engine wider than a node's share": (
        ["recipes=llama/llama3_1_8b_sft", f"{TINY_ARGS}.trainer_type=grpo", "recipes.training_config.datasets.packing=false",
         f"+{TINY_ARGS}.method_args.rollout_engine=vllm", f"+{TINY_ARGS}.method_args.rollout_tensor_parallel_size=3"],
        "rollout_tensor_parallel_size=3 does not divide the 8 processes of a node"),
    "misspelled key in a scale_config entry": (
        [*MAIN_COMMAND, "+recipes.scale_config.n4.training_config.training_args.micro_batch=2"],
        "unknown key 'recipes.scale_config.n4.training_config.training_args.micro_batch'"),
    "integer scale_config key on the command line": (
        ["recipes.scale_config.4.training_config.training_args.learning_rate=1"],
        "recipes.scale_config.n4.training_config.training_args.learning_rate="),
    "wrong value type": (["recipes.trainer.num_nodes=abc"], "recipes.trainer.num_nodes='abc' is not an integer"),
    "missing mandatory value": (["recipes.training_config.model_config.model_name_or_path=???"],
                                "recipes.training_config.model_config.model_name_or_path has no value"),
    "a model path beside an inline architecture": (
        ["recipes=llama/tiny_llama_sft", "recipes.training_config.model_config.model_name_or_path=/models/mine"],
        "sets both model_name_or_path='/models/mine' and an inline architecture (model_type llama): set "
        "model_config.architecture=null to train that model"),
    "a docs placeholder pasted as written": (["cluster.image=<image>"],
                                             "cluster.image=<image> is the docs' placeholder: put your own image there"),
    "min > max": ([*ELASTIC, "recipes.elastic_policy.min_nodes=4", "recipes.elastic_policy.max_nodes=2"],
                  "min_nodes=4 is greater than max_nodes=2"),
    "min < 1": ([*ELASTIC, "recipes.elastic_policy.min_nodes=0"], "recipes.elastic_policy.min_nodes=0 must be >= 1"),
    "step and discrete both set": ([*ELASTIC, "recipes.elastic_policy.replica_increment_step=2",
                                    "recipes.elastic_policy.replica_discrete_values=[2,4]"], "keep one"),
    "discrete values outside [min, max]": (
        [*MAIN_COMMAND, "recipes.elastic_policy.replica_discrete_values=[2,4,16]"], "[16] outside [min_nodes=2"),
    "discrete values empty": ([*MAIN_COMMAND, "recipes.elastic_policy.replica_discrete_values=[]"],
                              "replica_discrete_values is empty"),
    "step never reaches max": ([*MAIN_COMMAND, "recipes.elastic_policy.replica_increment_step=4"],
                               "replica_increment_step=4 never reaches max_nodes=8"),
    "step < 1": ([*MAIN_COMMAND, "recipes.elastic_policy.replica_increment_step=0"], "replica_increment_step=0 must"),
    "no allowed size at all": ([*ELASTIC, "recipes.elastic_policy.min_nodes=20", "recipes.elastic_policy.max_nodes=30"],
                               "no scale_config entry inside [min_nodes=20, max_nodes=30]"),
    "data-parallel size exceeds global batch": (
        [*TINY, "recipes.elastic_policy.max_nodes=9", "recipes.elastic_policy.replica_increment_step=1"],
        "at 9 nodes: recipes.training_config.training_args.train_batch_size=8 is smaller than the data-parallel size 9"),
    "global batch not conserved": (
        [*TINY, "recipes.scale_config.n3.training_config.training_args.uneven_batch.large_local_batch_size=4"],
        "1x2 + 2x4 = 10 samples at data-parallel size 3, but train_batch_size=8"),
    "uneven sizes without use_uneven_batch": (
        [*TINY, "recipes.scale_config.n3.training_config.training_args.uneven_batch.use_uneven_batch=false"],
        "use_uneven_batch=false: set use_uneven_batch=true"),
    "uneven small > large": (
        [*TINY, "recipes.scale_config.n3.training_config.training_args.uneven_batch.small_local_batch_size=4",
         "recipes.scale_config.n3.training_config.training_args.uneven_batch.large_local_batch_size=2"],
        "need 1 <= small <= large"),
    "uneven small-group count above DP size": (
        [*TINY, "recipes.scale_config.n3.training_config.training_args.uneven_batch.num_dp_groups_with_small_batch_size=5"],
        "num_dp_groups_with_small_batch_size=5 is outside [0, 3]"),
    "uneven numbers only partly given": (
        [*TINY, "recipes.scale_config.n3.training_config.training_args.uneven_batch.small_local_batch_size=null"],
        "give all three or none"),
    "micro-batch < 1": ([f"{TINY_ARGS}.micro_train_batch_size=0", "recipes=llama/tiny_llama_sft",
                         "recipes.scale_config.n2.training_config.training_args.micro_train_batch_size=0"],
                        "micro_train_batch_size=0 must be >= 1"),
    "micro-batch < 1 for every size: the error names the key typed": (
        [f"{TINY_ARGS}.micro_train_batch_size=0", "recipes=llama/tiny_llama_sft"],
        "at 2 nodes: recipes.training_config.training_args.micro_train_batch_size=0 must be >= 1"),
    "global batch differs between sizes": (
        [*TINY, "recipes.scale_config.n3.training_config.training_args.train_batch_size=9",
         "recipes.scale_config.n3.training_config.training_args.uneven_batch.large_local_batch_size=3",
         "recipes.scale_config.n3.training_config.training_args.uneven_batch.num_dp_groups_with_small_batch_size=0"],
        "train_batch_size is 9 at 3 nodes but 8 at 1"),
    "scale_config entry contradicts its key": (
        ["recipes=llama/tiny_llama_sft", "+recipes.scale_config.n2.trainer.num_nodes=3"],
        "recipes.scale_config.n2.trainer.num_nodes=3 contradicts its key n2"),
    "scale_config key that is no node count": (["+recipes.scale_config.nfoo.trainer.num_nodes=3"],
                                               "scale_config key 'nfoo' is not a node count"),
    "unknown instance type": (["recipes.instance_type=ml.p5.48xl"], "did you mean 'ml.p5.48xlarge'"),
    "job name not RFC 1123": (["cluster.job_name=My_Job"], "cluster.job_name='My_Job' is not a valid Kubernetes name"),
    "job name over 63 chars": ([f"cluster.job_name={'a' * 64}"], "is 64 characters; Kubernetes allows 63"),
    "missing image when submitting": (["action=submit"], "cluster.image is not set"),
    "negative timeout": ([*MAIN_COMMAND, "recipes.elastic_policy.graceful_shutdown_timeout=-5"],
                         "graceful_shutdown_timeout=-5 is out of range: it must be >= 0"),
    "keep_last=0 would delete the checkpoint just written": (["recipes.training_config.checkpoint.keep_last=0"],
                                                            "checkpoint.keep_last=0 is out of range: it must be >= 1"),
    "save_steps=0": (["recipes.training_config.checkpoint.save_steps=0"], "save_steps=0 is out of range"),
    "checkpoint uri that is not S3": (["+recipes.training_config.checkpoint.uri=/fsx/ckpt"],
                                      "training_config.checkpoint.uri='/fsx/ckpt' is not an S3 uri: give "
                                      "s3://<bucket>/<prefix>"),
    "per-size checkpoint uri would split the checkpoints": (
        [*TINY, "+recipes.training_config.checkpoint.uri=s3://b/run",
         "+recipes.scale_config.n2.training_config.checkpoint.uri=s3://b/other"],
        "training_config.checkpoint.uri is 's3://b/other' at 2 nodes but 's3://b/run' at 1"),
    "log_every=0": (["recipes.training_config.logging.log_every=0"], "log_every=0 is out of range"),
    "beta out of range": (["recipes.training_config.training_args.adam_beta2=1.5"], "adam_beta2=1.5 is out of range"),
    "unknown activation checkpointing policy": (["recipes.training_config.model_config.activation_checkpointing=some"],
                                                "is not one of none, selective, full"),
    "top-level typo": (["acton=local"], "unknown key 'acton' in override of 'acton': did you mean 'action'?"),
    "top-level group typo": (["reciepes=llama/tiny_llama_sft"], "did you mean 'recipes'?"),
    "a recipe key without its prefix": (["training_config.checkpoint.uri=s3://b/p"],
                                        "unknown key 'training_config' in override of 'training_config.checkpoint.uri': "
                                        "did you mean 'recipes.training_config.checkpoint.uri'?"),
    "a recipe key without its prefix, added with +": (["+elastic_policy.min_nodes=2"],
                                                      "unknown key 'elastic_policy' in override of 'elastic_policy."
                                                      "min_nodes': did you mean 'recipes.elastic_policy.min_nodes'?"),
    "samples before any run": (["recipes=llama/tiny_llama_grpo", "action=samples", "local.run_dir=/nonexistent/run"],
                               "/nonexistent/run holds no run yet: run it first (action=local with the same recipe"),
    "a new top-level key": (["+bogus=1"], "unknown key 'bogus': valid keys: action, cluster, local, output_dir, recipes, "
                                          "simulate, target"),
    "scale-config set given as a value": (["recipes.scale_config=llama3_8b_p4d"],
                                          "to swap the scale-config set use scale_configs@recipes.scale_config="
                                          "llama3_8b_p4d"),
    "scale-config given a number": (["recipes.scale_config=5"], "recipes.scale_config=5 is not a mapping"),
    "elastic sizes on a static job": (["recipes.elastic_policy.min_nodes=2"],
                                      "recipes.elastic_policy.min_nodes is set but recipes.elastic_policy.is_elastic=false"),
    "per-size rollout lag would be refused at resume": (
        ["recipes=llama/tiny_llama_grpo", "recipes.elastic_policy.is_elastic=true",
         "+recipes.training_config.training_args.method_args.max_steps_off_policy=2",
         "+recipes.scale_config.n2.training_config.training_args.method_args.max_steps_off_policy=1"],
        "training_config.training_args.method_args.max_steps_off_policy is 1 at 2 nodes but 2 at 1"),
    "per-size packing would be refused at resume": (
        [*TINY, "+recipes.scale_config.n2.training_config.datasets.packing=true"],
        "training_config.datasets.packing is True at 2 nodes but False at 1"),
    "unknown action": (["action=sumbit"], "did you mean action=submit"),
    "unknown target": (["target=kubeflw"], "did you mean target=kubeflow"),
    "secret as plain env": (["+cluster.env.HF_TOKEN=hf_abc"], "cluster.env.HF_TOKEN looks like a secret"),
    "malformed secret reference": (["+cluster.secret_env.HF_TOKEN=hf-token"], "must be {secret: <secret name>"),
    "unknown flag": (["--verbose"], "unknown flag --verbose"),
    "rehearsal of a static job": (["recipes=llama/tiny_llama_sft", "action=rehearse", "local.trace=[{step:0,nodes:2}]"],
                                  "action=rehearse needs an elastic recipe"),
    "rehearsal without a trace": ([*TINY, "action=rehearse"], "local.trace is not set: give capacity events"),
    "trace event without nodes or kill": ([*TINY, "action=rehearse", "local.trace=[{step:3}]"],
                                          "local.trace[0]={'step': 3} needs either nodes (the free capacity) or kill: true"),
    "trace event with step and time": ([*TINY, "action=rehearse", "local.trace=[{step:3,time:2,nodes:1}]"],
                                       "needs exactly one of step or time"),
    "rehearsal under agents without hyperpodrun": (
        [*TINY, "action=rehearse", "local.trace=[{step:0,nodes:2}]", "local.agent_python=/usr/bin/python3"],
        "local.agent_python='/usr/bin/python3' has no hyperpodrun beside it"),
    "rehearsal under agents of a Kubeflow job": (
        [*TINY, "action=rehearse", "local.trace=[{step:0,nodes:2}]", "target=kubeflow", "local.agent_python=/x/python"],
        "local.agent_python rehearses the HyperPod agent, not target=kubeflow"),
    "local run at a size the recipe disallows": (["recipes=llama/tiny_llama_sft", "action=local", "local.nodes=3"],
                                                 "local.nodes=3 is not a size this recipe allows (2)"),
    "bad override syntax": (["recipes.run.name=[unclosed"], "recipes.run.name=[unclosed"),
}


@pytest.mark.parametrize("overrides,message", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_clear_line(launch, tmp_path, overrides, message):
    code, out, err = launch(*overrides)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists(), "nothing may be written for a bad input"


def test_configmap_over_one_mebibyte_is_rejected(launch, tmp_path):
    big = "x" * 70_000  # an inline value copied into each of the 17 per-size files
    code, _, err = launch(*ELASTIC, "recipes.elastic_policy.max_nodes=16", "recipes.elastic_policy.replica_increment_step=1",
                          f"recipes.training_config.datasets.chat_template={big}")
    assert code == 2
    assert "over Kubernetes' 1 MiB limit" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_full_traceback_on_request():
    quiet = run_launcher_process("recipes.elastic_policy.is_elastic=true", "recipes.elastic_policy.min_nodes=0")
    loud = run_launcher_process("recipes.elastic_policy.is_elastic=true", "recipes.elastic_policy.min_nodes=0",
                                env={"HYDRA_FULL_ERROR": "1"})
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    assert loud.returncode != 0 and "Traceback" in loud.stderr and "min_nodes=0" in loud.stderr


@pytest.mark.parametrize("setting", ["output_dir", "local.run_dir"])
def test_an_unwritable_output_or_run_dir_is_one_line(tmp_path, capsys, monkeypatch, setting):
    """A path under a file, or one the system refuses, ends in one line naming the setting, rc 2."""
    from elastic_launcher.cli import main

    monkeypatch.chdir(ROOT)
    (tmp_path / "a_file").write_text("")
    others = ["action=local", f"output_dir={tmp_path / 'out'}"] if setting == "local.run_dir" else []
    for path, why in ((tmp_path / "a_file" / "run", f"{tmp_path / 'a_file'} is a file"),
                      ("/proc/results/run", "cannot make the directory /proc/results")):
        code = main(["recipes=llama/tiny_llama_sft", *others, f"{setting}={path}"])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(f"error: {setting}: {why}"), err
        assert err.strip().endswith(f"set {setting} to a directory you can write")


def test_checkpoints_in_s3_need_no_volume_but_a_service_account(launch):
    """The dry run names the bucket as the trainer's to check, drops the checkpoint volume's warning, and
    warns where no service account gives the pods a role for the bucket."""
    code, out, err = launch(*MAIN_COMMAND, "+recipes.training_config.checkpoint.uri=s3://my-bucket/llama")
    assert code == 0, err
    assert "checkpoints: s3://my-bucket/llama (checked by the trainer; the pods reach it with their role, no " \
           "volume needed)" in out
    assert "no cluster.checkpoint_pvc" not in out and "warning: no cluster.service_account" in out
    code, out, _ = launch(*MAIN_COMMAND, "+recipes.training_config.checkpoint.uri=s3://my-bucket/llama",
                          "cluster.service_account=trainer")
    assert "with cluster.service_account=trainer's role" in out and "warning: no cluster.service_account" not in out
    code, out, _ = launch(*MAIN_COMMAND)
    assert "warning: no cluster.checkpoint_pvc" in out
