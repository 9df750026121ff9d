"""Unit tests of ddpdoctor/cluster/roster.py."""
from __future__ import annotations

from ddpdoctor.cluster import roster


def node(rank, host, addr, claim=1):
    return {"rank": rank, "claim": claim, "host": host, "addr": addr}


def test_names_are_unique_and_readable():
    idents = [node(0, "a", "10.0.0.1"), node(1, "b", "10.0.0.2"), node(2, "b", "10.0.0.3"),
              node(3, "c", "10.0.0.4"), node(3, "c", "10.0.0.4", claim=2)]
    roster.name_nodes(idents)
    assert [i["name"] for i in idents] == ["a", "b@10.0.0.2", "b@10.0.0.3", "c@10.0.0.4#r3", "c@10.0.0.4#r3.2"]


def test_long_host_names_are_shortened_for_display_and_stay_distinct():
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    assert len(roster.display_host(a)) <= roster.DISPLAY_HOST_MAX
    assert roster.display_host(a) != roster.display_host(b)
    assert roster.display_host("short") == "short"


def test_missing_message_names_ranks_hosts_and_duplicates():
    msg = roster.missing_message(present=[0, 1], missing=[2], idents=[node(0, "a", "1.1.1.1"), node(1, "b", "1.1.1.2"),
                                                                     node(1, "c", "1.1.1.3", claim=2)],
                                 endpoint="a:29500", nnodes=3, timeout=20)
    assert "missing rank(s) 2" in msg and "b (1.1.1.2) rank 1" in msg and "claimed by more than one node" in msg


def test_a_missing_node_is_told_to_start_what_every_node_runs(monkeypatch):
    """run-trainer's gate meets on the port after the job's: telling the user to start `ddpdoctor preflight` on
    that port sent them to the wrong command. The gate passes its own; a bare preflight keeps its own."""
    from ddpdoctor import preflight
    from ddpdoctor.launch import gate
    from ddpdoctor.launch.config import TrainerConfig

    ident = [node(0, "a", "1.1.1.1")]
    own = roster.missing_message(present=[0], missing=[1], idents=ident, endpoint="a:29501", nnodes=2, timeout=5)
    assert "start `ddpdoctor preflight --master a:29501 --nnodes 2`" in own
    seen = []

    def fake_run(request, quiet=False):
        seen.append(request)
        return {"verdict": "pass", "results": []}

    cfg = TrainerConfig(nnodes=2, nproc_per_node=1, master="a:29500", run_id="r1")
    monkeypatch.setattr(preflight, "run", fake_run)
    gate.run_preflight(cfg, preflight.PreflightRequest())
    command = seen[0].node_command
    assert seen[0].master == "a:29501" and command.startswith("ddpdoctor run-trainer --nnodes 2 --master a:29500")
    msg = roster.missing_message(present=[0], missing=[1], idents=ident, endpoint="a:29501", nnodes=2, timeout=5,
                                 launcher="slurm", command=command)
    assert f"srun --ntasks-per-node=1 {command}" in msg and "ddpdoctor preflight" not in msg
