"""ddpdoctor-slurm-check as slurm.conf runs it on the suite's real SLURM (tests/slurm_cluster.py): Prolog=, Epilog=
and HealthCheckProgram= name the console script with no arguments, and every node reads its site config from its own
/etc/ddpdoctor/ddpdoctor.toml. One node's /dev/shm is made Docker's 64 MiB (a tmpfs in that node's mount namespace,
which its slurmd, prolog and health check see): the node is drained with a reason naming /dev/shm, the job does not
run there and a healthy node runs it; after the fix the next health check resumes it; an admin's own drain is left.

A cluster of its own (another subnet and controller port than test_slurm.py's, so the two modules may run at the
same time), brought up once for the module. slurm.conf as a site writes it, with three settings made short for a
test: HealthCheckInterval (300 s in production), AuthInfo's cred_expire (a requeued job waits cred_expire + 1 s,
120 s by default) and the scheduler's sched_interval (60 s).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.readme_blocks import slurm_conf
from tests.slurm_cluster import SlurmCluster, unavailable, running

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

BIN = os.path.dirname(sys.executable)  # the venv's console scripts: their shebang is the venv's python
CHECK = f"{BIN}/ddpdoctor-slurm-check"
INTERVAL = 10  # HealthCheckInterval, seconds
WAIT = 3 * INTERVAL + 30  # a health check round on 2 loaded cores: the interval, then a torch import per node
# The lines README's "Run it unattended" gives a site, with this venv's console script and the test's interval
README_PATH = "/opt/ddpdoctor/bin/ddpdoctor-slurm-check"
UNATTENDED_CONF = (slurm_conf().replace(README_PATH, CHECK)
                   .replace("HealthCheckInterval=300", f"HealthCheckInterval={INTERVAL}")
                   .replace("SchedulerParameters=nohold_on_prolog_fail",
                            "SchedulerParameters=nohold_on_prolog_fail,sched_interval=2"))
# node3 first: a one-node job goes there unless it is drained, so the prolog is what keeps the job off it
WEIGHTED = ("NodeName=node[1-2] NodeAddr={subnet}.[1-2] CPUs=1 Weight=10 State=UNKNOWN\n"
            "NodeName=node3 NodeAddr={subnet}.3 CPUs=1 Weight=1 State=UNKNOWN")


def site_config(results: Path, conf: str) -> str:
    """budget_s: 20 s on a loaded 2-core CI (production: 8). slurm_conf: a health check runs without SLURM_CONF,
    and this cluster's is not /etc/slurm/slurm.conf. skip: the checks that import torch (torch-build, gpu,
    nccl-runtime; gpu-perf is opt-in anyway), because three nodes importing torch every 10 s take most of two cores
    (tests/benchmarks/bench_unattended.py times the node check with them). prolog_budget_s: 10 s, not 3: a fresh-clone
    CI run (2026-12-08, load 6-10) ran node3's prolog out of 3 s before its shm check ended (a skip, by design), so
    the job ran on the node with 64 MiB of shm; what a failing prolog does is these tests' subject."""
    return (f'[node-check]\nresults_dir = "{results}"\nbudget_s = 20\nprolog_budget_s = 10\nslurm_conf = "{conf}"\n'
            'skip = ["torch-build", "gpu", "nccl-runtime", "gpu-perf"]\n\n'
            '[checks.resources]\nmin_free_disk_gib = 0.0\nmin_available_memory_gib = 0.0\n')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if unavailable():
        pytest.skip(unavailable())
    results = tmp_path_factory.mktemp("node-check-results")
    os.chmod(results, 0o755)
    c = SlurmCluster(subnet="198.18.1", port=6827, extra_conf=UNATTENDED_CONF, nodes_conf=WEIGHTED,
                     auth_extra=",cred_expire=10",
                     node_etc={"ddpdoctor/ddpdoctor.toml": site_config(results, "{slurm_conf}")})
    with running(c, results):
        yield c


def records(c: SlurmCluster, node: str) -> list[dict]:
    folder = c.results / node
    out = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue  # being renamed into place
    return out


def node_state(c: SlurmCluster, node: str) -> tuple[str, str]:
    """(sinfo's long state, the reason) of one node."""
    out = c.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], timeout=15).stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_for(what: str, ready, limit: float = WAIT, c: SlurmCluster | None = None):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        got = ready()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}\n{c.logs(1500) if c else ''}")


def new_record(c: SlurmCluster, node: str, after: float, context: str, action: str | None = None):
    """The first record of ``context`` on ``node`` created after ``after`` (epoch s), with ``action`` if given."""
    import datetime as dt

    for r in records(c, node):
        made = dt.datetime.fromisoformat(r["created"]).timestamp()
        nc = r["node_check"]
        if made >= int(after) and nc["context"] == context and (action is None or nc["action"] == action):
            return r
    return None


def shm(c: SlurmCluster, node: int, small: bool) -> None:
    if small:
        c.in_node_mounts(node, "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", "/dev/shm")
    else:
        c.in_node_mounts(node, "umount", "/dev/shm")


@pytest.mark.timeout(240)
def test_prolog_drains_the_node_whose_shm_is_64mib_and_a_healthy_node_runs_the_job(cluster, tmp_path):
    c = cluster
    # slurmd runs the health check as it starts: every node passes, nothing is drained
    for node in ("node1", "node2", "node3"):
        first = wait_for(f"{node}'s first health check", lambda n=node: new_record(c, n, 0, "health_check"), c=c)
        assert first["verdict"] in ("pass", "warn") and first["node_check"]["action"] == "none", first["node_check"]
    assert all("drain" not in node_state(c, n)[0] for n in ("node1", "node2", "node3"))

    shm(c, 3, small=True)
    out = tmp_path / "job.out"
    p = c.run(["sbatch", "-N1", "-o", str(out), "--wrap", "hostname"], timeout=30)
    assert p.returncode == 0, p.stderr
    job = p.stdout.split()[-1]
    ran_on = wait_for("the requeued job to run on a healthy node",
                      lambda: out.is_file() and out.read_text().strip(), limit=90, c=c)
    assert ran_on in ("node1", "node2"), ran_on  # never node3

    prolog = new_record(c, "node3", 0, "prolog")
    assert prolog is not None, "no prolog record on node3"
    nc = prolog["node_check"]
    assert nc["job_id"] == job and nc["action"] in ("drain", "keep"), nc  # "keep": a health check drained it first
    assert [f["check"] for f in nc["findings"]] == ["resources"] and "/dev/shm is 64 MiB" in nc["findings"][0]["summary"]
    state, reason = node_state(c, "node3")
    assert "drain" in state, state
    assert reason.startswith("ddpdoctor: resources: /dev/shm is 64 MiB"), reason
    # the node that ran it: its prolog and epilog passed, nothing drained
    wait_for(f"{ran_on}'s epilog record", lambda: new_record(c, ran_on, 0, "epilog"), limit=30, c=c)
    for context in ("prolog", "epilog"):
        r = new_record(c, ran_on, 0, context)
        assert r["node_check"]["job_id"] == job and r["node_check"]["action"] == "none", r["node_check"]
    assert all("drain" not in node_state(c, n)[0] for n in ("node1", "node2"))


@pytest.mark.timeout(240)
def test_health_check_resumes_its_own_drain_after_the_fix_drains_again_and_leaves_an_admins_drain(cluster):
    c = cluster
    if "drain" not in node_state(c, "node3")[0]:  # run alone: node3 broken and drained by a health check first
        shm(c, 3, small=True)
        wait_for("node3 drained", lambda: "drain" in node_state(c, "node3")[0], c=c)
    # the fix on node3, and an admin's own drain on node2, at once: the next round resumes one and leaves the other
    shm(c, 3, small=False)
    c.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=admin: new DIMM"], timeout=15)
    fixed_at = time.time()
    resumed = wait_for("a health check resuming node3", lambda: new_record(c, "node3", fixed_at, "health_check",
                                                                           "resume"), c=c)
    assert resumed["verdict"] in ("pass", "warn") and resumed["node_check"]["scontrol"]["ok"], resumed["node_check"]
    left = wait_for("a health check on node2", lambda: new_record(c, "node2", fixed_at, "health_check"), c=c)
    assert left["node_check"]["action"] == "leave", left["node_check"]
    assert "drain" not in node_state(c, "node3")[0]
    assert node_state(c, "node2") == ("drained", "admin: new DIMM") or \
        node_state(c, "node2")[1] == "admin: new DIMM", node_state(c, "node2")

    # broken again with no job to start: the health check itself drains it
    shm(c, 3, small=True)
    broke_at = time.time()
    drained = wait_for("a health check draining node3", lambda: new_record(c, "node3", broke_at, "health_check",
                                                                           "drain"), c=c)
    assert drained["node_check"]["scontrol"]["ok"], drained["node_check"]
    state, reason = node_state(c, "node3")
    assert "drain" in state and reason.startswith("ddpdoctor: resources: /dev/shm is 64 MiB"), (state, reason)
    assert node_state(c, "node2")[1] == "admin: new DIMM"
