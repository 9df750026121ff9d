"""Hostile inputs to `ddpdoctor report` and `ddpdoctor postmortem` (issue 25, items 4-5): one line and exit 2,
or a finding, never exit 4, never a hang, memory bounded in total."""
from __future__ import annotations

import json
import os
import struct
import textwrap
import time

import pytest

from tests.unit.helpers import assert_usage_error, run_cli


@pytest.mark.timeout(120)
def test_report_of_64_mib_of_empty_lists_is_one_line_exit_2_quickly(tmp_path):
    """The attack: 64 MiB of `[],` took 3.2 GB and 68 s; now refused by a count before json.loads."""
    bomb = tmp_path / "bomb.json"
    n = (64 << 20) // 3 - 2
    bomb.write_bytes(b"[" + b"[]," * n + b"[]]")
    t0 = time.monotonic()
    p = run_cli("report", str(bomb), "-o", str(tmp_path / "r.html"))
    assert time.monotonic() - t0 < 60
    assert_usage_error(p, "bomb.json", "JSON values")


@pytest.mark.timeout(120)
def test_report_bounds_the_number_of_files_and_the_total(tmp_path):
    files = []
    for i in range(300):
        f = tmp_path / f"{i}.json"
        f.write_text("{}")
        files.append(str(f))
    assert_usage_error(run_cli("report", *files, "-o", str(tmp_path / "r.html")), "at most 256")


def test_total_budget_is_shared_across_files(tmp_path):
    from ddpdoctor import inputs
    from ddpdoctor.errors import UsageError

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"x": list(range(600))}))
    b.write_text(json.dumps({"x": list(range(600))}))
    budget = inputs.Budget(values=1000)
    inputs.load_json_file(a, budget=budget)
    with pytest.raises(UsageError, match="together"):
        inputs.load_json_file(b, budget=budget)


@pytest.mark.timeout(60)
def test_report_of_a_fifo_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    assert_usage_error(run_cli("report", str(fifo), "-o", str(tmp_path / "r.html"), timeout=30), "FIFO")


def crafted_log_dir(tmp_path):
    """A torchrun log dir with every trap at once: FIFOs, /dev/zero as the error file, odd folders, bombs."""
    attempt = tmp_path / "logs" / "rid_abc" / "attempt_0"
    for r in ("0", "1", "x"):
        (attempt / r).mkdir(parents=True)
    (attempt.parent / "attempt_final").mkdir()
    os.mkfifo(attempt / "0" / "error.json")
    os.mkfifo(attempt / "0" / "stderr.log")
    (attempt / "1" / "error.json").write_text("[" * 1_000_000 + "]" * 1_000_000)
    (attempt / "1" / "stderr.log").write_text("[rank1]: Traceback (most recent call last):\n"
                                              "[rank1]: ValueError: " + "A" * 10_000_000 + "\n")
    (tmp_path / "logs" / "nccl_trace_rank_0").write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b".")
    (tmp_path / "logs" / "rank1.json").write_text(json.dumps({"entries": "not a list", "pg_status": [1]}))
    agent = tmp_path / "torchrun.stderr"
    agent.write_text(textwrap.dedent("""\
        Root Cause (first observed failure):
        [0]:
          time      : 2026-11-22_23:27:34
          host      : node7
          rank      : 1 (local_rank: 1)
          exitcode  : 1 (pid: 7773)
          error_file: /dev/zero
          traceback : x
        [1]:
          time      : 2026-11-22_23:27:35
          host      : node7
          rank      : 0 (local_rank: 0)
          exitcode  : -15 (pid: 7774)
          error_file: ERR0
          traceback : x
        """).replace("ERR0", str(attempt / "0" / "error.json")))
    return tmp_path / "logs", agent


@pytest.mark.timeout(120)
def test_postmortem_of_a_crafted_log_dir_is_a_finding_with_notes(tmp_path):
    logs, agent = crafted_log_dir(tmp_path)
    t0 = time.monotonic()
    p = run_cli("postmortem", str(logs), "--agent-log", str(agent), "--json", timeout=90)
    assert time.monotonic() - t0 < 60
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["root_cause"]["rank"] == 1
    notes = "\n".join(doc["input_notes"])
    for needle in ("FIFO", "/dev/zero", "attempt_final", "nccl_trace_rank_0", "rank1.json"):
        assert needle in notes, (needle, notes)


@pytest.mark.timeout(60)
def test_postmortem_agent_log_that_is_a_fifo_is_one_line(tmp_path):
    logs, _ = crafted_log_dir(tmp_path)
    fifo = tmp_path / "agent.fifo"
    os.mkfifo(fifo)
    assert_usage_error(run_cli("postmortem", str(logs), "--agent-log", str(fifo), timeout=30), "not a regular file")
