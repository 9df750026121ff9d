"""What a person reads from a cluster preflight speaks their words (issue 20 item 6): progress lines, findings
and errors never show the protocol's internal names (cfacts, ident, claim, collective-go...), with real
`ddpdoctor preflight` processes on 127.0.0.x."""
from __future__ import annotations

import re

import pytest

from tests.cluster_procs import assert_clean, budget_s, cluster  # noqa: F401 - fixture

# The protocol's own names as a person would see them in a message (not words like "identity").
INTERNAL = re.compile(r"\b(cfacts|ident(?![a-z])|collective-go|shared-nonce|claim/\d|beat/|done/|facts/\d)")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_progress_lines_say_what_the_master_waits_for_in_user_words(cluster, tmp_path):
    """The workers look for a file the master wrote in a directory that is not shared: each waits for it a
    few seconds before posting its check results, so the master waits for them and says so."""
    c = cluster(3)
    args = lambda r: ("--shared-dir", str(_dir(tmp_path, r)), "--set", "shared-dir.visible_within_s=3")  # noqa: E731
    c.start_master(*args(0), only="shared-dir,launch-args", timeout=20)
    for r in (1, 2):
        c.start(r, *args(r), only="shared-dir,launch-args", timeout=20)
    codes = c.finish(budget_s(20))
    assert codes == {0: 1, 1: 1, 2: 1}, c.report()  # the shared-dir check fails: node-local directories
    master = c.nodes[0]
    names = sorted(n for n, d in master.doc()["nodes"].items() if d["rank"] != 0)
    waiting = [ln for ln in master.stderr.splitlines() if "waiting for" in ln]
    assert any(f"waiting for the check results of {', '.join(names)}" in ln for ln in waiting), master.stderr
    for node in c.nodes.values():
        assert_clean(node)
        assert not INTERNAL.search(node.stderr), node.stderr
        text = " ".join(r["summary"] + " " + r["fix"] for r in node.doc()["results"])
        assert not INTERNAL.search(text), text


def _dir(tmp_path, r: int):
    d = tmp_path / f"node{r}"
    d.mkdir(exist_ok=True)
    return d
