"""When a process started (ddpdoctor/lifetime.py's mark_command_start), read from the kernel's counters: a node
whose wall clock is off must not count its budget from seconds before it started."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from ddpdoctor import lifetime


def test_a_fresh_process_is_seconds_young():
    """In a process of its own: the suite's workers live for many minutes (xdist), a fresh one seconds."""
    out = subprocess.run([sys.executable, "-c", "from ddpdoctor import lifetime; print(lifetime._process_age())"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 0.0 <= float(out.stdout) < 30, out.stdout


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt-get install faketime)")
def test_a_clock_5_s_ahead_does_not_age_the_process():
    """On node3 under faketime +5 s the meeting child read its start 5 s early (psutil's create_time is the
    kernel's, time.time() the faked clock) and its join window was spent before its first connection attempt."""
    out = subprocess.run(["faketime", "-f", "+5s", sys.executable, "-c",
                          "from ddpdoctor import lifetime; print(lifetime._process_age())"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 3.0, out.stdout
