"""run-trainer's terminal view on documents of every shape: a reference run, a user script's collectives, a
hang verdict with a desync, an interrupted run, a `postmortem` document."""
from __future__ import annotations

from rich.console import Console

from ddpdoctor.report.console_trainer import describe_start
from ddpdoctor.report.console_trainer import render


def shown(doc: dict) -> str:
    console = Console(record=True, width=200, force_terminal=False)
    render(doc, console)
    return console.export_text()


def test_pass_of_the_reference_trainer_says_fresh_or_resumed():
    doc = {"verdict": "pass", "run_id": "r2", "start": {"fresh": False, "from_run": "r1", "step": 10},
           "metrics_summary": {"steps": 14, "ranks": 2, "first_loss": 3.1, "final_loss": 2.9, "tokens_per_s_mean": 9.0},
           "restarts": 0, "checksums_equal": True}
    text = shown(doc)
    assert "PASS · run r2, resumed from run r1 at step 10 · 14 steps on 2 rank(s)" in text
    assert describe_start({"fresh": True}) == describe_start(None) == "started from scratch (no snapshot resumed)"


def test_pass_of_a_user_script_shows_collectives_and_the_straggler():
    doc = {"verdict": "pass", "run_id": "r", "start": {"fresh": True}, "restarts": 0,
           "metrics_summary": {"collectives": 30, "ranks": 2, "collective_interval_s": 0.35},
           "collectives": {"ranks": {"0": {"completed": 30, "interval_s_median": 0.35},
                                     "1": {"completed": 30, "interval_s_median": 0.35}},
                           "straggler": {"rank": 1, "late_s_median": 0.3, "others_s_median": 0.0, "collectives": 30}}}
    text = shown(doc)
    assert "30 collectives on 2 rank(s), one every 0.35 s" in text and "straggler: rank 1" in text
    assert "loss" not in text


def test_hang_panel_names_class_culprit_collective_calls_and_threshold():
    verdict = {"class": "desync", "culprits": [{"rank": 0, "host": "n0", "where": "/u/t.py:31", "function": "save"}],
               "collective": {"pg": "0", "seq": 7, "op": "barrier", "waiting_ranks": [0, 1],
                              "call_site": {"where": "/u/t.py:31", "function": "save"},
                              "calls": {"0": {"op": "barrier", "input_sizes": "[]", "input_dtypes": "[]",
                                              "where": "/u/t.py:31"},
                                        "1": {"op": "all_reduce", "input_sizes": "[[16]]", "input_dtypes": "['Float']",
                                              "where": "/u/t.py:17"}}},
               "no_evidence": [3]}
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True},
           "root_cause": {"rank": 0, "local_rank": None, "host": "n0", "exit_code": None, "category": "hang",
                          "error_type": "desync", "message": "collective #7 differs", "location": "/u/t.py:31",
                          "fix": "make every rank issue the same collectives"},
           "consequences": [{"rank": 1, "host": "n1", "reason": "waited in barrier #7 for rank(s) 0",
                             "category": "hang"}],
           "hang": {"stalled_s": 5.0, "verdict": verdict, "stacks": {"0": "x", "1": "y"},
                    "threshold": {"seconds": 30.0, "source": "calibrated", "why": "5 x the longest gap"}}}
    text = shown(doc)
    for needle in ("where: /u/t.py:31 in save", "collective: barrier #7 (process group 0) called at /u/t.py:31",
                   "rank 1 called all_reduce [[16]] ['Float'] at /u/t.py:17", "no flight recorder from rank(s) 3",
                   "hang limit: 30.0 s without progress (calibrated from this job's own pace: 5 x the longest gap; "
                   "--hang-timeout sets it); no progress for 5.0 s", "consequence: rank 1 on n1: waited"):
        assert needle in text, (needle, text)


def test_interrupted_and_postmortem_documents_render():
    interrupted = {"verdict": "fail", "run_id": "r", "start": {"fresh": True}, "consequences": [],
                   "root_cause": {"category": "interrupted", "signal": "SIGTERM", "exit_code": 143,
                                  "message": "run-trainer received SIGTERM", "fix": "nothing to fix"}}
    assert "SIGTERM" in shown(interrupted)
    post = {"verdict": "fail", "run_id": "x", "start": None, "logs": "/l", "consequences": [],
            "root_cause": {"rank": 1, "category": "exception", "error_type": "KeyError", "message": "'labels'"}}
    assert "records in /l" in shown(post) and "KeyError: 'labels'" in shown(post)


def test_a_rank_shown_without_being_named_the_culprit_is_titled_the_first_failure():
    """A mismatch gloo aborted rank 1 on, no dumps: rank 1 only detected it (culprit_ranks empty), so the panel
    is not titled 'root cause' above it; a rankless verdict (a tie) says no rank is named; a culprit keeps it."""
    base = {"verdict": "fail", "run_id": "x", "start": None, "logs": "/l", "consequences": []}
    aborted = {**base, "culprit_ranks": [], "root_cause": {
        "rank": 1, "category": "desync", "signal": "SIGABRT", "error_type": "EnforceNotMet", "victim": False,
        "message": "Received data size doesn't match expected size", "reason": "detected the mismatch: ..."}}
    text = shown(aborted)
    assert "FAIL — first failure, no culprit named" in text and "root cause" not in text and "note: detected" in text
    tie = {**base, "culprit_ranks": [], "root_cause": {"rank": None, "category": "hang",
                                                       "error_type": "desync_no_majority", "message": "no majority"}}
    assert "FAIL — no culprit rank named" in shown(tie)
    named = {**base, "culprit_ranks": [1], "root_cause": {"rank": 1, "category": "exception", "message": "boom"}}
    assert "FAIL — root cause" in shown(named)


def test_pass_and_fail_name_run_json_and_the_logs_by_full_path():
    base = {"run_id": "r", "start": {"fresh": True}, "run_json": "/abs/results/r/run.json",
            "logs": "/abs/results/r/logs/node0"}
    ok = dict(base, verdict="pass", restarts=0, checksums_equal=True,
              metrics_summary={"steps": 3, "ranks": 2, "first_loss": 2.0, "final_loss": 1.0, "tokens_per_s_mean": 5.0})
    text = shown(ok)
    assert "\nrun.json: /abs/results/r/run.json\nlogs: /abs/results/r/logs/node0" in text  # one path a line
    assert "checksums equal across ranks: yes" in text and "True" not in text
    bad = dict(base, verdict="fail", consequences=[],
               root_cause={"rank": 1, "local_rank": None, "exit_code": None, "category": "hang", "message": "m"})
    text = shown(bad)
    assert "rank 1 (local rank —) on host — · no exit status in the records · a hang" in text and "None" not in text
    assert "run.json: /abs/results/r/run.json" in text


def test_run_json_and_the_logs_are_full_paths_under_the_working_directory_too(tmp_path, monkeypatch):
    """Issue 55 U3: the lines said `logs: ddpdoctor-results/r/logs/node0`, relative to a working directory that
    `srun`'s merged output of three nodes does not show; FORENSICS.md says full paths."""
    monkeypatch.chdir(tmp_path)
    doc = {"run_id": "r", "start": {"fresh": True}, "run_json": f"{tmp_path}/ddpdoctor-results/r/run.json",
           "logs": f"{tmp_path}/ddpdoctor-results/r/logs/node0", "verdict": "pass", "restarts": 0,
           "checksums_equal": True, "metrics_summary": {"steps": 3, "ranks": 2}}
    assert f"\nrun.json: {tmp_path}/ddpdoctor-results/r/run.json\nlogs: {tmp_path}/ddpdoctor-results/r/logs/node0" \
        in shown(doc)


def test_the_pass_line_breaks_between_phrases_at_80_columns():
    doc = {"verdict": "pass", "run_id": "20261123-153043-2d0ff9", "start": {"fresh": True}, "restarts": 0,
           "checksums_equal": True, "metrics_summary": {"steps": 20, "ranks": 2, "first_loss": 4.86559,
                                                        "final_loss": 2.96885, "tokens_per_s_mean": 41509.3}}
    console = Console(record=True, width=80, force_terminal=False)
    render(doc, console)
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert any("loss 4.86559 -> 2.96885" in line for line in lines)  # never split inside a phrase


def test_escape_sequences_in_another_process_text_never_reach_the_terminal_raw():
    """Issue 25: an error message with escape sequences reached the post-mortem panel raw."""
    import io

    from rich.console import Console

    from ddpdoctor.report.console_trainer import render

    evil = "boom \x1b[2J\x1b]0;owned\x07 \x9b31m \u202e"
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True}, "input_notes": [f"skipped {evil}"],
           "root_cause": {"rank": 1, "local_rank": 1, "host": f"h{evil}", "exit_code": 1, "category": "exception",
                          "error_type": "ValueError", "message": evil, "location": f"/x.py:3{evil}", "fix": evil},
           "consequences": [{"rank": 0, "host": evil, "reason": evil, "category": "peer_lost"}]}
    buf = io.StringIO()
    render(doc, Console(file=buf, force_terminal=True, width=300, color_system=None))
    out = buf.getvalue()
    assert "\x1b[2J" not in out and "\x1b]0;" not in out and "\x07" not in out and "\x9b" not in out
    assert "\u202e" not in out and "\\x1b[2J" in out


def test_a_huge_error_message_is_shown_by_its_start_not_across_a_thousand_lines():
    """A 100,000-character exception message (a tensor's repr, a long NCCL dump) filled 1,300 lines of the
    panel: it shows its start and says how much more the JSON result holds."""
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True},
           "root_cause": {"rank": 1, "host": "h", "exit_code": 1, "category": "exception", "error_type": "RuntimeError",
                          "message": "shape mismatch " + "w" * 100_000, "location": "/x.py:3", "fix": "look"}}
    text = shown(doc)
    assert len(text.splitlines()) < 20, len(text.splitlines())
    flat = " ".join(text.replace("│", " ").split())
    assert "error: RuntimeError: shape mismatch w" in flat and "… (99,215 more characters: the whole message is in " \
        "the JSON result)" in flat, flat


def test_a_root_cause_whose_records_were_skipped_shows_no_blank_error_or_fix():
    """A crafted log dir (issue 25 item 4: the agent log's error_file is /dev/zero, stderr.log a FIFO): the
    post-mortem names the failed rank and skips what it cannot read; the panel read 'error:' and 'fix:' with
    nothing after them."""
    doc = {"verdict": "fail", "logs": "/x/logs", "input_notes": ["skipped /dev/zero: it lies outside the log dir"],
           "root_cause": {"rank": 0, "local_rank": 0, "host": "node7", "exit_code": 1, "category": "unknown",
                          "error_type": None, "message": None, "location": None, "fix": ""}}
    lines = [" ".join(ln.replace("│", " ").split()) for ln in shown(doc).splitlines()]
    assert "error: no error message in the records read" in lines, lines
    assert "fix: none found in the records read (see the notes)" in lines, lines
    assert "note: skipped /dev/zero: it lies outside the log dir" in lines


# -- one full result per cluster: node rank 0's; the other nodes one line (issue 20) --------------------------
def _node_doc(**over) -> dict:
    doc = {"kind": "run-trainer", "verdict": "fail", "exit_code": 1, "run_id": "r", "start": {"fresh": True},
           "run_json": "/shared/runs/r/run.json", "logs": "/shared/runs/r/logs/n1-127.0.0.2-42",
           "node": {"node_rank": 1, "nnodes": 3, "master_addr": "node1"},
           "root_cause": {"rank": 3, "host": "node2", "category": "exception", "error_type": "InjectedFailure",
                          "message": "injected failure at step 4 on rank 3", "fix": "look at rank 3"},
           "consequences": [{"rank": 0, "host": "node1", "reason": "peer closed", "category": "exception"}]}
    doc.update(over)
    return doc


def _one_line(doc: dict, width: int = 80) -> str:
    from ddpdoctor.report.console_trainer import render_node_line

    console = Console(record=True, width=width, force_terminal=False)
    render_node_line(doc, console)
    return console.export_text()


def test_node_line_is_one_line_with_verdict_exit_code_root_cause_and_run_json():
    text = _one_line(_node_doc())  # narrower than the line: soft-wrapped by the terminal, never by us
    assert text.count("\n") == 1, text
    assert text.startswith("run-trainer [node rank 1 of 3]: FAIL (exit 1, root cause: rank 3, InjectedFailure): ")
    assert "node rank 0 (node1) printed the full result; this node's is in /shared/runs/r/run.json" in text
    assert text.rstrip().endswith("-v prints it here too")
    assert "Traceback" not in text and "consequence" not in text and "fix:" not in text
    ok = _one_line(_node_doc(verdict="pass", exit_code=0, root_cause=None, node={"node_rank": 2}), width=300)
    assert ok.startswith("run-trainer [node rank 2]: PASS (exit 0): node rank 0 printed the full result;")


def test_node_line_shows_another_nodes_text_escaped_never_obeyed():
    doc = _node_doc(node={"node_rank": 1, "nnodes": 2, "master_addr": "\x1b[2Jevil"},
                    root_cause={"rank": None, "host": "h\x07", "category": "unknown"})
    text = _one_line(doc, width=300)
    assert "\x1b" not in text and "\x07" not in text
    assert "node rank 0 (\\x1b[2Jevil)" in text and "root cause: host h\\x07, no cause in its records" in text


def test_run_trainer_shows_the_full_result_on_node_rank_0_on_an_unknown_node_and_with_v():
    from ddpdoctor.cli import common
    from ddpdoctor.cli.trainer_cmd import shown as choose

    calls = []

    def full(d, c):
        calls.append("full")

    def line(d, c):
        calls.append("line")

    for node, verbose, expected in [({"node_rank": 0}, 0, "full"), (None, 0, "full"), ({"node_rank": 1}, 0, "line"),
                                    ({"node_rank": 1}, 1, "full")]:
        calls.clear()
        old, common.STATE.verbose = common.STATE.verbose, verbose
        try:
            choose(_node_doc(node=node), None, full, line)
        finally:
            common.STATE.verbose = old
        assert calls == [expected], (node, verbose)


def test_the_root_cause_s_note_is_shown():
    """The root cause's reason (e.g. gloo aborted this rank: it only detected the mismatch) is a `note:` row; the
    row never showed, because the victim flag was compared after being humanized ("no" is truthy)."""
    from ddpdoctor.forensics.judge.attribution import DETECTOR

    doc = {"verdict": "fail", "run_id": "r", "start": None, "logs": "/l",
           "root_cause": {"rank": 1, "local_rank": 1, "host": "h", "exit_code": -6, "signal": "SIGABRT",
                          "category": "desync", "error_type": "EnforceNotMet", "message": "size mismatch",
                          "fix": "make every rank issue the same collectives", "victim": False, "reason": DETECTOR}}
    assert f"note: {DETECTOR[:40]}" in shown(doc)
    doc["root_cause"]["victim"] = True
    assert "note: " not in shown(doc)


def test_every_culprit_of_a_hang_is_shown_with_where_it_is():
    """Two ranks stuck in data loading: the second culprit's host and file:line were only in run.json."""
    hang = {"stalled_s": 15.0, "threshold": {"seconds": 20, "source": "process-group timeout"}, "stacks": {},
            "verdict": {"class": "missing_rank", "culprits": [
                {"rank": 1, "host": "vm", "where": "/u/t.py:9", "function": "get_batch"},
                {"rank": 3, "host": "vm2", "where": "/u/t.py:9", "function": "get_batch"}]}}
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True}, "hang": hang,
           "root_cause": {"rank": 1, "host": "vm", "category": "hang", "error_type": "missing_rank", "message": "m",
                          "location": "/u/t.py:9", "fix": "f", "victim": False}}
    text = shown(doc)
    assert "culprit too: rank 3 on vm2 at /u/t.py:9 in get_batch" in text and "culprit too: rank 1" not in text


def test_a_hang_timeout_threshold_names_the_flag_once():
    """'threshold: 10.0 s (--hang-timeout: set by --hang-timeout)' said the flag twice (and "threshold" is now
    the "hang limit", issue 41: two unexplained thresholds in one box)."""
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True},
           "root_cause": {"rank": 1, "host": "n0", "category": "hang", "error_type": "missing_rank", "message": "m"},
           "hang": {"stalled_s": 10.2, "verdict": {"class": "missing_rank", "culprits": []}, "stacks": {},
                    "threshold": {"seconds": 10.0, "source": "--hang-timeout", "why": "set by --hang-timeout"}}}
    text = shown(doc)
    assert "hang limit: 10.0 s without progress (--hang-timeout); no progress for 10.2 s" in text, text


def test_one_path_style_no_internal_label_and_each_term_explained_once(tmp_path, monkeypatch):
    """Issue 41 item 3: `where:` was relative and `fix:` absolute in one box; a consequence ended "(missing_rank)";
    "#15 (process group 0)", "sequence ids" and "flight recorders" were never explained."""
    monkeypatch.chdir(tmp_path)
    script = str(tmp_path / "train.py")
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True},
           "root_cause": {"rank": 1, "local_rank": 1, "host": "vm", "exit_code": 3, "category": "hang",
                          "error_type": "ended_early", "location": f"{script}:31",
                          "message": f"rank 1 ended of its own (exit code 3, sys.exit at {script}:31): rank(s) 1 never "
                                     "entered all_reduce #15 (process group 0) that rank(s) 0 entered (last sequence "
                                     "ids: rank 0: 15, rank 1: 14)",
                          "fix": f"its script exited with code 3 at {script}:31 on purpose; see /etc/hosts"},
           "consequences": [{"rank": 0, "host": "vm", "category": "peer_lost", "signal": "SIGTERM",
                             "reason": "waited in all_reduce #15 for rank(s) 1 (missing_rank)"}],
           "hang": {"stalled_s": 31.0, "stacks": {"0": "x"}, "verdict": {"class": "ended_early", "culprits": []},
                    "threshold": {"seconds": 30.0, "source": "calibrated", "why": "5 x its longest pause"}}}
    text = " ".join(shown(doc).replace("│", " ").split())
    assert "where: train.py:31" in text and "sys.exit at train.py:31" in text
    assert "exit code 3 · ended while the others waited" in text and "· a hang" not in text  # it did not hang
    assert "fix: its script exited with code 3 at train.py:31 on purpose; see /etc/hosts" in text  # not under cwd
    assert str(tmp_path) not in text
    assert "(missing_rank)" not in text and "for rank(s) 1 (never reached the collective the others wait in)" in text
    assert text.count("terms: ") == 1
    assert ("terms: #15 (process group 0) = the 15th collective the ranks started on process group 0 (torch's "
            "default group: every rank); sequence id = how many collectives a rank had started on that group") in text
    assert "flight recorder = torch's record of each rank's last collectives" in text
    assert "hang limit: 30.0 s without progress (calibrated from this job's own pace: 5 x its longest pause; " \
           "--hang-timeout sets it); no progress for 31.0 s" in text


def test_torchruns_failure_table_names_the_users_script_not_the_bootstrap():
    from ddpdoctor.launch.fold import entry_point_named

    rename = entry_point_named("my_train.py", "ddpdoctor.launch.bootstrap")
    assert rename("ddpdoctor.launch.bootstrap FAILED\n") == "my_train.py FAILED\n"
    assert rename("[rank0]: from ddpdoctor.launch.bootstrap FAILED x\n") == "[rank0]: from ddpdoctor.launch.bootstrap FAILED x\n"


def test_a_straggler_of_a_send_recv_only_job_is_said_as_what_was_sampled():
    """Named from looks at the stacks (no collective to time): no 'Nx slower' nor a wait per collective."""
    from ddpdoctor.report.console_trainer import straggler_lines
    from ddpdoctor.report.views.trainer import trainer_line

    sampled = {"rank": 1, "slower_x": 1000.0, "others_wait_s": 0.4, "last_share": 0.9, "sampled": 8}
    timed = {"rank": 2, "slower_x": 5.0, "others_wait_s": 0.3, "last_share": 1.0, "sampled": 0}
    lines = straggler_lines({"stragglers": [sampled, timed]})
    assert "rank 1, in its own code in 90% of 8 looks at its stack" in lines[0] and "slower" not in lines[0]
    assert "rank 2, 5.0x slower" in lines[1] and "0.3 s per collective" in lines[1]
    report = trainer_line({}, {"stragglers": [sampled, timed]})
    assert any("rank 1, in its own code while the others waited for a send/recv" in s for s in report), report
    assert any("rank 2, 5x slower" in s for s in report), report
