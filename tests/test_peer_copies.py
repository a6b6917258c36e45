"""Peer copies (training.state.peer_store): a node that dies costs the steps since the last copy, not
those since the last checkpoint; a node lost with its buddy falls back to the durable checkpoint. The
transport's and the store's rules on real servers on loopback; the whole path through rehearsals that
kill nodes as a cluster does."""

import io
import json

import pytest

from conftest import ROOT, committed_samples, losses, records
from training.contract.checkpoint_dirs import COMPLETE
from training.state import peer_server as peers
from training.state.peer_server import NodeServer, RemoteFile
from training.state.peer_store import PeerStore


@pytest.fixture
def nodes(tmp_path):
    """Three nodes' peer directories, each served as a node's first process serves it."""
    roots = [tmp_path / f"node{i}" / "peer" for i in range(3)]
    servers = [NodeServer(root, "127.0.0.1") for root in roots]
    yield roots, servers
    for server in servers:
        server.close()


def _copy(roots, servers, step: int, ranks_per_node: int = 1) -> None:
    """What a copy leaves: each rank's shard on its node and its buddy's, the manifest on every node."""
    urls = [s.url for s in servers]
    manifest = {}
    for node, root in enumerate(roots):
        store = PeerStore(root, urls, node)
        for r in range(node * ranks_per_node, (node + 1) * ranks_per_node):
            path = root / f"step-{step:08d}" / f"__{r}_0.distcp"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes([r]) * (100 + r))
            manifest[path.name] = [path.stat().st_size, None]
            peers.send(f"{store.buddy}/step-{step:08d}/{path.name}", path)
    PeerStore(roots[0], urls, 0).put(step, COMPLETE, json.dumps({"files": manifest}).encode())


def test_a_file_is_put_whole_and_read_back_by_range(nodes):
    roots, servers = nodes
    data = bytes(range(256)) * 4096
    peers.send(f"{servers[1].url}/step-00000003/__0_0.distcp", data)
    assert (roots[1] / "step-00000003" / "__0_0.distcp").read_bytes() == data
    assert not list(roots[1].rglob("*.tmp-*"))
    with io.BufferedReader(RemoteFile(f"{servers[1].url}/step-00000003/__0_0.distcp", len(data)), 4096) as f:
        f.seek(1000)
        assert f.read(5000) == data[1000:6000]
        f.seek(len(data) - 10)
        assert f.read() == data[-10:]
    assert peers.index(servers[1].url) == {"step-00000003": {"__0_0.distcp": len(data)}}


def test_the_server_serves_step_directories_only(nodes):
    roots, servers = nodes
    (roots[0].parent / "secret").write_text("not a peer file")
    for path in ("/../secret", "/step-1/../../secret", "/secret"):
        with pytest.raises(peers.PeerError, match="404|400"):
            peers.fetch(servers[0].url + path)
    with pytest.raises(peers.PeerError, match="400"):
        peers.send(servers[0].url + "/../escaped", b"x")
    assert not (roots[0].parent.parent / "escaped").exists()


def test_a_step_is_restorable_while_every_shard_has_a_live_holder(nodes):
    roots, servers = nodes
    urls = [s.url for s in servers]
    _copy(roots, servers, 7)
    assert PeerStore(roots[0], urls, 0).complete_steps() == [7]
    # Node 2 dies: its shard lives on in its buddy, node 0; what node 1 needs of it comes from there.
    servers[2].close()
    store = PeerStore(roots[0], urls[:2], 0)
    assert store.complete_steps() == [7] and store.shortfall(newer_than=None) is None
    assert PeerStore(roots[1], urls[:2], 1).get(7, "__2_0.distcp") == bytes([2]) * 102
    # Node 1 dies too: its shard was on it and on its buddy, node 2. The copy cannot be restored, and
    # the start says why.
    store = PeerStore(roots[0], urls[:1], 0)
    assert store.complete_steps() == []
    assert "__1_0.distcp of step-00000007 was on lost nodes only" in store.shortfall(newer_than=None)
    assert store.shortfall(newer_than=7) is None  # a durable checkpoint as new: nothing to say


def test_a_copy_without_its_manifest_is_never_restored_and_older_copies_go_once_a_newer_completes(nodes):
    roots, servers = nodes
    urls = [s.url for s in servers]
    _copy(roots, servers, 4)
    (roots[1] / "step-00000005").mkdir()
    (roots[1] / "step-00000005" / "__1_0.distcp").write_bytes(b"half")  # a copy cut off by a fault
    store = PeerStore(roots[1], urls, 1)
    assert store.complete_steps() == [4]
    _copy(roots, servers, 6)
    for node, root in enumerate(roots):
        PeerStore(root, urls, node).drop_older(6)
    assert store.complete_steps() == [6]
    assert sorted(p.name for root in roots for p in root.iterdir()) == ["step-00000006"] * 3


# --- the whole path, on the tiny SFT twin ------------------------------------------------------------

KILLS = [{"step": 0, "nodes": 3}, {"step": 6, "kill": True}, {"step": 9, "nodes": 3}, {"step": 14, "kill": 2},
         {"step": 16, "nodes": 3}]
STEPS = 20


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """3 nodes, one killed at step 6 (its copy lives on its buddy), back to 3 at step 9 (a graceful
    resize: the durable checkpoint), two of three killed at step 14 (one of them the other's buddy:
    the copy cannot be restored), back to 3. Checkpoints on the volume only at the resizes and the end."""
    from elastic_launcher.cli import main

    tmp = tmp_path_factory.mktemp("peer-copies")
    trace = "[" + ",".join("{" + ",".join(f"{k}:{str(v).lower()}" for k, v in e.items()) + "}" for e in KILLS) + "]"
    code = main(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", "action=rehearse",
                 f"local.trace={trace}", f"local.run_dir={tmp / 'run'}", "local.timeout=500",
                 f"recipes.training_config.training_args.max_steps={STEPS}",
                 "recipes.training_config.checkpoint.save_steps=1000", "recipes.training_config.checkpoint.peer_steps=1",
                 "recipes.training_config.logging.audit_samples=true", f"output_dir={tmp / 'out'}"])
    return code, tmp / "run"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_dead_node_costs_one_step_and_a_node_lost_with_its_buddy_falls_back_exactly(killed):
    code, run_dir = killed
    assert code == 0
    report = json.loads((run_dir / "rehearsal_report.json").read_text())
    failures = [t for t in report["transitions"] if t["cause"] == "failure"]
    assert [(t["from_nodes"], t["to_nodes"]) for t in failures] == [(3, 2), (3, 1)]
    one, two = failures
    # One node dead: resumed from the peer copies, at most the step in flight trained again (the
    # durable checkpoint was the start: without the copies, 6 steps). Node 1 read what it needed of
    # node 2's shards from node 0 (its buddy) over the wire.
    assert one["resumed_from"] in ("peers step 5", "peers step 6") and one["steps_recomputed"] <= 1
    assert one["read_mb"]["peers' memory"] > 0
    # Two dead, node 1 with its buddy node 2: the durable checkpoint of the resize at step 9.
    assert two["resumed_from"] == "durable step 9" and two["steps_recomputed"] == 5
    log = (run_dir / "torchrun.log").read_text()
    assert "resumed from step-00000009 from the durable checkpoint; the peer copies cannot restore it: " \
           "__1_0.distcp of step-0000001" in log and "(a node and its buddy lost together)" in log
    # Exact: every step's loss is the fixed-size run's, every sample seen once per committed step.
    got, want = losses(run_dir), losses(run_dir / "fixed")
    assert sorted(got) == list(range(1, STEPS + 1))
    assert max(abs(got[s] - want[s]) / abs(want[s]) for s in want) <= 1e-5
    samples = committed_samples(run_dir)
    assert samples == committed_samples(run_dir / "fixed")
    flat = [i for step in sorted(samples) for i in samples[step]]
    assert len(flat) == len(set(flat))
    assert report["matched"] and report["samples_identical"]
    # Nothing half-copied is left in the nodes' memory: each live node holds the newest copy only.
    for node in (run_dir / "node-local").iterdir():
        held = sorted(p.name for p in (node / "peer").iterdir())
        assert len(held) == 1 and (node / "peer" / held[0] / COMPLETE).exists()
    assert [r["source"] for r in records(run_dir) if r.get("event") == "resume"] == \
        ["peers", "durable", "durable", "durable"]


# A node dies at each point of a step, and during the copy and the recovery themselves (tests/fixtures/
# faults/sitecustomize.py: its memory volume removed, its process SIGKILLed), on 3 nodes of one process.
FAULTS = [{"at": "forward", "rank": 2, "step": 3}, {"at": "backward", "rank": 1, "step": 5},
          {"at": "optimizer", "rank": 0, "step": 7}, {"at": "copy", "rank": 2, "step": 10},
          {"at": "recovery", "rank": 1, "step": 9}]
FAULT_STEPS = 14


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_node_dying_at_any_point_costs_at_most_a_step_and_one_lost_in_recovery_falls_back(tmp_path):
    """The first three deaths resume from the peer copies with at most one committed step trained again
    (the copy in flight at the death is never used: the one before it is). The fourth kills a node while
    it puts the copy of step 10 on its buddy (that copy never completes) and the fifth the next start
    while it restores the copy of step 9: that node was the buddy of the fourth's, so no live node holds
    their shards, and the job resumes from the durable checkpoint (step 8), saying so. Every step's loss
    and samples are the fixed-size run's."""
    from conftest import run_launcher_process

    env = {"PYTHONPATH": str(ROOT / "tests" / "fixtures" / "faults"), "ELASTIC_TEST_FAULTS": json.dumps(FAULTS),
           "ELASTIC_TEST_FAULTS_DIR": str(tmp_path)}
    done = run_launcher_process(
        "recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", "action=rehearse",
        "local.trace=[{step:0,nodes:3}]", f"local.run_dir={tmp_path / 'run'}", "local.timeout=400",
        f"recipes.training_config.training_args.max_steps={FAULT_STEPS}", "cluster.job_max_retry_count=10",
        "recipes.training_config.checkpoint.save_steps=8", "recipes.training_config.checkpoint.peer_steps=1",
        "recipes.training_config.logging.audit_samples=true", f"output_dir={tmp_path / 'out'}", env=env, timeout=560)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert sorted(p.name for p in tmp_path.glob("fault-*-fired")) == [f"fault-{i}-fired" for i in range(len(FAULTS))]
    log = (run_dir / "torchrun.log").read_text()
    assert [line.split(": its")[0] for line in log.splitlines() if line.startswith("fault: ")] == \
        [f"fault: {f['at']} of step {s} on rank {f['rank']}" for f, s in zip(FAULTS, [3, 5, 7, 10, 9])]
    # The start killed by the fifth logs no resume: three from the peers, then the durable fallback.
    resumes = [r for r in records(run_dir) if r.get("event") == "resume"]
    assert [r["source"] for r in resumes] == ["peers"] * 3 + ["durable"] and resumes[3]["step"] == 8
    assert "resumed from step-00000008 from the durable checkpoint; the peer copies cannot restore it: __1_0.distcp " \
           "of step-00000009 was on lost nodes only" in log
    # Committed twice: the steps between the state a death resumed from and the step it died in.
    audit = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in audit]
    redone = {s for s in steps if steps.count(s) > 1}
    for resumed, died in zip((r["step"] for r in resumes), (3, 5, 7)):
        assert died - 2 <= resumed < died and set(range(resumed + 1, died)) <= redone
    assert {9, 10} <= {s for s in redone if s > 7} <= {9, 10, 11}  # the fallback: from step 8
    got, want = losses(run_dir), losses(run_dir / "fixed")
    assert sorted(got) == list(range(1, FAULT_STEPS + 1))
    assert max(abs(got[s] - want[s]) / abs(want[s]) for s in want) <= 1e-5
    assert committed_samples(run_dir) == committed_samples(run_dir / "fixed")
    assert "vs fixed-size run: MATCHED" in done.stdout
