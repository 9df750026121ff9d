"""Issue 38: nodes of another user, with umask 0000 (real processes, the node as `nobody` through setpriv).

* A keyed master (its key file in its home) and a worker that shares the home but runs as another user: the
  worker cannot read the key, and the master refuses it. It was told "missing rank(s) 1" (its own rank, as if it
  had never started); now both say first that it was not taken for want of the key, and the worker says why
  it could not read it.
* Every node as another user with umask 0000, in a home it cannot write: no key anywhere, and every node says
  the run is NOT AUTHENTICATED (a worker also NOT VERIFIED, exit 5).
"""
from __future__ import annotations

import os

import pytest

from tests.as_nobody import NOBODY, why_not
from tests.cluster_procs import assert_clean, budget_s, cluster  # noqa: F401 - fixture

TIMEOUT = 30  # a node as another user is exec'd, not forked: its interpreter and torch start take seconds more
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(why_not()), reason=str(why_not()))]


def _as_nobody(umask: str = "0000") -> tuple[str, ...]:
    return ("sh", "-c", f'umask {umask} && exec "$@"', "sh", *NOBODY)


def _env() -> dict:
    import ddpdoctor

    return {"PYTHONPATH": os.path.dirname(os.path.dirname(ddpdoctor.__file__)), "DDPDOCTOR_NO_SAVE": "1"}


def _started_worker(c):
    """Rank 1 as nobody, started first and waited for (exec'd, not forked, its start takes seconds on a loaded
    machine): the master's meet deadline then measures the protocol, not the worker's interpreter start."""
    worker = c.start(1, timeout=TIMEOUT + 15, json_out=False, env=_env(), prefix=_as_nobody())
    assert worker.wait_for_line("not answering yet", 120), c.report()
    return worker


def _error(node) -> str:
    return [ln for ln in node.stderr.splitlines() if ln.startswith("Error:")][-1]


@pytest.mark.timeout(200)
def test_a_worker_of_another_user_is_told_why_a_keyed_master_refused_it(cluster, tmp_path):
    c = cluster(2)
    os.chmod(c.home, 0o755)  # the worker may look into the shared home; the key directory stays the master's
    worker = _started_worker(c)
    master = c.start_master(timeout=25, json_out=False, env=_env())  # refuses at its meet deadline
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 3, 1: 3}, c.report()
    assert _error(master).startswith("Error: not taken: rank 1 was claimed without the run's key"), c.report()
    error = _error(worker)
    assert error.startswith("Error: this node (rank 1) was not taken: the master signs this run with its key file"), error
    assert "could not read the key (" in error and ".ddpdoctor/keys/" in error and "DDPDOCTOR_TOKEN" in error, error
    assert "NOT authenticated" in worker.stderr, worker.stderr[-2000:]


@pytest.mark.timeout(200)
def test_a_run_of_another_user_with_umask_0000_and_no_key_says_not_authenticated(cluster, tmp_path):
    c = cluster(2)  # the home is root's, mode 0700: the nodes (nobody) can write no key file there
    worker = _started_worker(c)
    master = c.start_master(timeout=TIMEOUT, json_out=False, env=_env(), prefix=_as_nobody())
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
        assert "WARNING: this run is NOT authenticated" in node.stderr, c.report()
    assert codes == {0: 0, 1: 5}, c.report()
    assert "NOT AUTHENTICATED: this run was not authenticated" in master.stdout, c.report()
    assert "NOT VERIFIED" in worker.stdout and "NOT AUTHENTICATED" in worker.stdout, c.report()
