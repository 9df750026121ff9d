"""Round 4 (issue 33, parts 4-5): FIFOs named as host files, control characters in hosts and ports, the display
filter over every invisible and bidi character, and the job output run-trainer relays."""
from __future__ import annotations

import io
import os
import time

import pytest

from tests.unit.helpers import assert_usage_error, run_cli, run_process


# ---------------------------------------------------------------- FIFOs and devices named as files
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_hosts_file_that_is_a_fifo_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "hosts"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    p = run_process("preflight", "--hosts", f"@{fifo}", "--only", "resources", "--no-save", timeout=60)
    assert time.monotonic() - t0 < 60
    assert_usage_error(p, "FIFO")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pbs_nodefile_that_is_a_fifo_is_not_a_hang(tmp_path):
    fifo = tmp_path / "nodefile"
    os.mkfifo(fifo)
    p = run_process("preflight", "--only", "resources", "--no-save", timeout=60,
                    env={"PBS_NODEFILE": str(fifo), "PBS_JOBID": "1.pbs"})
    assert p.returncode in (0, 1, 2) and "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_read_node_file_refuses_fifos_and_devices_before_open(tmp_path, kind):
    from ddpdoctor import inputs
    from ddpdoctor.cluster.launcher_env import read_node_file

    path = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = "/dev/zero"
    with pytest.raises(inputs.NotRegular, match="FIFO" if kind == "fifo" else "character device"):
        read_node_file(str(path))


# ---------------------------------------------------------------- a control character in a host or port
BAD_ENDPOINTS = ["host\n:29500", "host:29500\n", "host:2950\x1b0", "10.0.0.1\n:29500", "[fe80::1%eth0\n]:29500",
                 "host\u202e:29500"]


@pytest.mark.parametrize("master", BAD_ENDPOINTS)
def test_control_character_in_preflight_master_is_exit_2_one_line(master):
    assert_usage_error(run_cli("preflight", "--master", master, "--nnodes", "2", "--only", "resources", "--no-save",
                               "--timeout", "5"), "--master")


@pytest.mark.parametrize("args", [
    ("run-trainer", "--master", "host\n:29500", "--nnodes", "2", "--no-preflight", "--", "x.py"),
    ("nccl-bench", "--master", "host\n:29500", "--nnodes", "2"),
    ("preflight", "--hosts", "a,b\nc", "--only", "resources", "--no-save"),
    ("preflight", "--local-addr", "10.0.0.1\n", "--master", "h:29500", "--nnodes", "2", "--only", "resources"),
])
def test_control_character_in_any_host_or_port_is_exit_2_one_line(args, tmp_path):
    (tmp_path / "x.py").write_text("pass\n")
    p = run_cli(*args, cwd=tmp_path, env={"DDPDOCTOR_NO_SAVE": "1"})
    assert_usage_error(p)


def test_a_port_of_other_digits_is_not_a_port():
    from ddpdoctor.cluster.endpoint import parse_endpoint
    from ddpdoctor.errors import UsageError

    for text in ("host:٢٩٥٠٠", "host:²⁹⁵⁰⁰", "host: 29500"):
        with pytest.raises(UsageError):
            parse_endpoint(text)


# ---------------------------------------------------------------- the display filter
INVISIBLE = ["\u061c", "\ufeff", "\u2060", "\u2061", "\u2062", "\u2063", "\u2064", "\u00ad", "\U000e0001",
             "\U000e0041", "\U000e007f", "\u202e", "\u2066", "\u200b", "\u2028", "\u2029", "\ue000", "\x1b", "\x9b",
             "\x7f", "\r", "\ud800"]


@pytest.mark.parametrize("ch", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_safe_text_shows_every_invisible_and_bidi_character(ch):
    from ddpdoctor.text import safe_text

    shown = safe_text(f"a{ch}b")
    assert ch not in shown and shown.startswith("a\\") and shown.endswith("b"), shown
    assert shown.isascii()


def test_safe_text_keeps_text_people_read():
    from ddpdoctor.text import safe_text

    for text in ("node7 ok\tx\n", "Grüße, 東京, Ωμέγα, emoji 🎉", "a\u00a0b", "naïve"):
        assert safe_text(text) == text
    assert safe_text("50%|#####\r60%", keep="\r") == "50%|#####\r60%"


def test_relayed_job_output_is_filtered_like_the_verdicts():
    """The script's and torchrun's output as run-trainer pumps it: terminal sequences shown, not obeyed."""
    from ddpdoctor.launch.run import _pump

    attack = ("\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\\x1b[?1049h"
              "PASS\u202eLIAF\r\n")
    src, shown, log = io.StringIO(attack), io.StringIO(), io.StringIO()
    _pump(src, [shown], logs=[log])
    out = shown.getvalue()
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "\\u202e" in out and out.endswith("\r\n")
    assert log.getvalue() == attack  # the run's own log keeps what was written


# ---------------------------------------------------------------- SIGHUP like SIGTERM
def test_sighup_is_a_stop_of_its_own_code():
    import signal

    from ddpdoctor.lifetime import STOP_SIGNALS, Terminated, stop_signal_of

    assert signal.SIGHUP in STOP_SIGNALS
    assert stop_signal_of(Terminated(signal.SIGHUP)) == signal.SIGHUP and Terminated(signal.SIGHUP).name == "SIGHUP"
    assert stop_signal_of(Terminated()) == signal.SIGTERM


def test_a_stop_in_the_middle_of_a_write_leaves_no_temp_file(tmp_path, monkeypatch):
    import signal

    from ddpdoctor import documents
    from ddpdoctor.lifetime import Terminated

    def hup(*_a, **_k):
        raise Terminated(signal.SIGHUP)

    monkeypatch.setattr(documents.os, "replace", hup)
    with pytest.raises(Terminated):
        documents.dump({"x": 1}, tmp_path / "run.json")
    assert list(tmp_path.iterdir()) == []
