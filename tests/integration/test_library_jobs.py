"""Jobs built on the libraries people train with (issue 37; tests/integration/library_jobs/), on real processes
(gloo, CPU): first, do no harm; then the library's own waits named right.

- **Do no harm**: a healthy job gives the same result under run-trainer as under plain torchrun: exit 0 and the
  same losses, bit for bit, on every rank. The pipelining job runs ScheduleGPipe, Schedule1F1B,
  ScheduleInterleaved1F1B and a hand-written `batch_isend_irecv` one after the other (run-trainer's call log
  replaced dist.isend/irecv, and P2POp checks them by identity: every schedule raised "Invalid op"); the TP x DP
  job runs DTensor tensor parallelism and FSDP2 on a 2-D DeviceMesh; Lightning's Trainer runs DDP. postmortem of
  the plain run's log dir says pass.
- **A hang in one rank's own code**: run-trainer names rank 1 live, at its line, with the library's wait the
  others stand in; postmortem of plain torchrun's log dir names rank 1 or no rank, never another. The TP x DP
  job's subgroups keep torch's 30-minute timeout: plain torchrun hangs until a scheduler's SIGTERM (25 s after
  the fault), and postmortem with torchrun's output says it was stopped from outside, exit 1 (a pass before).

Each library's two runs go at once, started by its first test (most of a run is torch's import and a timeout).
The full matrix (every library x hang, exception, kill -9, straggler, healthy x run-trainer, postmortem) is
tests/benchmarks/bench_diagnosis.py --only libraries.
"""
from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.library_jobs import job
from tests.integration.shape_jobs import Run, culprits_named, locations_named, postmortem, run_torchrun, run_trainer

pytestmark = pytest.mark.slow

HEALTHY = ["pipelining-all", "tp-dp", "lightning"]
HANGS = ["pipelining-1f1b", "tp-dp", "lightning", "hf-trainer"]
# what the waiting ranks stand in, as the live verdict says it (the library-waits table's phrase)
WAITS_IN = {"pipelining-1f1b": "pipelining's send/recv", "tp-dp": "", "lightning": "DDP's gradient all_reduce",
            "hf-trainer": "DDP's gradient all_reduce"}

_RUNS: dict[str, tuple[Future, Future]] = {}
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="library-run")


def _shape(name: str):
    if name == "pipelining-all":  # every schedule that runs on CPU, and hand-written batch_isend_irecv
        from dataclasses import replace

        return replace(job("pipelining-gpipe", "healthy"), name="pipelining-all-healthy", nproc=2,
                       args=("--schedule", "gpipe,1f1b,interleaved,batch"))
    return job(name, "healthy")


# What libstdc++ prints when a process ends with a joinable std::thread (torch's or gloo's at interpreter shutdown):
# a rank of the healthy Lightning job under plain torchrun died so (SIGABRT) after "`Trainer.fit` stopped" on
# 2026-12-07 (load 6-10; once in the slow suites run that day). torch's teardown race, not the job's code nor
# ddpdoctor's: a healthy run that meets it is run once more, and a run that fails otherwise fails the test.
TEARDOWN_ABORT = "terminate called without an active exception"


def _torn_down(work: Path) -> bool:
    return any(TEARDOWN_ABORT in log.read_text(errors="replace") for log in work.rglob("stderr.log"))


def _healthy_run(run, shape, work: Path, timeout: int):
    got = run(shape, work, timeout)
    code = (got[0] if isinstance(got, tuple) else got).code
    if code != 0 and _torn_down(work):
        got = run(shape, work.with_name(work.name + "-again"), timeout)
    return got


def _both(key: str, shape, tmp: pytest.TempPathFactory) -> tuple[Future, Future]:
    if key not in _RUNS:
        base = tmp.mktemp(key)
        run = _healthy_run if key.endswith("-healthy") else (lambda f, *a: f(*a))
        _RUNS[key] = (_POOL.submit(run, run_trainer, shape, base / "trainer", 200),
                      _POOL.submit(run, run_torchrun, shape, base / "torchrun", 200))
    return _RUNS[key]


def _losses(work: Path) -> dict[str, list[float]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((work / "losses").glob("rank*.json"))}


def _said(doc: dict | None) -> str:
    if not doc:
        return "no document"
    rc = doc.get("root_cause") or {}
    verdict = (doc.get("hang") or {}).get("verdict") or {}
    return (f"culprit_ranks={doc.get('culprit_ranks')} root_cause rank={rc.get('rank')} category={rc.get('category')} "
            f"error_type={rc.get('error_type')} location={rc.get('location')} message={str(rc.get('message'))[:300]!r} "
            f"live={verdict.get('summary')!r}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_library_job_gives_the_same_result_under_run_trainer_as_under_torchrun(name, tmp_path_factory):
    shape = _shape(name)
    trainer_f, plain_f = _both(f"{name}-healthy", shape, tmp_path_factory)
    trainer: Run = trainer_f.result(timeout=280)
    plain, logs, _ = plain_f.result(timeout=280)
    assert plain.code == 0, f"plain torchrun failed: {plain.stderr[-3000:]}"
    assert trainer.code == 0 and trainer.doc and trainer.doc["verdict"] == "pass", \
        f"run-trainer changed a healthy job: exit {trainer.code}: {_said(trainer.doc)}\n{trainer.stderr[-3000:]}"
    work_t, work_p = Path(trainer.doc["config"]["run_dir"]).parent, logs.parent
    ours, theirs = _losses(work_t), _losses(work_p)
    assert sorted(theirs) == sorted(f"rank{r}.json" for r in range(shape.nproc)), theirs  # every rank reported
    assert ours == theirs, f"losses differ:\nrun-trainer {ours}\ntorchrun    {theirs}"
    assert culprits_named(trainer.doc) == [] and trainer.doc["stragglers"] == [], _said(trainer.doc)
    # torchrun at its default log level says nothing of a normal end, and a job a scheduler stopped leaves the
    # same logs: no failure, no pass either (issue 45 item 3), and never an innocent rank named
    code, doc, err = postmortem(logs)
    assert code == 5 and doc and doc["verdict"] == "warn", f"postmortem of a healthy job: {code} {_said(doc)} {err}"
    assert doc["root_cause"]["category"] == "unverified" and culprits_named(doc) == [], _said(doc)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", HANGS)
def test_a_hang_in_one_rank_s_own_code_is_named_inside_the_library(name, tmp_path_factory):
    shape = job(name, "hang")
    trainer_f, plain_f = _both(f"{name}-hang", shape, tmp_path_factory)
    trainer: Run = trainer_f.result(timeout=280)
    doc = trainer.doc
    assert trainer.code == 1 and doc and doc["verdict"] == "fail", f"exit {trainer.code}: {_said(doc)}"
    assert culprits_named(doc) == [1], _said(doc)
    assert doc["root_cause"]["location"] == shape.location and locations_named(doc) == {shape.location}, _said(doc)
    live = (doc.get("hang") or {}).get("verdict") or {}
    # the watchdog's own lines say why it did not name the rank live (seen once on a loaded CI, not reproduced here
    # with eight busy loops on the two cores)
    assert live.get("named") == [1] and WAITS_IN[name] in live.get("summary", ""), \
        f"{_said(doc)}\nhang={json.dumps(doc.get('hang'))[:1500]}\n{trainer.stderr[-3000:]}"

    plain, logs, agent = plain_f.result(timeout=280)
    assert plain.code != 0, plain.stderr[-2000:]
    for flags, how in (((), "log dir alone"), (("--agent-log", str(agent)), "with --agent-log")):
        code, pm, err = postmortem(logs, *flags)
        assert pm is not None, f"{how}: {code} {err[-2000:]}"
        assert set(culprits_named(pm)) <= {1}, f"{how}: an innocent rank named: {_said(pm)}"
        if shape.stop_after_s is None or flags:
            assert code == 1 and pm["verdict"] == "fail", f"{how}: exit {code}: {_said(pm)}"
    if shape.stop_after_s is not None:  # torch's 30-minute subgroup timeout: ended by the scheduler's SIGTERM
        # pm: the loop's last postmortem, the one with --agent-log
        assert pm["root_cause"]["error_type"] in ("stopped_from_outside", "stopped_while_hung"), _said(pm)
        assert "SIGTERM" in pm["root_cause"]["message"], _said(pm)
