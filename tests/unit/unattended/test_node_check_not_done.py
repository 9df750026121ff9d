"""Nothing the unattended node check could not do is silent (issue 56.6, unattended/entry.py): a record not kept on
a full results disk (a real one: a 1 MiB tmpfs, filled) is a series in the Prometheus textfile, and the next record
kept says how many were not, since when and why, a row on the history page; a check that could not run and a
skipped meeting are series too."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time

import pytest

from tests.unit.helpers import run_cli


def _series(prom, family: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("Hostname", "command")): s.value
            for f in text_string_to_metric_families((prom / "ddpdoctor.prom").read_text()) for s in f.samples
            if s.name == family}


HOST = socket.gethostname()


def _fired(alert: str, prom) -> dict:
    """UNATTENDED.md's rule ``alert`` evaluated on the textfile as Prometheus would (test_node_exporter's)."""
    from tests.integration.test_node_exporter import alert_rules, evaluate, series

    scrape = series((prom / "ddpdoctor.prom").read_text())
    return evaluate(alert_rules()[alert], scrape, scrape, time.time())


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk, filled to the last byte (root only: a real ENOSPC, not a stand-in)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        filler = disk / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, timeout=30)
        yield disk, filler
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def test_a_full_results_disk_is_a_series_and_the_next_kept_record_says_how_many_were_not_and_why(full_disk, tmp_path):
    from ddpdoctor.history import collect
    from ddpdoctor.report.html import build_history_html

    disk, filler = full_disk
    state = tmp_path / "state.txt"
    state.write_text("NodeName=n1 State=IDLE Reason=(null)\n")
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = show ] && cat {state}\nexit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    prom = tmp_path / "prom"
    prom.mkdir()
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{disk / "results"}"\nscontrol = "{script}"\n'
                   f'prometheus_textfile = "{prom}"\nonly = ["resources"]\n[checks.resources]\n'
                   'min_free_disk_gib = 0.0\nmin_available_memory_gib = 0.0\nmin_nofile = 0\n')
    env = {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"}  # a health check, as slurmd runs it
    for _ in range(2):
        p = run_cli("node-check", env=env)
        assert p.returncode == 0 and "record not kept" in p.stderr, p.stdout + p.stderr
    assert _series(prom, "ddpdoctor_records_not_kept_total") == {"": 2.0}
    assert _series(prom, "ddpdoctor_records_unkept") == {"why=No space left on device": 2.0}
    assert _series(prom, "ddpdoctor_check_could_not_run") == {"check=resources": 0.0}
    assert _fired("DdpdoctorRecordNotKept", prom) == {(("Hostname", HOST), ("why", "No space left on device")): 2.0}

    filler.unlink()  # the disk has room again: this record is kept and says what was not
    p = run_cli("node-check", env=env)
    assert p.returncode == 0 and "record not kept" not in p.stderr, p.stdout + p.stderr
    assert _series(prom, "ddpdoctor_records_unkept") == {"why=": 0.0}
    assert _series(prom, "ddpdoctor_records_not_kept_total") == {"": 2.0}
    assert _fired("DdpdoctorRecordNotKept", prom) == {}
    h = collect(disk / "results")
    ((gap,),) = [n["gaps"] for n in h["nodes"]]
    assert gap["what"] == "2 record(s) not kept before this one"
    assert gap["why"].startswith("since 20") and gap["why"].endswith("No space left on device"), gap
    page = build_history_html(h)
    assert "What the node check could not do (1)" in page and "2 record(s) not kept before this one" in page


def test_a_skipped_meeting_and_a_check_that_could_not_run_are_series_and_history_rows():
    from ddpdoctor.history.index import gaps
    from ddpdoctor.report import prometheus

    doc = {"kind": "preflight", "verdict": "pass", "created": "2026-12-02T21:00:00+00:00", "nodes": {"n1": {}},
           "results": [{"check": "gpu", "level": "skip", "summary": "nvidia-smi hung", "nodes": ["n1"],
                        "details": {"tool_error": "gather timed out"}}],
           "node_check": {"context": "prolog", "node": "n1", "action": "none",
                          "cross_node": {"skipped": "the nodes did not meet within 10 s"}}}
    meeting = {n: v for n, labels, v in prometheus.meeting_samples(doc, "n1")}
    assert meeting == {"ddpdoctor_meeting_skipped": 1.0, "ddpdoctor_meetings_skipped": 1.0}
    ours = {(n, labels.get("check")): v for n, labels, v in prometheus.node_check_samples(doc, "n1")}
    assert ours[("ddpdoctor_check_could_not_run", "gpu")] == 1.0
    assert gaps(doc, doc["node_check"]) == [("meeting skipped", "the nodes did not meet within 10 s"),
                                            ("gpu could not run", "nvidia-smi hung")]
    one_node = dict(doc, node_check=dict(doc["node_check"], cross_node={"skipped": "not a multi-node job",
                                                                        "needed": False}))
    assert prometheus.meeting_samples(one_node, "n1") == [] and gaps(one_node, one_node["node_check"])[:1] == [
        ("gpu could not run", "nvidia-smi hung")]


def test_the_shipped_rules_fire_on_a_skipped_meeting_a_failing_link_and_a_check_that_could_not_run():
    from ddpdoctor.report import prometheus
    from tests.integration.test_node_exporter import alert_rules, evaluate, series

    link = "link node1 -> node3 timed out (TCP to 198.18.4.3:41234)"
    met = {"verdict": "fail", "links": [{"check": "mesh", "nodes": ["node1", "node3"], "summary": link}]}
    doc = {"kind": "preflight", "verdict": "pass", "created": "2026-12-02T21:00:00+00:00", "nodes": {"node1": {}},
           "results": [{"check": "gpu", "level": "skip", "summary": "hung", "details": {"tool_error": "hung"}}],
           "node_check": {"context": "prolog", "node": "node1", "action": "none", "cross_node": met}}
    skipped = dict(doc, node_check=dict(doc["node_check"], cross_node={"skipped": "the nodes did not meet"}))
    rules = alert_rules()

    def fired(alert: str, samples) -> dict:
        scrape = series(prometheus._render(samples).decode())
        return evaluate(rules[alert], scrape, {}, time.time())

    assert fired("DdpdoctorMeetingLinkFails", prometheus.meeting_samples(doc, "node1")) == {
        (("Hostname", "node1"), ("peer", "node3")): 3.0}
    assert fired("DdpdoctorMeetingSkipped", prometheus.meeting_samples(doc, "node1")) == {}
    assert list(fired("DdpdoctorMeetingSkipped", prometheus.meeting_samples(skipped, "node1")).values()) == [1.0]
    assert fired("DdpdoctorCheckCouldNotRun", prometheus.node_check_samples(doc, "node1")) == {
        (("Hostname", "node1"), ("check", "gpu")): 1.0}


def test_a_failing_links_series_stays_until_a_meeting_measures_that_link_again():
    """A skipped meeting, or one node3 was not in, measured nothing of node1 -> node3: its alert stands; a meeting
    with node3 that finds the link well clears it."""
    from ddpdoctor.report import prometheus

    failing = {"verdict": "fail", "nodes": ["node1", "node3"],
               "links": [{"check": "mesh", "nodes": ["node1", "node3"], "summary": "timed out"}]}

    def doc(met: dict) -> dict:
        return {"node_check": {"context": "prolog", "node": "node1", "cross_node": met}}

    def links(samples) -> list:
        return [labels["peer"] for name, labels, _ in samples if name == "ddpdoctor_meeting_link_status"]

    before = prometheus.meeting_samples(doc(failing), "node1")
    assert links(before) == ["node3"]
    assert links(prometheus.meeting_samples(doc({"skipped": "the nodes did not meet"}), "node1", before)) == ["node3"]
    others = {"verdict": "pass", "nodes": ["node1", "node2"], "links": []}
    assert links(prometheus.meeting_samples(doc(others), "node1", before)) == ["node3"]
    again = {"verdict": "pass", "nodes": ["node1", "node3"], "links": []}
    assert links(prometheus.meeting_samples(doc(again), "node1", before)) == []


def test_a_prolog_writes_the_textfile_once_and_carries_its_links_under_the_lock(tmp_path, monkeypatch):
    """The node check's and the meeting's series in one write (it was two, and the meeting's last links were read
    before the lock was taken: a check beside it could replace them in between); the health check's series of
    another command in the file are kept."""
    from ddpdoctor.cli import node_check_cmd
    from ddpdoctor.report import prometheus, textfile

    prom = tmp_path / "prom"
    prom.mkdir()
    prometheus.write(prom, [("ddpdoctor_meeting_link_status", {"peer": "node3", "check": "mesh"}, 3.0)],
                     prometheus.MEETING_COMMAND)
    prometheus.write(prom, [("ddpdoctor_check_status", {"check": "gpu"}, 0.0)], "preflight")
    replaced = []
    real = textfile.Folder.replace
    monkeypatch.setattr(textfile.Folder, "replace", lambda self, *a: (replaced.append(a[0]), real(self, *a))[1])
    skipped = {"verdict": "pass", "nodes": ["node1", "node2"], "links": [], "skipped": "the nodes did not meet"}
    doc = {"created": "2026-01-01T00:00:00+00:00", "verdict": "pass", "results": [], "nodes": {},
           "node_check": {"context": "prolog", "node": "node1", "cross_node": skipped, "unkept_pending": {"count": 0}}}
    node_check_cmd._prometheus(doc, str(prom))
    assert replaced == [prometheus.FILE], replaced  # one write
    assert _series(prom, "ddpdoctor_meeting_link_status") == {"check=mesh,peer=node3": 3.0}  # carried, not re-measured
    assert _series(prom, "ddpdoctor_check_status") == {"check=gpu": 0.0}  # another command's, kept
    assert _series(prom, "ddpdoctor_meeting_skipped") == {"": 1.0}


def test_two_checks_that_fail_to_keep_at_once_count_two_not_one(tmp_path):
    """The count read when a run starts is stale when another check failed to keep its record meanwhile: the count
    written is the file's, read under its lock, plus this run's one (before, both wrote 1). A run that keeps its
    record writes 0."""
    from ddpdoctor.cli.node_check_cmd import _prometheus

    prom = tmp_path / "prom"
    prom.mkdir()

    def doc(kept: bool) -> dict:
        nc = {"context": "health_check", "node": "n1"}
        if kept:
            nc["unkept_pending"] = {"count": 0, "why": "", "since_s": 0.0}
        else:  # each run read 0 at its start: the other one had not written yet
            nc.update(record_not_kept="record not kept: (No space left on device)",
                      unkept_pending={"count": 1, "why": "No space left on device", "since_s": 1700000000.0})
        return {"created": "2026-12-03T10:00:00+00:00", "results": [], "node_check": nc}

    _prometheus(doc(kept=False), str(prom))
    _prometheus(doc(kept=False), str(prom))
    assert _series(prom, "ddpdoctor_records_unkept") == {"why=No space left on device": 2.0}
    assert _series(prom, "ddpdoctor_records_unkept_since_timestamp_seconds") == {"": 1700000000.0}
    _prometheus(doc(kept=True), str(prom))
    assert _series(prom, "ddpdoctor_records_unkept") == {"why=": 0.0}


def test_without_a_textfile_the_count_of_records_not_kept_is_carried_in_the_state_folder(full_disk, tmp_path):
    """No prometheus_textfile: the count lives in state_dir (a tmpfs in production, /run/ddpdoctor), so the next
    record kept still says how many were not, since when and why; then the file goes. Before: only the stderr line."""
    from ddpdoctor.history import collect

    disk, filler = full_disk
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\n[ \"$1\" = show ] && echo 'NodeName=n1 State=IDLE Reason=(null)'\nexit 0\n")
    script.chmod(0o755)
    run_dir = tmp_path / "run"
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{disk / "results"}"\nscontrol = "{script}"\n'
                   f'state_dir = "{run_dir / "ddpdoctor"}"\nonly = ["resources"]\n[checks.resources]\n'
                   'min_free_disk_gib = 0.0\nmin_available_memory_gib = 0.0\nmin_nofile = 0\n')
    env = {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"}
    for _ in range(3):
        p = run_cli("node-check", env=env)
        assert p.returncode == 0 and "record not kept" in p.stderr, p.stdout + p.stderr
    carried = run_dir / "ddpdoctor" / "unkept-n1.json"
    assert carried.stat().st_mode & 0o777 == 0o600
    filler.unlink()
    p = run_cli("node-check", env=env)
    assert p.returncode == 0 and "record not kept" not in p.stderr, p.stdout + p.stderr
    ((gap,),) = [n["gaps"] for n in collect(disk / "results")["nodes"]]
    assert gap["what"] == "3 record(s) not kept before this one" and gap["why"].endswith("No space left on device")
    assert not carried.exists()


def test_the_state_folder_is_trusted_like_results_dir_and_its_file_validated(tmp_path):
    """As root, a state folder another user owns is refused with a line, never used (a link there would make root
    write anywhere); junk in the file (a user's, a half-written one) is no count; two checks count two."""
    from ddpdoctor.unattended import unkept

    notes: list[str] = []
    folder = tmp_path / "state"
    unkept.store(str(folder), "n1", {"count": 1, "why": "No space left on device", "since_s": 1.0}, notes)
    unkept.store(str(folder), "n1", {"count": 1, "why": "No space left on device", "since_s": 1.0}, notes)
    got = unkept.load(str(folder), "n1", notes)
    assert got["count"] == 2 and got["why"] == "No space left on device" and got["since"].startswith("20"), got
    assert notes == []
    for junk in (b"[1]", b'{"count": "3", "since_s": 5}', b'{"count": 2, "since_s": 1e300}', b"{" * 3000):
        (folder / "unkept-n1.json").write_bytes(junk)
        assert unkept.load(str(folder), "n1", notes) == {}
    unkept.store(str(folder), "n1", {"count": 0}, notes)
    assert not (folder / "unkept-n1.json").exists()
    unkept.store(str(folder), "../etc/x", {"count": 1}, notes)
    assert notes and "no file name" in notes[-1]
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        notes.clear()
        unkept.store(str(theirs), "n1", {"count": 1, "why": "x", "since_s": 1.0}, notes)
        assert notes and "not written" in notes[0] and list(theirs.iterdir()) == [], notes
