"""The trainer as Kubeflow Trainer v2's `torch-distributed` runtime starts it: every node's pod runs
the TrainJob's command (`torchrun -m training --config-dir=...`) with the PET_* variables the
runtime injects (node count, processes per node, node rank, master address and port), from which
torchrun sets the environment the trainer reads. Here two such "nodes" run on this machine."""

import os
import socket
import subprocess
import sys

import pytest
import yaml

from conftest import records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_trainer_runs_as_the_torch_distributed_runtime_starts_it(launch, tmp_path):
    run_dir = tmp_path / "run"
    code, _, err = launch("recipes=llama/tiny_llama_sft", "target=trainjob", f"recipes.run.output_dir={run_dir}",
                          "recipes.training_config.training_args.max_steps=3")
    assert code == 0, err
    job_dir = next((tmp_path / "out").iterdir())
    trainjob = [d for d in yaml.safe_load_all((job_dir / "manifest.yaml").read_text()) if d][1]
    trainer = trainjob["spec"]["trainer"]
    nodes, per_node = trainer["numNodes"], trainer["numProcPerNode"]
    assert (nodes, per_node) == (2, 1)
    # The pod's command line, with the ConfigMap's mount replaced by the rendered configs.
    assert trainer["command"] == ["torchrun"]
    command = [sys.executable, "-m", "torch.distributed.run",
               *[a.replace("=/config", f"={job_dir / 'configs'}") for a in trainer["args"]]]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    env.update({e["name"]: e["value"] for e in trainer["env"]}, OMP_NUM_THREADS="1")
    pods = []
    for node_rank in range(nodes):  # what the runtime adds to each node's container
        pet = {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(per_node), "PET_NODE_RANK": str(node_rank),
               "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}
        pods.append(subprocess.Popen(command, env={**env, **pet}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True))
    outputs = []
    try:
        for pod in pods:
            outputs.append(pod.communicate(timeout=300)[0])
    finally:
        for pod in pods:
            if pod.poll() is None:
                os.killpg(pod.pid, 9)
    assert [pod.returncode for pod in pods] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    start = next(r for r in records(run_dir) if r.get("event") == "start")
    assert (start["world_size"], start["nodes"], start["config"]) == (2, 2, "config-n2.yaml")
    assert [r["step"] for r in records(run_dir) if "loss" in r] == [1, 2, 3]
    # Each node's local rank 0 prints which node rank it runs: what `action=logs` reads.
    for node_rank, output in enumerate(outputs):
        assert f'"event": "node", "node_rank": {node_rank}, "nodes": 2' in output
