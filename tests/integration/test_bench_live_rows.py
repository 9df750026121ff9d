"""nccl-bench prints each row as it is measured, like nccl-tests, and a sweep stopped with Ctrl-C keeps the rows
measured so far (issue 41 item 1: README's wide sweep was silent for minutes, and Ctrl-C lost every row). A
real sweep, real ranks, a real SIGINT to the whole foreground group as a terminal sends it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROWS_BEFORE_CTRL_C = 3


@pytest.mark.timeout(240)
def test_rows_show_as_measured_and_ctrl_c_keeps_them_on_the_terminal_and_in_the_result(tmp_path: Path):
    argv = [sys.executable, "-m", "ddpdoctor", "nccl-bench", "--backend", "gloo", "--nproc", "2", "-b", "8",
            "-e", "1G", "-w", "1", "-n", "5", "--results-dir", str(tmp_path / "results")]
    env = {k: v for k, v in os.environ.items() if k != "DDPDOCTOR_NO_SAVE"}  # the default save, as users get it
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=tmp_path, env=env)
    errs: list[str] = []
    reader = threading.Thread(target=lambda: errs.append(proc.stderr.read()), daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 180
        while len([ln for ln in seen if not ln.startswith("#")]) < ROWS_BEFORE_CTRL_C:
            line = proc.stdout.readline()  # each row reaches the pipe as it is measured, not at the end
            assert line and time.monotonic() < deadline, (seen, proc.poll())
            seen.append(line.rstrip("\n"))
        assert proc.poll() is None  # the sweep to 1 GiB is far from done: these rows came while it ran
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.stdout.read()  # to its end: the footer comes after the ranks have stopped
        proc.wait(90)
        reader.join(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    err = "".join(errs)
    assert proc.returncode == 130, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "Error: interrupted", err[-3000:]
    shown = seen + out.splitlines()
    rows_shown = [ln.split() for ln in shown if ln.strip() and not ln.startswith("#")]
    assert shown[0].startswith("# nccl-bench: gloo · 2 ranks on 1 node"), shown[:3]
    assert sum(ln.startswith("# all_reduce") for ln in shown) == 1  # the op's header once, not again at the end
    assert len({r[0] for r in rows_shown}) == len(rows_shown)  # no row printed twice
    # The result keeps exactly the rows the terminal showed, and says the sweep was interrupted
    (saved,) = (tmp_path / "results").glob("*/nccl-bench.json")
    doc = json.loads(saved.read_text())
    assert doc["interrupted"] == "SIGINT" and doc["exit_code"] == 130 and doc["verdict"] == "warn"
    assert [str(r["size"]) for r in doc["rows"]] == [r[0] for r in rows_shown]
    assert len(doc["rows"]) >= ROWS_BEFORE_CTRL_C and doc["planned_rows"] == 28  # 8 B .. 1 GiB, doubling
    assert doc["summary"]["wrong"] == 0 and doc["run"]["world_size"] == 2
    footer = [ln for ln in shown if ln.startswith("# Interrupted")]
    assert footer == [f"# Interrupted (SIGINT) after {len(doc['rows'])} of 28 rows: the figures above are of the "
                      "rows measured before it"], shown[-5:]
    assert f"wrote result: {saved}" in err
