"""run-trainer's copy of torchrun's stderr (launch/run.py AgentLog): the file users share has secrets redacted,
memory keeps the last bytes for the post-mortem, and a disk that refuses the file costs only the file."""
from __future__ import annotations

import os

import pytest

from ddpdoctor.launch.run import AgentLog

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


def test_the_file_has_secrets_redacted_and_memory_keeps_the_text(tmp_path):
    log = AgentLog(tmp_path / "agent.stderr.log")
    log.write(f"[rank1]: launching with --password hunter2 and key {SECRET}\n")
    log.write("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    log.close()
    on_disk = (tmp_path / "agent.stderr.log").read_text()
    assert "hunter2" not in on_disk and SECRET not in on_disk
    assert "<redacted>" in on_disk and "ChildFailedError" in on_disk
    assert SECRET in log.text()  # in memory only: the post-mortem redacts what it copies into run.json
    assert log.error is None


def test_memory_is_bounded_to_the_last_bytes(tmp_path):
    log = AgentLog(tmp_path / "a.log", max_bytes=100)
    for i in range(50):
        log.write(f"line {i:03d} " + "x" * 20 + "\n")
    log.close()
    assert log.size <= 100 and log.text().endswith("line 049 " + "x" * 20 + "\n")
    assert (tmp_path / "a.log").read_text().count("\n") == 50


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_keeps_the_text_in_memory_and_records_the_error():
    log = AgentLog("/dev/full")
    log.write("first line\n")
    log.write("second line\n")
    log.close()
    assert log.error is not None and log.error.errno == 28  # ENOSPC
    assert log.text() == "first line\nsecond line\n"
