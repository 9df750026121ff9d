"""Unit tests of ddpdoctor/forensics/live/hang.py's watchdog pieces and ddpdoctor/forensics/evidence/worker_client.py: when silence
starts to count, what counts as progress, and the evidence helpers (real small processes, a fake worker
server on a unix socket)."""
from __future__ import annotations

import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ddpdoctor.forensics.evidence import worker_client
from ddpdoctor.forensics.live import exchange as node_exchange
from ddpdoctor.forensics.live import hang, stall


def fr(*completed_per_pg):
    return {"pg_status": {str(i): {"last_enqueued_collective": c, "last_completed_collective": c}
                          for i, c in enumerate(completed_per_pg)}, "entries": []}


# -- progress -------------------------------------------------------------------------------------------
def test_completed_counts_every_process_group_and_none_before_the_first_collective():
    assert worker_client.completed(fr(5, 2)) == 7
    assert worker_client.completed(fr(-1)) == 0  # a group whose first collective has not completed yet
    assert worker_client.completed(None) is None and worker_client.completed({}) is None
    # a worker server that answers before any process group exists: the rank is still starting, not stalled
    assert worker_client.completed({"pg_status": {}, "entries": []}) is None
    assert worker_client.completed({"pg_status": {"0": {"last_completed_collective": "junk"}}}) == 0


def test_last_steps_and_progress_mark(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "rank0.jsonl").write_text('{"step": 3}\n{"step": 4}\n')
    (metrics / "rank1.jsonl").write_text("")
    (metrics / "rank2.jsonl").write_text("not json\n")
    assert stall.last_steps(tmp_path) == {0: 4, 1: 0}
    logs = tmp_path / "logs"
    log = logs / "run" / "attempt_0" / "0" / "stderr.log"
    log.parent.mkdir(parents=True)
    log.write_text("x")
    os.utime(log, (2_000_000_000, 2_000_000_000))
    assert stall.progress_mark(tmp_path, logs) == 2_000_000_000
    assert stall.progress_mark(tmp_path, tmp_path / "nowhere") == max(p.stat().st_mtime for p in metrics.iterdir())


def test_behind_prefers_steps_then_ranks_outside_collectives():
    assert stall.behind({0: 5, 1: 4, 2: 4}, {}) == [1, 2]
    inside = "File x.py in all_reduce"
    assert stall.behind({0: 5, 1: 5}, {0: inside, 1: "File t.py in get_batch"}) == [1]
    assert stall.behind({}, {0: inside, 1: inside}) == []  # everyone waits: nobody is behind
    assert stall.behind({}, {0: "a", 1: "b"}) == []  # nobody inside a collective: no one rank to blame


def test_a_rank_whose_records_moved_during_the_window_progressed():
    assert stall.progressed_between({0: None, 1: None}, {0: 9, 1: 9})  # init_process_group ended, nine completed
    assert stall.progressed_between({0: 4, 1: 4}, {0: 4, 1: 5})
    assert not stall.progressed_between({0: 4, 1: None}, {0: 4, 1: None})  # the same collectives, none since
    assert not stall.progressed_between({0: 4, 1: 4}, {0: 4})  # rank 1's server did not answer: no word from it
    assert not stall.progressed_between({}, {0: 3})  # no reading before: nothing to compare


# -- arming: when silence starts to count ---------------------------------------------------------------
class Agent:
    """A stand-in for torchrun's agent: this test process, whose python children are the "ranks"."""

    def __init__(self):
        self.pid = os.getpid()

    def poll(self):
        return None


@pytest.fixture
def ranks():
    started: list[subprocess.Popen] = []

    def start(n: int) -> list[psutil.Process]:
        for r in range(n):
            started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                            env={**os.environ, "RANK": str(r)}))
        procs = [psutil.Process(p.pid) for p in started]
        # Popen returns once the child forked: until it has exec'd, its environment is this worker's (no RANK)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all("-c" in _cmdline(p) for p in procs):
            time.sleep(0.02)
        return procs

    yield start
    for p in started:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait(10)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def dog(timeout=5.0, sockets="/nonexistent/{rank}.sock"):
    return hang.Watchdog(Agent(), Path("/nonexistent"), Path("/nonexistent"), timeout, sockets=sockets)


def test_armed_once_every_rank_reports_collectives(ranks):
    ranks(2)
    w = dog()
    assert w.armed_at({0: 3, 1: 0}, launched=100.0, now=110.0) == 110.0
    assert w.armed_at({0: 3, 1: None}, launched=100.0, now=110.0) is None  # rank 1 still starting
    assert w.armed_at({}, launched=100.0, now=110.0) is None


def test_start_up_is_no_hang_for_at_most_a_minute_or_two_thresholds(ranks):
    ranks(2)
    assert dog(timeout=5.0).armed_at({0: None, 1: None}, launched=100.0, now=159.0) is None
    assert dog(timeout=5.0).armed_at({0: None, 1: None}, launched=100.0, now=161.0) == 100.0
    assert dog(timeout=40.0).armed_at({0: None, 1: None}, launched=100.0, now=170.0) is None
    assert dog(timeout=40.0).armed_at({0: None, 1: None}, launched=100.0, now=181.0) == 100.0
    assert dog(sockets=None).armed_at({}, launched=100.0, now=101.0) == 100.0  # no worker servers: from launch


def test_a_stopped_rank_arms_at_once(ranks):
    """SIGSTOP before the watchdog ever heard from the rank: a stopped process is not starting up."""
    procs = ranks(2)
    w = dog()
    assert w.armed_at({0: 3, 1: None}, launched=100.0, now=105.0) is None
    procs[1].suspend()
    deadline = time.monotonic() + 10
    while procs[1].status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.armed_at({0: 3, 1: None}, launched=100.0, now=105.0) == 105.0


C10D = "/x/site-packages/torch/distributed/distributed_c10d.py"


def fh_stack(*frames):
    """faulthandler's dump: the server's C++ thread, then the script's main thread (innermost first)."""
    body = "".join(f'  File "{f}", line {n} in {fn}\n' for f, n, fn in frames)
    return ("Current thread 0x1 (most recent call first):\n  <no Python frame>\n\n"
            f'Thread 0x2 (most recent call first):\n{body}  File "/u/train.py", line 90 in <module>\n')


IN_INIT = fh_stack((C10D, 1700, "init_process_group"), ("/u/train.py", 12, "main"))
OWN_CODE = fh_stack(("/u/train.py", 5, "load_config"), ("/u/train.py", 10, "main"))
IMPORTING = fh_stack(("<frozen importlib._bootstrap>", 1176, "_find_and_load"), ("/u/train.py", 1, "main"))


def test_ranks_waiting_in_init_process_group_end_the_start_up_grace():
    """Issue 37: three ranks inside init_process_group, one in its own code: start-up is over (its silence counts
    from now, named within the threshold); not while a rank still imports, nor before every rank answered."""
    assert stall.past_start_up({0: IN_INIT, 1: IN_INIT, 2: OWN_CODE, 3: IN_INIT}, [0, 1, 2, 3])
    assert not stall.past_start_up({0: IN_INIT, 1: IMPORTING, 2: OWN_CODE}, [0, 1, 2])
    assert not stall.past_start_up({0: IN_INIT, 1: None}, [0, 1])
    assert not stall.past_start_up({0: OWN_CODE, 1: OWN_CODE}, [0, 1])  # nobody waits: still its own start-up


def test_the_watchdog_arms_when_the_ranks_wait_in_init_process_group(ranks, monkeypatch):
    ranks(2)
    w = dog()
    answers = {"0": IN_INIT, "1": OWN_CODE}
    monkeypatch.setattr(worker_client, "ask", lambda path, handler, timeout=5.0: answers[Path(path).name[0]])
    assert w.armed_at({0: None, 1: None}, launched=100.0, now=105.0) == 105.0 and w.init_armed
    assert not w.starting_up(False, 100.0, 106.0)
    answers["1"] = IMPORTING
    w = dog()
    assert w.armed_at({0: None, 1: None}, launched=100.0, now=105.0) is None and not w.init_armed


class Scripted(hang.Watchdog):
    """The watchdog's own loop, with each poll's progress taken from a script (the ranks' completed collectives)."""

    def __init__(self, marks: list[dict], timeout: float):
        super().__init__(Agent(), Path("/nonexistent"), Path("/nonexistent"), timeout, poll=0.02,
                         sockets="/nonexistent/{rank}.sock")
        self.marks, self.polls, self.fired_at = marks, 0, None

    def progress(self):
        mark = self.marks[min(self.polls, len(self.marks) - 1)]
        self.polls += 1
        return mark, 0.0, None

    def fire(self, stalled_s):
        self.fired_at = self.polls - 1  # the poll whose mark it judged
        return {"stalled_s": stalled_s}


def test_silence_after_the_first_collectives_is_start_up_not_a_hang(ranks):
    """The false alarm seen under load: the reference trainer's barrier (every rank's first collective), then
    seconds of `import torch._dynamo` (AdamW, DDP) on every rank, longer than a short --hang-timeout; it fired
    "outside_collectives" and blamed rank 0. Start-up ends at the first progress after arming; a stall after
    that fires as before."""
    ranks(2)
    start_up_then_a_stall(importing=[{0: None, 1: None}] * 3, after_barrier=[{0: 1, 1: 1}] * 40)


TRAINING = [{0: 3, 1: 3}, {0: 5, 1: 5}]


def start_up_then_a_stall(**phases: list[dict]) -> None:
    """The watchdog's loop over the start-up ``phases`` (40 polls of 20 ms: far beyond the 0.1 s threshold),
    two steps of training, then rank 1 hangs (nothing moves again): it fires, and not before the stall."""
    start_up = [mark for marks in phases.values() for mark in marks]
    w = Scripted(start_up + TRAINING + [{0: 5, 1: 5}], timeout=0.1).start()
    deadline = time.monotonic() + 30
    while w.report is None and time.monotonic() < deadline:
        time.sleep(0.02)
    w.stop()
    assert w.report is not None, "a real stall after start-up must still fire"
    assert w.fired_at >= len(start_up) + len(TRAINING), f"fired at poll {w.fired_at}, during the start-up silence"


def test_start_up_after_init_process_group_is_no_hang_when_it_armed_there(ranks, monkeypatch):
    """Armed while a rank waited in init_process_group for a later one (a restart on two nodes, a node slow to
    arrive): once init_process_group is behind every rank, what follows (loading a snapshot or a checkpoint,
    building the model, `import torch._dynamo`) is start-up again, as for a job that never waited there. It
    was judged "outside_collectives" under a short --hang-timeout. A stall after the first collectives fires."""
    ranks(2)
    monkeypatch.setattr(worker_client, "ask", lambda path, handler, timeout=5.0: IN_INIT)
    # one poll inside init_process_group (the ranks then complete it), then loading
    start_up_then_a_stall(in_init=[{0: None, 1: None}], loading=[{0: 0, 1: 0}] * 40)


def test_a_rank_waiting_right_after_the_first_collectives_fires_within_the_threshold(ranks):
    """Armed late (every step before the stall done between two polls): no progress after arming, but rank 0
    waits in a collective for rank 1, so the stall counts at once, not after start-up's one-minute bound."""
    ranks(2)

    class Waiting(Scripted):
        def progress(self):
            mark = super().progress()
            if self.polls > 3:  # rank 0 entered the next all_reduce, rank 1 never comes
                self.last_fr = {0: {"pg_status": {"0": {"last_enqueued_collective": 6, "last_completed_collective": 5}}},
                                1: fr(5)}
            return mark

    w = Waiting([{0: 5, 1: 5}], timeout=0.1).start()
    deadline = time.monotonic() + 20
    while w.report is None and time.monotonic() < deadline:
        time.sleep(0.02)
    w.stop()
    assert w.report is not None and w.report["stalled_s"] < 15, w.report  # threshold 0.1 s; polls late under load


def test_start_up_ends_at_progress_a_stopped_rank_or_the_bound(ranks):
    procs = ranks(2)
    w = dog(timeout=5.0)
    assert w.starting_up(False, launched=100.0, now=110.0) is True
    assert w.starting_up(True, launched=100.0, now=110.0) is False  # the collectives moved after arming
    assert w.starting_up(False, launched=100.0, now=161.0) is False  # at most a minute (or two thresholds)
    assert dog(timeout=40.0).starting_up(False, launched=100.0, now=170.0) is True
    assert dog(sockets=None).starting_up(False, launched=100.0, now=101.0) is False  # no worker servers
    w.last_fr = {0: {"pg_status": {"0": {"last_enqueued_collective": 4, "last_completed_collective": 3}}}, 1: fr(3)}
    assert w.starting_up(False, launched=100.0, now=110.0) is False  # rank 0 waits in a collective
    assert worker_client.waiting(w.last_fr[0]) and not worker_client.waiting(fr(3)) and not worker_client.waiting(None)
    w.last_fr = {}
    procs[1].suspend()
    deadline = time.monotonic() + 10
    while procs[1].status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.starting_up(False, launched=100.0, now=110.0) is False  # SIGSTOP is no start-up


def test_workers_and_their_ranks(ranks):
    ranks(3)
    found = hang.workers(os.getpid())
    assert hang.ranks_of(found) == [0, 1, 2]
    assert hang.workers(2**22 + 12345) == []  # no such agent


# -- evidence -------------------------------------------------------------------------------------------
def test_process_state_names_stopped_zombie_and_gone(ranks):
    proc = ranks(1)[0]
    assert worker_client.process_state(proc.pid) == "running"
    proc.suspend()
    deadline = time.monotonic() + 10
    while worker_client.process_state(proc.pid) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_client.process_state(proc.pid) == "stopped"
    assert worker_client.process_state(None) == "gone" and worker_client.process_state(2**22 + 12345) == "gone"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while worker_client.process_state(child.pid) != "zombie" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_client.process_state(child.pid) == "zombie"  # exited, not yet reaped
    child.wait()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = {"/handler/fr_trace_json": json.dumps(fr(4)), "/handler/dump_traceback": "File x in main"}.get(self.path)
        if self.server.slow:
            time.sleep(self.server.slow)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *args):
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    slow = 0.0

    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)

    def handle_error(self, request, client_address):
        pass  # the slow test's client has gone by the time the answer is written: expected


@pytest.fixture
def worker_server(tmp_path):
    path = tmp_path / "1.sock"
    server = _UnixHTTPServer(str(path), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, path
    server.shutdown()
    server.server_close()


def test_ask_and_flight_record_over_the_worker_servers_protocol(worker_server, tmp_path):
    server, path = worker_server
    assert worker_client.flight_record(path, timeout=5) == fr(4)
    assert worker_client.completed(worker_client.flight_record(path, timeout=5)) == 4
    assert worker_client.ask(path, "dump_traceback") == "File x in main"
    assert worker_client.ask(path, "no_such_handler") is None  # 404
    assert worker_client.flight_record(tmp_path / "absent.sock", timeout=1) is None


def test_a_server_that_does_not_answer_costs_its_timeout_only(worker_server):
    server, path = worker_server
    server.slow = 20.0
    start = time.monotonic()
    assert worker_client.flight_record(path, timeout=0.5) is None
    # the promise is the timeout given (0.5 s), not the server's 20 s; 9.5 s: a loaded test box's scheduling
    assert time.monotonic() - start < 0.5 + 9.5


def test_nodes_swap_evidence_through_the_run_dir(tmp_path):
    exchange = tmp_path / "hang"
    evidence = {3: {"state": "running", "fr": {"pg_status": {}, "entries": list(range(100))}, "stacks": "s"}}
    node_exchange.publish(exchange, "node-a", evidence, keep=10)
    assert not list(exchange.glob("*.tmp"))  # written whole
    assert [p.name for p in node_exchange.published(exchange, exclude="node-b")] == ["node-a.json"]
    assert node_exchange.published(exchange, exclude="node-a") == []
    got = node_exchange.gather(exchange, "node-b", expected=1, wait_s=5)
    assert list(got) == ["node-a"] and got["node-a"][3]["fr"]["entries"] == list(range(90, 100))
    (exchange / "node-c.json").write_text("{broken")
    start = time.monotonic()
    got = node_exchange.gather(exchange, "node-b", expected=3, wait_s=0.5)  # waits its limit, skips the broken file
    assert list(got) == ["node-a"] and time.monotonic() - start >= 0.5
    assert node_exchange.published(tmp_path / "absent", exclude="x") == []


def test_rank_sockets_fill_the_template():
    assert worker_client.rank_sockets("/run/s/{rank}.sock", [0, 2]) == {0: Path("/run/s/0.sock"), 2: Path("/run/s/2.sock")}


def test_ranks_that_wrote_their_exit_record_are_ending_not_hung(ranks, tmp_path):
    """A finished job's ranks in interpreter shutdown for seconds on a loaded node (their flight record at exit
    written) are no hang; a record of an earlier attempt, or one rank without its record, changes nothing."""
    ranks(2)
    w = hang.Watchdog(Agent(), tmp_path, tmp_path, 2.0, sockets="/nonexistent/{rank}.sock")
    (tmp_path / "flight_recorder").mkdir()
    now = time.time()
    assert w.exiting(since=now - 10, now=now) is False  # no record yet
    (tmp_path / "flight_recorder" / "rank0.json").write_text("{}")
    assert w.exiting(since=now - 10, now=now) is False  # rank 1 still in its code: it may be the one behind
    (tmp_path / "flight_recorder" / "rank1.json").write_text("{}")
    assert w.exiting(since=now - 10, now=now + 1) is True
    assert w.exiting(since=now + 5, now=now + 6) is False  # written before these workers started: an earlier attempt
    assert w.exiting(since=now - 10, now=now + 61) is False  # bounded: a rank stuck in its exit is named after all


def test_a_rank_that_wrote_its_error_file_is_failing_not_hung(tmp_path, monkeypatch):
    """A rank that raised (its own error file, newer than the process) is ending: torchrun acts once it exits.
    An error file of an earlier attempt (older than the process), or none, changes nothing; bounded by grace."""
    class Proc:
        def __init__(self, env, created):
            self.env, self.created = env, created

        def environ(self):
            return self.env

        def create_time(self):
            return self.created

    now = time.time()
    err = tmp_path / "error.json"
    procs = [Proc({"RANK": "0"}, now - 20), Proc({"RANK": "1", "TORCHELASTIC_ERROR_FILE": str(err)}, now - 20)]
    monkeypatch.setattr(hang, "workers", lambda pid: procs)
    w = hang.Watchdog(Agent(), tmp_path, tmp_path, 4.0, sockets="/nonexistent/{rank}.sock")
    assert w.failing(now, since=now - 20) is False  # not written
    err.write_text("{}")
    assert w.failing(time.time(), since=now - 20) is True
    assert w.failing(time.time() + w.grace() + 1, since=now - 20) is False  # stuck in its exit: named after all
    procs[1].created = time.time() + 5  # the file predates this process: an earlier attempt's
    assert w.failing(time.time(), since=now - 20) is False


def test_another_nodes_failing_rank_leaves_the_failure_to_torchrun(tmp_path, monkeypatch):
    """Several nodes: the node whose rank raised marks it in the shared run dir; the other node, whose ranks
    wait for it, does not judge them hung either; a mark older than this attempt is an earlier failure's."""
    class Proc:
        def environ(self):
            return {"RANK": "1", "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json")}

        def create_time(self):
            return time.time() - 20

    (tmp_path / "error.json").write_text("{}")
    monkeypatch.setattr(hang, "workers", lambda pid: [Proc()])
    a = hang.Watchdog(Agent(), tmp_path, tmp_path, 4.0, sockets="/x/{rank}.sock", node="a", nnodes=2)
    now = time.time()
    assert a.failing(now, since=now - 30) is True and (tmp_path / "hang" / "a.failing").exists()
    monkeypatch.setattr(hang, "workers", lambda pid: [])
    b = hang.Watchdog(Agent(), tmp_path, tmp_path, 4.0, sockets="/x/{rank}.sock", node="b", nnodes=2)
    assert b.failing(now, since=now - 30) is True
    assert b.failing(now, since=now + 1) is False  # marked before this attempt began
    assert a.failing(now, since=now - 30) is False  # its own mark is not another node's


def test_a_rank_gone_from_its_server_is_read_from_its_exit_record(ranks, tmp_path):
    """The last poll caught a collective in flight; the rank then finished and spends seconds in interpreter
    shutdown (its server gone): its exit record, not that stale poll, tells whether a collective is pending, so
    the process-group deadline of a completed collective stops nothing. A record older than the process is an
    earlier attempt's and is not read."""
    ranks(2)
    w = hang.Watchdog(Agent(), tmp_path, tmp_path, 30.0, sockets=str(tmp_path / "absent-{rank}.sock"))
    created = time.time() - 7.0
    in_flight = {"pg_status": {"0": {"last_enqueued_collective": "29", "last_completed_collective": "28"}},
                 "entries": [{"pg_id": 0, "collective_seq_id": 29, "time_created_ns": int(created * 1e9),
                              "timeout_ms": 10000, "is_p2p": False}]}
    done = {**in_flight, "pg_status": {"0": {"last_enqueued_collective": "29", "last_completed_collective": "29"}}}
    w.last_fr = {0: in_flight, 1: in_flight}
    records = tmp_path / "flight_recorder"
    records.mkdir()
    (records / "rank0.json").write_text(json.dumps(done))
    (records / "rank1.json").write_text(json.dumps(done))
    os.utime(records / "rank1.json", (time.time() - 3600, time.time() - 3600))  # an earlier attempt's
    assert w.progress()[0] == {0: None, 1: None}  # no server answers
    assert worker_client.pending_deadline(w.last_fr[0]) is None  # rank 0's exit record: nothing pending
    assert w.last_fr[1] is in_flight  # rank 1's record predates it: the last poll stands
    (records / "rank1.json").write_text(json.dumps(done))
    w.progress()
    assert w.before_timeout(time.time()) is None and w.next_wait() == w.poll
    # a rank whose process is gone altogether (it ended first) carries no deadline either; a running one does
    w.last_fr[7] = in_flight
    w.progress()
    assert w.gone == {7} and w.pending() == []
    w.last_fr[1] = in_flight
    assert w.pending() == [(created + 10.0, 10.0)]


def test_a_fifo_the_job_left_in_its_run_dir_is_skipped_never_read(tmp_path):
    """The ranks write into run-trainer's run dir; a FIFO (or device) there would block a plain read forever:
    every reader of the run dir goes through evidence_io's refusals."""
    import os

    from ddpdoctor.launch import outcome, records
    from ddpdoctor.forensics.live.stall import last_steps

    (tmp_path / "metrics").mkdir()
    os.mkfifo(tmp_path / "metrics" / "rank0.jsonl")
    (tmp_path / "metrics" / "rank1.jsonl").write_text('{"step": 4}\n')
    os.mkfifo(tmp_path / "checksums.jsonl")
    os.mkfifo(tmp_path / "resumed.json")
    assert last_steps(tmp_path) == {0: 0, 1: 4}
    assert outcome.checksums(tmp_path) is None
    assert records.start_info(tmp_path, "r1")["step"] is None
    metrics = outcome.read_metrics(tmp_path)
    assert metrics["1"] == [{"step": 4}] and not metrics.get("0"), metrics


def test_a_send_recv_only_job_moves_by_its_stacks_and_cpu_not_by_a_stuck_rank_s_line():
    """A pipeline's ranks only send and receive: gloo records nothing, so its motion is read from the stacks
    (where the waiting ranks wait, which ranks wait) and CPU time. A rank in its own code counts as 'own'
    whatever its line: a stuck rank spinning there moves nothing."""
    recv = fh_stack((C10D, 2400, "recv"), ("/u/train.py", 41, "main"))
    own = {0: recv, 1: OWN_CODE}
    spinning = {0: recv, 1: fh_stack(("/u/train.py", 6, "load_config"), ("/u/train.py", 10, "main"))}
    before = {0: 1.0, 1: 5.0}
    assert stall.motion(own, before, before) == stall.motion(spinning, {0: 1.0, 1: 9.0}, before)
    assert stall.motion(own, before, before) != stall.motion({0: recv, 1: recv}, before, before)
    assert stall.motion(own, {0: 1.5, 1: 5.0}, before)[1] is True  # rank 0 computed between its waits
    assert stall.stack_waits(own) and not stall.stack_waits({1: OWN_CODE})


def test_a_blocked_ranks_few_ms_a_second_never_read_as_work():
    """A rank blocked in recv spends ~3 ms a second (gloo's threads, the worker server answering the polls;
    measured on the pipelining job's hang): before, the total counted in 0.05 s steps crossed one every 15-30 s
    and each crossing restarted the silence, so under load the hang went unnamed until the job's own timeout."""
    recv = fh_stack((C10D, 2400, "recv"), ("/u/train.py", 41, "main"))
    stacks = {0: recv, 1: OWN_CODE, 2: recv}
    cpu = {0: 2.00, 1: 1.40, 2: 2.01}
    for _ in range(60):  # a minute of 1 s polls
        after = {r: t + (0.003 if r != 1 else 0.0) for r, t in cpu.items()}
        assert stall.motion(stacks, after, cpu)[1] is False
        cpu = after


def test_each_poll_whose_waiting_ranks_work_is_a_change_of_the_progress_mark():
    recv = fh_stack((C10D, 2400, "recv"), ("/u/train.py", 41, "main"))
    stacks = {0: recv, 1: recv}
    polls = stall.SendRecvMotion()
    assert polls.read(stacks, {0: 1.0, 1: 1.0})[1] is True  # the first poll: nothing to compare with
    assert [polls.read(stacks, {0: 1.0 + 0.003 * i, 1: 1.0})[1] for i in range(1, 20)] == [False] * 19  # blocked
    assert [polls.read(stacks, {0: 2.0 + 0.3 * i, 1: 1.0})[1] for i in range(5)] == [True] * 5  # computing


RECV_STACK = ('Thread 0x00007f6cd6c36b80 (most recent call first):\n'
              '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 2790 in recv\n'
              '  File "/home/u/pipe.py", line 41 in stage\n  File "/home/u/pipe.py", line 90 in <module>\n')
IMPORT_STACK = ('Thread 0x00007f6cd6c36b80 (most recent call first):\n'
                '  File "<frozen importlib._bootstrap>", line 1 in _find_and_load\n'
                '  File "/home/u/pipe.py", line 3 in <module>\n')


def test_a_rank_waiting_in_recv_while_the_records_show_nothing_pending_ends_the_start_up(ranks, monkeypatch):
    """Issue 54 item 6: a 1F1B pipeline's all_reduces are recorded (gloo), its send/recv are not: after its first
    steps the records fall silent with nothing pending, as a start-up's do. Armed after the last all_reduce before
    the stall (torch 2.15 starts with a few; either torch under load), start-up held the silence for a minute and
    the job's own 20 s timeout named rank 1 instead of --hang-timeout 8. The stacks tell a rank in recv."""
    ranks(2)
    w = dog(timeout=8.0)
    w.last_fr = {0: fr(3), 1: fr(3)}
    monkeypatch.setattr(stall, "stacks_of", lambda sockets, rs: {0: RECV_STACK, 1: IMPORT_STACK})
    assert w.starting_up(False, launched=100.0, now=110.0) is False and w.stack_waiting
    monkeypatch.setattr(stall, "stacks_of", lambda sockets, rs: {0: IMPORT_STACK, 1: None})
    assert dog(timeout=8.0).starting_up(False, launched=100.0, now=110.0) is True  # importing: still start-up


def test_another_nodes_starting_mark_is_read_by_the_others_only(tmp_path):
    node_exchange.mark_starting(tmp_path, "node1")
    assert set(node_exchange.starting_marks(tmp_path, exclude="node0")) == {"node1"}
    assert node_exchange.starting_marks(tmp_path, exclude="node1") == {}  # a node's own mark is not its peer's
    assert node_exchange.starting_marks(tmp_path / "nowhere", exclude="node0") == {}


def test_ranks_waiting_for_another_nodes_starting_ranks_are_said_once():
    from ddpdoctor.forensics.judge import policy
    from ddpdoctor.forensics.live.busy import BusyWait

    busy = BusyWait(None)
    reading = policy.Reading(policy.JobMotion.WAITING_ON_BUSY, (0, 1))
    line = busy.observe(reading, {}, ["node1"])
    assert line.startswith("ddpdoctor: rank(s) 0, 1 wait for the ranks of node1, still starting there"), line
    assert "process group's own timeout" in line and busy.observe(reading, {}, ["node1"]) is None
