"""Round 6 (issue 47) of `ddpdoctor report --history`: a planted SQLite index (views, triggers, other columns, a
link, another user's file), odd result files (a time out of range, an int past 64 bits, NaN, a lone surrogate),
two reports at once, and terminal escapes in what the files say. Each fails on the code before the round."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ddpdoctor.history.index import DB_NAME
from tests.as_nobody import NOBODY, why_not
from tests.history_fixtures import bench_doc, node_check_doc, write_history
from tests.unit.helpers import run_cli

NOBODY_UID = 65534


def _history(root: Path, *extra: str):
    return run_cli("report", "--history", "--results-dir", str(root), *extra)


def _plant(db: Path, *statements: str) -> None:
    con = sqlite3.connect(str(db))
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()


def test_5_a_planted_trigger_never_runs_and_the_index_is_rebuilt(tmp_path):
    """A TRIGGER on the index's own table (here: one row into a table of its own per file; the attack inserted 50
    million): the report never fires it."""
    write_history(tmp_path, nodes=2, runs=3)
    db = tmp_path / DB_NAME
    assert _history(tmp_path).returncode == 0
    _plant(db, "CREATE TABLE fired(n INTEGER)",
           "CREATE TRIGGER boom AFTER INSERT ON files BEGIN INSERT INTO fired VALUES(1); END",
           "DELETE FROM files")
    p = _history(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(str(db))
    names = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
    con.close()
    assert "boom" not in names and "fired" not in names


@pytest.mark.parametrize("planted", [
    ("DROP TABLE files", "CREATE TABLE files(path TEXT, size INTEGER)"),  # wrong columns: exit 4 before
    ("DROP TABLE files", "CREATE VIEW files AS SELECT 'x.json' AS path, 1 AS size, 1 AS mtime_ns, 1 AS ok"),
])
def test_5_wrong_columns_or_a_view_are_rebuilt(tmp_path, planted):
    write_history(tmp_path, nodes=2, runs=3)
    assert _history(tmp_path).returncode == 0
    _plant(tmp_path / DB_NAME, *planted)
    p = _history(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("history of 12 runs on 2 nodes") and "12 read now" in p.stdout  # rebuilt


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_5_an_endless_view_does_not_hang_the_report(tmp_path):
    """`files` a VIEW over an endless recursive CTE (killed at 120 s before): the report ends promptly."""
    write_history(tmp_path, nodes=2, runs=3)
    _plant(tmp_path / DB_NAME, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)",
           "INSERT INTO meta VALUES('schema', '1')",
           "CREATE VIEW files AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) "
           "SELECT 'x' AS path, i AS size, i AS mtime_ns, 1 AS ok FROM r")
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "report", "--history", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture
def nobodys_dir():
    folder = Path(tempfile.mkdtemp(prefix="ddpd-r6h-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_4_5_as_root_nothing_is_written_through_nobodys_links(nobodys_dir, tmp_path):
    """nobody's results folder with the index a link to a root-only database and the page a link to a root file:
    the database gains nothing, the file is untouched, the page needs -o, the index goes to root's cache."""
    why = why_not()
    if why:
        pytest.skip(why)
    results = nobodys_dir / "results"
    results.mkdir()
    write_history(results, nodes=2, runs=3)
    secret = nobodys_dir / "root-only.db"
    _plant(secret, "CREATE TABLE secrets(x TEXT)")
    secret.chmod(0o600)
    page = nobodys_dir / "root-page.txt"
    page.write_text("root's\n")
    subprocess.run(["chown", "-R", f"{NOBODY_UID}:{NOBODY_UID}", str(results)], check=True)
    subprocess.run([*NOBODY, "/bin/sh", "-c", f"ln -s {secret} {results}/{DB_NAME} && ln -s {page} "
                    f"{results}/history.html"], check=True, cwd="/")
    p = _history(results)
    assert p.returncode == 2 and "owned by nobody" in p.stderr and "-o FILE" in p.stderr, p.stdout + p.stderr
    p = _history(results, "-o", str(tmp_path / "page.html"))
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(str(secret))
    assert [n for (n,) in con.execute("SELECT name FROM sqlite_master")] == ["secrets"]
    con.close()
    assert page.read_text() == "root's\n" and (tmp_path / "page.html").stat().st_size > 1000


def _odd_files(root: Path) -> None:
    node = root / "odd"
    node.mkdir(parents=True)
    for name, created in (("year1", "0001-01-01T00:00:00+05:00"), ("year9999", "9999-12-31T23:59:59-05:00")):
        doc = node_check_doc("odd", 0, flapping=False)
        doc["created"] = created
        (node / f"{name}.json").write_text(json.dumps(doc))
    big = bench_doc("odd", 0, busbw=1.0)
    big["rows"][0]["size"] = 2 ** 70
    (node / "big.json").write_text(json.dumps(big))
    nan = bench_doc("odd", 1, busbw=1.0)
    (node / "nan.json").write_text(json.dumps(nan).replace('"busbw_gbs": 0.5', '"busbw_gbs": NaN'))
    lone = node_check_doc("odd\ud800", 0, flapping=False)
    (node / "surrogate.json").write_text(json.dumps(lone))


def test_7_odd_result_files_are_counted_unreadable_not_exit_4(tmp_path):
    write_history(tmp_path, nodes=2, runs=3)
    _odd_files(tmp_path)
    p = _history(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "5 unreadable" in p.stdout.splitlines()[0], p.stdout
    page = (tmp_path / "history.html").read_text()
    assert "5 files unreadable" in page


def test_7_a_busy_index_is_waited_for_then_bypassed(tmp_path, monkeypatch):
    """Another report holds the index's write lock: this one waits BUSY_S at most, then reads in memory."""
    from ddpdoctor.history import index

    monkeypatch.setattr(index, "BUSY_S", 0.3, raising=False)  # before the round: its fixed 10 s, then exit 4
    write_history(tmp_path, nodes=2, runs=3)
    assert _history(tmp_path).returncode == 0
    write_history(tmp_path, nodes=3, runs=4)  # new files: this report must write to the index
    other = sqlite3.connect(str(tmp_path / DB_NAME), timeout=1)
    other.execute("BEGIN IMMEDIATE")
    try:
        p = _history(tmp_path)
    finally:
        other.rollback()
        other.close()
    assert p.returncode == 0, p.stdout + p.stderr


def test_8_what_the_files_say_cannot_steer_the_terminal(tmp_path):
    """A node name with ESC[2J, a summary with an OSC 8 link, a run id and a check name with escapes: every line
    the terminal gets is display-safe text."""
    folder = tmp_path / "evil"
    folder.mkdir()
    evil = "n\x1b[2J"
    for i in range(8):
        doc = node_check_doc(evil, i, flapping=True)
        doc["run_id"] = f"run\x1b]0;title\x07{i}"
        for r in doc["results"]:
            if r["check"] == "clock-sync" and r["level"] == "warn":
                r["summary"] = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
            r["check"] = r["check"] + "\x1b[31m"
        (folder / f"{i:03d}.json").write_text(json.dumps(doc))
    p = _history(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "flaps" in p.stdout and "\\x1b" in p.stdout
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
