"""The opt-in cross-node meeting of a job's prologs (site config `cross_node = true`) on the suite's real SLURM:
node3's firewall drops every connection to it but slurmd's (a firewall between nodes, which no per-node check can
see): the three prologs of a 3-node job meet, every node learns that node3 is the one all failing links name, node3
alone fails its prolog and drains, node1 and node2 pass and stay up; the job is requeued with node3 named in its
comment. A healthy job's prologs meet and pass first.

A cluster of its own (198.18.4.0/24, controller port 6857). The meeting's budget is 20 s here (three prologs start
their interpreters at once on two loaded cores; the default is 10 s: tests/benchmarks/bench_prolog_meeting.py).
"""
from __future__ import annotations

import json
import os

import pytest

from tests.integration.test_slurm_prolog import CONF, node3_drained, site, squeue, wait_for
from tests.slurm_cluster import SlurmCluster, unavailable, running

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PROM = "/etc/ddpdoctor/prom"  # prometheus_textfile, in each node's own /etc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if unavailable():
        pytest.skip(unavailable())
    results = tmp_path_factory.mktemp("meeting-results")
    os.chmod(results, 0o755)
    key = tmp_path_factory.mktemp("key") / "cross-node.key"
    key.write_text(os.urandom(24).hex() + "\n")
    key.chmod(0o600)
    text = site(results).replace("[node-check]\n", f'[node-check]\ncross_node = true\ncross_node_budget_s = 20\n'
                                 f'cross_node_key = "{key}"\nprometheus_textfile = "{PROM}"\n', 1)
    # each node's textfile folder in its own /etc (the overlay): a node's series are its own, as on a real cluster
    c = SlurmCluster(subnet="198.18.4", port=6857, extra_conf=CONF,
                     node_etc={"ddpdoctor/ddpdoctor.toml": text, "ddpdoctor/prom/README": "node_exporter's folder\n"})
    with running(c, results):
        yield c


def prolog_records(c: SlurmCluster, job: str) -> dict[str, dict]:
    out = {}
    for n in (1, 2, 3):
        found = sorted((c.results / f"node{n}").glob(f"*-prolog-{job}.json"))
        if found:
            out[f"node{n}"] = json.loads(found[-1].read_text())["node_check"]
    return out


@pytest.mark.timeout(240)
def test_the_node_behind_a_firewall_is_found_by_the_jobs_prologs_and_only_it_drains(cluster, tmp_path):
    c = cluster
    for i in (1, 2, 3):
        wait_for(f"node{i}'s first health check", lambda i=i: list((c.results / f"node{i}").glob("*-health_check.json")),
                 c, limit=90)
    out = tmp_path / "healthy.out"
    job = c.run(["sbatch", "-N3", "-o", str(out), "--wrap", "hostname"], timeout=30).stdout.split()[-1]
    wait_for("the healthy job's output", lambda: out.is_file() and out.read_text().strip(), c, limit=90)
    met = prolog_records(c, job)
    assert sorted(met) == ["node1", "node2", "node3"], met
    assert all(m["cross_node"].get("verdict") == "pass" and m["action"] == "none" for m in met.values()), met
    c.wait_idle(60)

    for rule in (["-A", "INPUT", "-p", "tcp", "--dport", "6818", "-j", "ACCEPT"],
                 ["-A", "INPUT", "-p", "tcp", "-m", "state", "--state", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                 ["-A", "INPUT", "-p", "tcp", "-j", "DROP"]):
        c.in_node(3, "iptables", *rule)
    marks = tmp_path / "ran"
    marks.mkdir(mode=0o777)
    job = c.run(["sbatch", "-N3", "-o", "/dev/null", "--wrap", f"touch {marks}/$(hostname)"], timeout=30).stdout.split()[-1]
    drained = wait_for("node3 drained by its prolog", lambda: node3_drained(c), c, limit=90)
    # a meeting's drain names its source and the command that lifts it once fixed (issue 56.2)
    assert "ddpdoctor: mesh [meeting]: node3 is the node common to 2 failing results" in drained, drained
    assert "State=RESUME" in drained, drained
    wait_for("every prolog's record", lambda: len(prolog_records(c, job)) == 3, c, limit=60)
    met = prolog_records(c, job)
    assert met["node3"]["action"] == "drain" and met["node3"]["scontrol"]["requeue"]["ok"], met["node3"]
    assert met["node1"]["action"] == met["node2"]["action"] == "none", met
    for m in met.values():  # every node was told which node is wrong
        assert {tuple(r["nodes"]) for r in m["cross_node"]["results"]} == {("node1", "node3"), ("node2", "node3")}
    assert squeue(c, job, "%k").startswith("ddpdoctor: node3 failed its prolog (mesh: node3 is the node common")
    states = dict(line.split() for line in c.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15).stdout.splitlines())
    assert "drain" not in states["node1"] and "drain" not in states["node2"], states  # only the wrong node drains
    assert list(marks.iterdir()) == []
    c.run(["scancel", job], timeout=15)


def prom_lines(c: SlurmCluster, n: int, family: str) -> list[str]:
    path = c.tmp / "etc" / f"node{n}" / "upper" / PROM.lstrip("/").removeprefix("etc/") / "ddpdoctor.prom"
    return [ln for ln in path.read_text().splitlines() if ln.startswith(family + "{")] if path.is_file() else []


@pytest.mark.timeout(200)
def test_a_firewall_between_two_nodes_blames_neither_and_is_said_in_the_jobs_comment_and_a_series(cluster):
    """Issue 56.5: node3 refuses new connections from node1 only (node2 and slurmd's port still reach it): the
    meeting finds the one link node1 -> node3 failing, blames neither node (one link names two), and says so: the
    job's comment names both nodes, the port and what answered; node1 and node3 write
    ddpdoctor_meeting_link_status{peer} (3: fail). The job is not requeued (the same nodes would meet the same
    link): it runs. One job on this module's cluster: about 15 s."""
    c = cluster
    c.in_node(3, "iptables", "-F", "INPUT")  # the test before left node3 behind its firewall, and drained
    c.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], timeout=15)
    c.wait_idle(60)
    for rule in (["-A", "INPUT", "-p", "tcp", "--dport", "6818", "-j", "ACCEPT"],
                 ["-A", "INPUT", "-s", c.node_addr(1), "-p", "tcp", "--syn", "-j", "DROP"]):
        c.in_node(3, "iptables", *rule)
    try:
        job = c.run(["sbatch", "-N3", "-o", "/dev/null", "--wrap", "true"], timeout=30).stdout.split()[-1]
        wait_for("every prolog's record", lambda: len(prolog_records(c, job)) == 3, c, limit=90)
    finally:
        c.in_node(3, "iptables", "-F", "INPUT")
    met = prolog_records(c, job)
    assert all(m["action"] == "none" and not (m["scontrol"] or {}).get("requeue") for m in met.values()), met
    for m in met.values():
        (link,) = m["cross_node"]["links"]
        assert link["nodes"] == ["node1", "node3"] and m["cross_node"]["blamed"] == [], m["cross_node"]
    assert met["node1"]["scontrol"]["comment"]["ok"], met["node1"]
    shown = c.run(["scontrol", "show", "job", job], timeout=15).stdout
    said = f"Comment=ddpdoctor: the meeting of the job nodes found mesh: link node1 -> node3 timed out (TCP to " \
           f"{c.node_addr(3)}:"
    assert said in shown and "no node drained" in shown and "not requeued" in shown, shown
    for n, peer in ((1, "node3"), (3, "node1")):
        (line,) = prom_lines(c, n, "ddpdoctor_meeting_link_status")
        assert f'peer="{peer}"' in line and 'check="mesh"' in line and line.endswith(" 3.0"), line
    (met2,) = prom_lines(c, 2, "ddpdoctor_meeting_skipped")  # node2 wrote its meeting's series: none of a link
    assert met2.endswith(" 0.0"), met2
    assert prom_lines(c, 2, "ddpdoctor_meeting_link_status") == []
    states = dict(line.split() for line in c.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15).stdout.splitlines())
    assert not any("drain" in s for s in states.values()), states
