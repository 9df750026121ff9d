"""Unit tests of checks/clock_sync.py."""
from __future__ import annotations

import pytest
from ddpdoctor_checks import (
    clock_sync,
)

from ddpdoctor.api import Level, Skip
from tests.unit.helpers import ctx

# ---------------------------------------------------------------- clock-sync
CHRONY = """Reference ID    : C0A80001 (192.168.0.1)
Stratum         : 3
System time     : 0.000012 seconds fast of NTP time
Leap status     : Normal
"""


def test_chronyc_parser():
    assert clock_sync.parse_chronyc_tracking(CHRONY)["synced"] is True
    unsynced = CHRONY.replace("Normal", "Not synchronised")
    assert clock_sync.parse_chronyc_tracking(unsynced)["synced"] is False
    assert clock_sync.parse_chronyc_tracking("garbage") is None


def test_clock_sync_uses_first_source_that_answers(monkeypatch):
    monkeypatch.setattr(clock_sync, "SOURCES", (lambda: None, lambda: {"tool": "chronyc", "synced": False, "detail": "x"}))
    facts = clock_sync.ClockSyncCheck().gather(ctx())
    (r,) = clock_sync.ClockSyncCheck().compare({"n1": facts}, clock_sync.ClockSyncCheck().with_defaults({"unsynced_level": "warn"}))
    assert r.level is Level.WARN and "set-ntp" in r.fix
    (r,) = clock_sync.ClockSyncCheck().compare({"n1": facts}, clock_sync.ClockSyncCheck().with_defaults({"unsynced_level": "fail"}))
    assert r.level is Level.FAIL


def test_clock_sync_skips_saying_why(monkeypatch):
    monkeypatch.setattr(clock_sync, "SOURCES", (clock_sync.from_timedatectl,))
    monkeypatch.setattr(clock_sync.shutil, "which", lambda name: None)
    with pytest.raises(Skip, match="cannot tell"):
        clock_sync.ClockSyncCheck().gather(ctx())


def test_adjtimex_reads_the_kernel():
    answer = clock_sync.from_adjtimex()  # read-only adjtimex(2) works unprivileged on Linux, in containers too
    assert answer is not None and answer["tool"] == "adjtimex"
    assert isinstance(answer["synced"], bool) and answer["maxerror_us"] >= 0


def test_the_kernels_answer_is_said_in_words():
    """Issue 41 item 3: "kernel clock state 5, maxerror 16000000 us" is kernel jargon."""
    said = clock_sync.kernel_clock_words(clock_sync.TIME_ERROR, clock_sync.STA_UNSYNC, 16_000_000)
    assert said == "no NTP service keeps the kernel's clock in step, error bound 16 s"
    assert clock_sync.kernel_clock_words(0, 0, 2500) == "the kernel's clock is kept in step by NTP, error bound 2.5 ms"
    answer = clock_sync.from_adjtimex()
    assert "state" not in answer["detail"] and "maxerror" not in answer["detail"] and "state" in answer
