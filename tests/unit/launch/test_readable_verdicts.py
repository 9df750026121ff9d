"""What a person reads on the terminal: no internal label ('missing_rank:', 'likely_missing_rank:', 'exit code
—', '(peer_lost: SIGTERM)', 'timeout_ms'), each attempt's outcome with restarts, torch's restart failure
explained, never 'nothing to fix' under a root-cause title, a straggler named."""
from __future__ import annotations

import re

from rich.console import Console

from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge.classify import classify
from ddpdoctor.report.console_trainer import render

LABELS = ("missing_rank:", "likely_missing_rank", "exit code —", "(peer_lost", "peer_lost:", "timeout_ms",
          "nothing to fix")


def shown(doc: dict, width: int = 100) -> str:
    console = Console(record=True, width=width, force_terminal=False)
    render(doc, console)
    return console.export_text()


def flat(text: str) -> str:
    """The panel's text as one line: its edges gone, its wrapped lines joined."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", text))


def hang_doc(error_type: str) -> dict:
    return {"verdict": "fail", "run_id": "r", "start": {"fresh": True}, "culprit_ranks": [1],
            "run_json": "/abs/results/r/run.json", "logs": "/abs/results/r/logs/node0",
            "root_cause": {"rank": 1, "local_rank": 1, "host": "n0", "exit_code": None, "category": "hang",
                           "error_type": error_type, "message": "rank 1 never came", "location": "/u/t.py:31",
                           "fix": "look at its stack"},
            "consequences": [{"rank": 0, "host": "n0", "reason": "waited in all_reduce #7 for rank(s) 1",
                              "category": "peer_lost", "signal": "SIGTERM", "fix": "nothing to fix on this rank"}],
            "hang": {"stalled_s": 15.2, "stacks": {"0": "x"}, "verdict": {"class": error_type, "culprits": []},
                     "threshold": {"seconds": 20, "source": "process-group timeout",
                                   "why": "your process group's own 20 s timeout came before ddpdoctor's own hang "
                                          "limit (30 s), so every rank's evidence was taken 4.0 s before it "
                                          "expired, after the ranks had waited 15.2 s, and the job was stopped "
                                          "when it expired"}}}


def test_no_internal_label_reaches_the_screen():
    for error_type in ("missing_rank", "likely_missing_rank", "stuck_collective", "likely_ended_early"):
        text = shown(hang_doc(error_type))
        for label in LABELS:
            assert label not in flat(text), (label, text)
        text = flat(text)
        assert "still running; stopped by ddpdoctor" in text and "lost its peer" in text and "ended by SIGTERM" in text
        assert text.count("hang limit:") == 1 and "threshold" not in text, text


def test_paths_are_never_broken_inside_the_box(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = hang_doc("missing_rank")
    long = tmp_path / ("a-rather-long-results-directory-name" * 2) / "r"
    doc.update(run_json=str(long / "run.json"), logs=str(long / "logs" / "node0"))
    doc["root_cause"]["location"] = f"{tmp_path}/train.py:31"
    text = shown(doc, width=100)
    assert "where: train.py:31" in text, text
    for name in ("run.json", "logs/node0"):
        rel = str((long / name).relative_to(tmp_path))
        assert any(rel in line for line in text.splitlines()), (rel, text)  # whole, on one line


def test_each_attempt_has_its_line_when_the_restart_passed_and_when_it_failed():
    first = {"rank": 1, "error_type": "InjectedFailure", "category": "exception", "location": "/u/train.py:88"}
    ok = {"verdict": "pass", "run_id": "r", "start": {"fresh": True}, "restarts": 1, "checksums_equal": True,
          "metrics_summary": {"steps": 3, "ranks": 2, "first_loss": 2.0, "final_loss": 1.0, "tokens_per_s_mean": 5.0},
          "attempts": [{"attempt": 0, "root_cause": first}, {"attempt": 1, "root_cause": None}]}
    text = shown(ok)
    assert "attempt 1: rank 1, InjectedFailure at /u/train.py:88; restarted" in text and "attempt 2: passed" in text
    again = {"rank": 0, "error_type": "RuntimeError", "category": "restart_connect", "fix": "rerun", "host": "h"}
    bad = {"verdict": "fail", "run_id": "r", "start": {"fresh": True}, "restarts": 1, "culprit_ranks": [0],
           "root_cause": again, "consequences": [],
           "attempts": [{"attempt": 0, "root_cause": first}, {"attempt": 1, "root_cause": again}]}
    text = shown(bad)
    assert "attempt 1: rank 1, InjectedFailure" in text, text
    assert "attempt 2: failed because rank 0: the restarted ranks could not connect (torch's restart)" in text, text
    hung = {**bad, "root_cause": None, "culprit_ranks": [],
            "hang": {"verdict": {"category": "stuck_init", "summary": "every rank (0, 1) is inside init_process_group"
                                 " and none is missing; the rendezvous never completes"}},
            "attempts": [{"attempt": 0, "root_cause": first}, {"attempt": 1, "root_cause": None}]}
    said = " ".join(shown(hung, width=200).split())
    assert "attempt 2: hung: every rank (0, 1) is inside init_process_group and none is missing" in said, said
    assert "(torch's restart: the restarted ranks never finished meeting again)" in said, said


def test_gloo_refusing_the_restarted_ranks_is_torchs_restart_not_a_lost_peer():
    tb = ('Traceback (most recent call last):\n  File "/u/train.py", line 9, in <module>\n'
          '    dist.init_process_group("gloo")\nRuntimeError: Gloo connectFullMesh failed with '
          '[../third_party/gloo/gloo/transport/tcp/pair.cc:144] Connection refused')
    again = classify(RankFailure(rank=0, local_rank=0, host="h", exit_code=1, attempt=1, error_type="RuntimeError",
                                 message="Gloo connectFullMesh failed with [pair.cc:144] Connection refused",
                                 traceback=tb))
    assert again.category == "restart_connect" and not again.victim and "nothing to fix" not in again.fix
    assert "restart" in again.fix and "attempt before" in again.fix
    first = classify(RankFailure(rank=0, local_rank=0, host="h", exit_code=1, attempt=0, error_type="RuntimeError",
                                 message="Gloo connectFullMesh failed with [pair.cc:144] Connection refused",
                                 traceback=tb))
    assert first.category == "connect" and "GLOO_SOCKET_IFNAME" in first.fix


def test_a_victim_shown_alone_is_a_first_failure_with_a_fix_that_says_so():
    doc = {"verdict": "fail", "run_id": "r", "start": {"fresh": True}, "culprit_ranks": [1], "consequences": [],
           "root_cause": {"rank": 1, "host": "h", "exit_code": 1, "category": "peer_lost", "victim": True,
                          "fix": "nothing to fix on this rank: see the root cause"}}
    text = shown(doc)
    assert "root cause" not in text and "first failure" in text and "nothing to fix" not in text, text


def test_a_straggler_named_live_is_in_the_summary():
    doc = {"verdict": "pass", "run_id": "r", "start": {"fresh": True}, "restarts": 0, "checksums_equal": True,
           "metrics_summary": {"steps": 3, "ranks": 2, "first_loss": 2.0, "final_loss": 1.0, "tokens_per_s_mean": 5.0},
           "stragglers": [{"rank": 1, "slower_x": 5.0, "others_wait_s": 0.4}]}
    assert "straggler (named live): rank 1, 5.0x slower" in shown(doc)


def test_the_fix_names_the_stack_file_the_bootstrap_wrote(tmp_path):
    from ddpdoctor.forensics.judge import attribution
    from ddpdoctor.forensics.judge.end_rules import stack_on_file
    from ddpdoctor.forensics.postmortem.trainer_run import sigterm_stacks

    fix = f"look at what rank 2 was doing ({attribution.NO_STACK}); more"
    root = {"rank": 2, "fix": fix}
    stack_on_file(root, sigterm_stacks(tmp_path))
    assert root["fix"] == fix  # no file: the fix stands
    (tmp_path / "stacks" / "sigterm").mkdir(parents=True)
    (tmp_path / "stacks" / "sigterm" / "rank2.txt").write_text('File "/u/t.py", line 3 in main\n')
    assert sigterm_stacks(tmp_path) == {2}
    stack_on_file(root, sigterm_stacks(tmp_path))
    assert "not in the logs" not in root["fix"] and "stacks/sigterm/rank2.txt" in root["fix"], root
    assert "run-trainer --hang-timeout 10" in attribution.hang_timeout_advice(20.0)
