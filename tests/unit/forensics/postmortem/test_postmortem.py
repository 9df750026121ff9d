"""The post-mortem's rules on plain text: torchrun's summary, classification, root cause vs consequences,
the hang watchdog's choice of the rank behind, the launch command line."""
from __future__ import annotations

import json

import pytest

from ddpdoctor.forensics.judge import attribution
from ddpdoctor.errors import UsageError
from ddpdoctor.forensics.judge import classify as rules
from ddpdoctor.forensics.postmortem import analysis
from ddpdoctor.forensics.live import stall
from ddpdoctor.launch import torchrun
from ddpdoctor.launch.config import TrainerConfig, validate
from ddpdoctor.forensics.judge.attribution import judge
from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge.classify import classify

SUMMARY = """
Failures:
[1]:
  time      : 2026-11-22_23:27:35
  host      : node7
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 7773)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 7773
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_23:27:34
  host      : node8
  rank      : 9 (local_rank: 1)
  exitcode  : 1 (pid: 7774)
  error_file: /tmp/x/error.json
  traceback : Traceback (most recent call last):
"""


def test_parse_agent_summary():
    recs = analysis.parse_agent_summary(SUMMARY)
    assert [(r["rank"], r["local_rank"], r["host"], r["exit_code"]) for r in recs] == [(0, 0, "node7", -15), (9, 1, "node8", 1)]
    assert recs[1]["error_file"] == "/tmp/x/error.json"


def test_a_loopback_fqdn_in_torchruns_table_is_named_by_the_nodes_hostname(tmp_path):
    """torchrun writes socket.getfqdn(): "localhost" on every node whose hostname maps to a loopback line of
    /etc/hosts (Debian's default, many containers). A root cause "on host localhost" names no node."""
    table = SUMMARY.replace("host      : node8", "host      : localhost")
    recs = analysis.parse_agent_summary(table)
    fails = analysis.failures_of_attempt(tmp_path, 0, "gpu-node-3", recs)
    assert [f.host for f in fails] == ["node7", "gpu-node-3"]  # a real fqdn is kept as torchrun wrote it


def fail(message="", tb="", code=1, ts=None, rank=0):
    f = RankFailure(rank=rank, local_rank=rank, host="h", exit_code=code, timestamp=ts, message=message, traceback=tb)
    f.error_type, _ = rules.exception_line(message, tb)
    return classify(f)


@pytest.mark.parametrize("message,category,needle", [
    ("ValueError: environment variable WORLD_SIZE expected, but not set", "launcher_env", "torchrun"),
    ("RuntimeError: CUDA error: invalid device ordinal", "cuda", "LOCAL_RANK, not RANK"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom", "micro-batch"),
    ("DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", "nccl", "NCCL_DEBUG"),
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)", "timeout", "behind"),
    ("RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.2]:1234", "peer_lost", "root cause"),
    ("KeyError: 'labels'", "exception", "KeyError ended this rank"),
])
def test_classification(message, category, needle):
    f = fail(message)
    assert f.category == category and needle in f.fix, (f.category, f.fix)


def test_signals():
    assert fail(code=-9).signal == "SIGKILL" and "OOM" in fail(code=-9).fix
    term = fail(code=-15)
    assert term.victim and term.signal == "SIGTERM"
    assert fail(code=-11).signal == "SIGSEGV" and not fail(code=-11).victim


def test_root_cause_is_the_earliest_real_failure_not_a_victim():
    victim = fail("RuntimeError: Connection reset by peer", ts=100.0, rank=0)
    timeout = fail("Watchdog caught collective operation timeout", ts=101.0, rank=2)
    real = fail("ZeroDivisionError: division by zero", ts=105.0, rank=1)
    later = fail("KeyError: 'x'", ts=107.0, rank=3)
    root, rest = judge([victim, timeout, real, later])
    assert root is real
    assert {f.rank for f in rest} == {0, 2, 3} and all(f.victim and f.reason for f in rest)
    only_timeouts = judge([fail("Watchdog caught collective operation timeout", ts=5.0, rank=4)])[0]
    assert only_timeouts.rank == 4


def test_user_frame_skips_library_frames():
    tb = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 40, in <module>\n    main()\n'
          '  File "/home/u/train.py", line 12, in main\n    x = f()\n'
          '  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1500, in _call_impl\n'
          'RuntimeError: boom')
    assert rules.user_frame(tb) == "/home/u/train.py:12"
    assert rules.exception_line("", tb) == ("RuntimeError", "boom")


def test_error_file_and_rank_prefixed_logs(tmp_path):
    err = tmp_path / "error.json"
    err.write_text(json.dumps({"message": {"message": "ValueError: bad", "extraInfo": {
        "py_callstack": "Traceback...\nValueError: bad\n", "timestamp": "1795390054"}}}))
    assert analysis.read_error_file(err) == {"message": "ValueError: bad", "traceback": "Traceback...\nValueError: bad\n",
                                               "timestamp": 1795390054.0}
    log = tmp_path / "stderr.log"
    log.write_text("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/a.py\", line 3, in <module>\n"
                   "[rank1]: ValueError: nope\n")
    tb = rules.last_traceback(analysis.tail(log))
    assert tb.splitlines()[-1] == "ValueError: nope" and rules.user_frame(tb) == "/a.py:3"


def test_hang_names_the_rank_behind():
    assert stall.behind({0: 12, 1: 11, 2: 12}, {}) == [1]
    stacks = {0: 'File "x/torch/autograd/graph.py", line 9 in _engine_run_backward',
              1: 'File "/w/faults.py", line 38 in hang_forever'}
    assert stall.behind({0: 4, 1: 4}, stacks) == [1]
    assert stall.behind({0: 4, 1: 4}, {}) == []


def test_torchrun_command_uses_torchs_launcher_and_log_dir(tmp_path):
    cfg = validate(TrainerConfig(nnodes=2, nproc_per_node=4, master="node0:29500", run_dir=str(tmp_path),
                                 max_restarts=2, script_args=["--steps", "5"]))
    argv = torchrun.argv(cfg, tmp_path / "logs")
    joined = " ".join(argv)
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    for part in ("--nnodes 2", "--nproc-per-node 4", "--rdzv-backend c10d", "--rdzv-endpoint node0:29500",
                 "--max-restarts 2", f"--log-dir {tmp_path / 'logs'}", "--redirects 3", "-m ddpdoctor_trainer.train"):
        assert part in joined
    # the rendezvous id is a pure function of what every node is given
    again = validate(TrainerConfig(nnodes=2, nproc_per_node=4, master="node0:29500", run_dir=str(tmp_path)))
    assert cfg.rendezvous_id() == again.rendezvous_id()
    env = torchrun.environment(cfg, cuda=True)
    assert (env.get("TORCH_FR_BUFFER_SIZE") or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE")) and env["OMP_NUM_THREADS"] == str(cfg.omp_threads)


def test_config_validation(tmp_path):
    with pytest.raises(UsageError, match="--master"):
        validate(TrainerConfig(nnodes=2, run_dir=str(tmp_path)))
    with pytest.raises(UsageError, match="no such file"):
        validate(TrainerConfig(script=str(tmp_path / "nope.py"), run_dir=str(tmp_path)))
    solo = validate(TrainerConfig(run_dir=str(tmp_path)))
    assert solo.endpoint().startswith("127.0.0.1:") and not solo.endpoint().endswith(":0")


def test_preflight_args_use_the_preflight_parser():
    from ddpdoctor.cli.preflight import request_from_args as parse_preflight_args

    req = parse_preflight_args(["--only", "resources", "--gpus-per-node", "8", "--set", "resources.min_nofile=1"])
    assert req.only == ("resources",) and req.gpus_per_node == 8 and req.sets == ("resources.min_nofile=1",)
    for args, needle in ((["--nnodes", "2"], "--nnodes"), (["--bogus"], "--bogus"), (["--help"], "--help"),
                         (["--gpus-per-node", "x"], "gpus-per-node"), (["--timeout", "0"], "timeout")):
        with pytest.raises(UsageError, match="--preflight-args") as err:
            parse_preflight_args(args)
        assert needle in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- consequences decided by what a failure says
GLOO_PEER = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:40121"
ABORT_TAIL = """[rank0]:[W1122 23:27:34.1 ProcessGroupGloo.cpp:136] Warning: gloo all_reduce failed
terminate called after throwing an instance of 'gloo::IoException'
  what():  [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:40121
Fatal Python error: Aborted

Thread 0x00007f0a (most recent call first):
  File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce"""
INJECTED_TB = """Traceback (most recent call last):
  File "/work/main/reference_trainer/train.py", line 184, in main
    maybe_fail(step + 1, rank, args)
  File "/work/main/reference_trainer/faults.py", line 24, in maybe_fail
    raise InjectedFailure(f"injected failure at step {step} on rank {rank}")
faults.InjectedFailure: injected failure at step 5 on rank 1"""


def with_tail(code, tail, rank, message="", tb="", ts=None):
    f = RankFailure(rank=rank, local_rank=rank, host="h", exit_code=code, timestamp=ts, message=message,
                    traceback=tb, log_tail=tail, location=rules.user_frame(tb))
    f.error_type, _ = rules.exception_line(message, tb or rules.last_traceback(tail))
    return classify(f)


@pytest.mark.parametrize("message", [
    GLOO_PEER,
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there "
    "was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network error",
    "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
    "torch.distributed.DistStoreError: sendBytes failed on SocketImpl(fd=7): Broken pipe",
])
def test_peer_transport_errors_are_consequences(message):
    f = fail(message)
    assert f.category == "peer_lost" and f.victim and "peer" in f.reason, (f.category, f.reason)


def test_sigabrt_after_a_peer_error_is_a_consequence_and_sigterm_after_an_exception_is_the_cause():
    """The issue's case: rank 0 died of SIGABRT after gloo's "Connection closed by peer", then the launcher
    SIGTERMed rank 1, whose InjectedFailure was the real cause (and whose error file has no earlier time)."""
    aborted = with_tail(-6, ABORT_TAIL, rank=0)
    assert aborted.category == "peer_lost" and aborted.victim and aborted.signal == "SIGABRT"
    real = with_tail(-15, "[rank1]: " + INJECTED_TB.replace("\n", "\n[rank1]: "), rank=1,
                     message="InjectedFailure: injected failure at step 5 on rank 1", tb=INJECTED_TB)
    assert real.category == "exception" and not real.victim and real.signal == "SIGTERM"
    root, rest = judge([aborted, real])
    assert root is real and [f.rank for f in rest] == [0]
    assert root.location == "/work/main/reference_trainer/faults.py:24"


def test_a_plain_sigabrt_or_sigterm_stays_what_it_was():
    assert with_tail(-6, "Fatal Python error: Aborted", rank=0).category == "signal"
    assert not with_tail(-6, "Fatal Python error: Aborted", rank=0).victim
    term = with_tail(-15, "", rank=0)
    assert term.victim and term.category == "signal"
    kb = with_tail(1, "", rank=0, tb="Traceback (most recent call last):\n  File \"/a.py\", line 1, in <module>\n"
                                     "KeyboardInterrupt")
    assert kb.victim and kb.category == "stopped"


def test_post_mortem_of_recorded_files(tmp_path):
    """A torchrun log dir as torch writes it: the agent's table names rank 0 (SIGABRT) first; the records say
    rank 1's exception caused it."""
    attempt = tmp_path / "logs" / "rid_abc" / "attempt_0"
    for r in (0, 1):
        (attempt / str(r)).mkdir(parents=True)
    (attempt / "0" / "stderr.log").write_text("\n".join("[rank0]:" + ln for ln in ABORT_TAIL.splitlines()))
    (attempt / "1" / "stderr.log").write_text("\n".join("[rank1]: " + ln for ln in INJECTED_TB.splitlines()))
    err = attempt / "1" / "error.json"
    err.write_text(json.dumps({"message": {"message": "InjectedFailure: injected failure at step 5 on rank 1",
                                           "extraInfo": {"py_callstack": INJECTED_TB, "timestamp": "1795390055"}}}))
    summary = f"""
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_23:27:34
  host      : node7
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 7773)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 7773
[1]:
  time      : 2026-11-22_23:27:35
  host      : node7
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 7774)
  error_file: {err}
  traceback : Signal 15 (SIGTERM) received by PID 7774
"""
    verdict = analysis.analyse(tmp_path / "logs", summary, "node7")
    # the collector only reads: each attempt's records, no root cause until decide() attributes them (issue 53)
    assert verdict.root_cause is None and verdict.attempts == [] and not verdict.attributed
    assert [(r.attempt, sorted(f.rank for f in r.failures), r.last) for r in verdict.records] == [(0, [0, 1], True)]
    attribution.attribute(verdict, verdict.stopped_by)  # decide()'s first step
    rc = verdict.root_cause
    assert rc.rank == 1 and rc.error_type == "InjectedFailure" and rc.category == "exception", rc
    assert [(c.rank, c.category) for c in verdict.consequences] == [(0, "peer_lost")]
