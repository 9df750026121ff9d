"""A cluster preflight says who has joined while it waits (issue 41 item 1): plain lines when stderr is no
terminal, one line updated in place (rich's status) on a terminal, the lines that are no waiting state kept."""
from __future__ import annotations

import io

from ddpdoctor.cluster.master import _who_joined
from ddpdoctor.cluster.progress import Progress


def test_the_joined_nodes_are_named_with_their_rank_and_address():
    valid = {0: [{"host": "vm", "addr": "10.0.0.1"}], 2: [{"host": "gpu\x1b[2J2", "addr": "10.0.0.3"}]}
    assert _who_joined(valid, [1]) == ": rank 0 vm (10.0.0.1), rank 2 gpu\x1b[2J2 (10.0.0.3)"
    assert _who_joined({}, [0, 1]) == ""
    many = {r: [{"host": f"n{r}", "addr": f"10.0.0.{r}"}] for r in range(12)}
    assert _who_joined(many, []).endswith("rank 7 n7 (10.0.0.7) and 4 more")


def test_plain_lines_off_a_terminal_each_change_once_and_escapes_shown(capsys):
    p = Progress(False, "rank 0", live=False)
    for text in ("1/3 nodes joined: rank 0 vm (1.1.1.1); waiting for rank(s) 1, 2",) * 2 + ("host \x1b[2J",):
        p.say(text, dedupe=True)
    p.close()
    err = capsys.readouterr().err.splitlines()
    assert err == ["[ddpdoctor rank 0] 1/3 nodes joined: rank 0 vm (1.1.1.1); waiting for rank(s) 1, 2",
                   "[ddpdoctor rank 0] host \\x1b[2J"]


def test_on_a_terminal_the_waiting_state_is_one_line_in_place_and_other_lines_stay(monkeypatch):
    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda **kw: Console(file=out, force_terminal=True, width=100))
    p = Progress(False, "rank 0", live=True)
    p.say("1/3 nodes joined: rank 0 vm (1.1.1.1); waiting for rank(s) 1, 2", dedupe=True)
    status = p._status
    assert status is not None
    p.say("2/3 nodes joined: rank 0 vm (1.1.1.1), rank 1 b (1.1.1.2); waiting for rank(s) 2", dedupe=True)
    assert p._status is status and str(status.status).startswith("[ddpdoctor rank 0] 2/3 nodes joined")
    p.say("all 3 nodes joined as vm; testing links")  # not a waiting state: printed above, kept
    p.close()
    assert p._status is None and "all 3 nodes joined as vm; testing links" in out.getvalue()


def test_off_a_terminal_a_waiting_state_is_said_at_most_every_few_seconds(capsys, monkeypatch):
    """Issue 47: a line at every change of who has joined (47 lines at 5 nodes against 44 at 2): the log must not
    grow with the node count. Changes of one waiting state: at most one line per PLAIN_EVERY_S, the state that still
    holds at a later poll said then; another waiting state (the next phase) at once."""
    import ddpdoctor.cluster.progress as progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    p = Progress(False, "rank 0", live=False)
    for joined in range(1, 200):  # 199 nodes join within a second
        p.say(f"{joined}/200 nodes joined: rank 0 vm; waiting for rank(s) {joined}", dedupe=True)
        clock[0] += 0.005
    p.say("waiting for the check results of n1, n2", dedupe=True)  # the next phase: said at once
    p.say("waiting for the check results of n2", dedupe=True)
    clock[0] += progress.PLAIN_EVERY_S
    p.say("waiting for the check results of n2", dedupe=True)  # still so at a later poll: said now
    err = capsys.readouterr().err.splitlines()
    assert err == ["[ddpdoctor rank 0] 1/200 nodes joined: rank 0 vm; waiting for rank(s) 1",
                   "[ddpdoctor rank 0] waiting for the check results of n1, n2",
                   "[ddpdoctor rank 0] waiting for the check results of n2"]
