"""Running a job: torchrun as a child (its output passed through), the hang watchdog beside it, then the
post-mortem and the run-trainer document (run.json). SIGTERM or Ctrl-C stops torchrun, which stops its
workers; what is left after a grace period is killed, so nothing outlives the command, and the post-mortem
still runs."""
from __future__ import annotations

import collections
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import documents
from ..errors import UsageError
from ..redact import redact_text
from . import attribution, evidence_io, hang, postmortem, records, torchrun
from ..devices import nvidia_driver_present
from ..exitcodes import ExitCode
from ..lifetime import die_with_parent
from .config import TrainerConfig, node_label, resumed_run, socket_dir

MAX_POINTS = 500


class Terminal:
    """Where torchrun's and the ranks' output is echoed: the user's terminal until run-trainer stops the job
    itself (a hang verdict, a signal), then nowhere: what stopping them makes them print (torchrun's
    `SignalException: Process N got signal: 15` traceback, the ranks' KeyboardInterrupt) goes to the run's logs
    only, and the verdict is the last word on the terminal. Lines held while muted are echoed after all if the
    stop is called off (the watchdog found the workers already gone: torchrun's own failure report follows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._muted = False
        self._held: list = []

    def mute(self) -> None:
        with self._lock:
            self._muted = True

    def unmute(self) -> None:
        with self._lock:
            self._muted, held, self._held = False, self._held, []
        for sink, line in held:
            _write(sink, line)

    def write(self, sink, line: str) -> None:
        with self._lock:
            if self._muted:
                if len(self._held) < 10_000:  # bounded: a chatty job stopped for minutes
                    self._held.append((sink, line))
                return
        _write(sink, line)


def _write(sink, line: str) -> None:
    try:
        sink.write(line)
        sink.flush()
    except (OSError, ValueError):
        pass


def _pump(src, sinks, noticed: threading.Event | None = None, terminal: Terminal | None = None,
          logs: list | None = None) -> None:
    """Copy one of torchrun's pipes line by line: to ``logs`` always, as written; to ``sinks`` (the terminal,
    secrets redacted: it is often a scheduler's log file) through ``terminal`` when given, so that it can be muted."""
    for line in iter(src.readline, ""):
        if noticed is not None and "death signal" in line:
            noticed.set()  # torchrun's "Received SIGINT death signal, shutting down workers"
        for sink in logs or ():
            _write(sink, line)
        shown = redact_text(line) if sinks else line
        for sink in sinks:
            if terminal is not None:
                terminal.write(sink, shown)
            else:
                _write(sink, shown)


class _Watchdog(hang.Watchdog):
    """The hang watchdog, muting the terminal from the moment it judges the job hung (it stops the job next)."""

    terminal: Terminal | None = None

    def fire(self, stalled_s: float):
        if self.terminal is not None:
            self.terminal.mute()
        report = super().fire(stalled_s)
        if report is None and self.terminal is not None:
            self.terminal.unmute()  # not a hang after all: the workers had ended; torchrun reports that
        return report


class AgentLog:
    """torchrun's stderr: to agent.stderr.log while the disk takes it, and its last AGENT_LOG_BYTES in memory,
    so the post-mortem reads the failure table even when the file could not be written (a full --run-dir)."""

    def __init__(self, path: Path, max_bytes: int = evidence_io.AGENT_LOG_BYTES):
        self.path, self.max_bytes = path, max_bytes
        self.lines: collections.deque[str] = collections.deque()
        self.size = 0
        self.error: OSError | None = None
        self._lock = threading.Lock()
        try:
            self._file = open(path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            self._file, self.error = None, exc

    def write(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            self.size += len(line)
            while self.size > self.max_bytes and len(self.lines) > 1:
                self.size -= len(self.lines.popleft())
            if self._file is not None:
                try:
                    self._file.write(line)
                    self._file.flush()
                except OSError as exc:  # ENOSPC, EDQUOT: keep the text in memory, stop writing
                    self.error = exc
                    self._close_quietly()

    def flush(self) -> None:
        """Each line is flushed as it is written (a sink like any file)."""

    def text(self) -> str:
        with self._lock:
            return "".join(self.lines)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as exc:
                    self.error = exc
                self._file = None

    def _close_quietly(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass
        self._file = None


def _problem(path: Path, exc: OSError) -> str:
    """'PATH: cannot write (No space left on device); 0 B free in DIR' (documents.write_error's line)."""
    return str(documents.write_error(path, exc))


def _die_with_parent() -> None:
    """In torchrun's child: a SIGKILLed run-trainer still takes torchrun (and through it the workers) along;
    SIGTERM, so torchrun stops its workers itself."""
    die_with_parent(signal.SIGTERM)


class StopOnSignal:
    """SIGTERM or SIGINT to run-trainer stops the job instead of ending run-trainer: torchrun gets the signal
    (unless it already has it, from a terminal's Ctrl-C to the whole group: a second one would cut its own
    orderly shutdown short), whatever is left after the grace period gets SIGKILL, and the post-mortem and
    run.json still happen. The signal is kept for the exit code (128 + signal)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, grace: float = 40.0):
        self.grace, self.signum, self.proc = grace, None, None
        self.agent_noticed = threading.Event()
        self._old: dict = {}
        self._stopper: threading.Thread | None = None
        self._known: list = []
        self.terminal: Terminal | None = None

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def attach(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        if self.signum is not None:
            self._start_stopping()

    def wait_stopped(self) -> None:
        if self._stopper is not None:
            self._stopper.join()

    def _on_signal(self, signum, frame) -> None:
        if self.signum is None:  # a second Ctrl-C changes nothing: the job is being stopped already
            self.signum = signum
            if self.proc is not None:
                self._start_stopping()

    def _start_stopping(self) -> None:
        if self.terminal is not None:
            self.terminal.mute()
        self._known = hang.family(self.proc.pid)[1:]  # now: the workers, before torchrun can exit without them
        self._stopper = threading.Thread(target=self._stop, name="ddpdoctor-stop", daemon=True)
        self._stopper.start()

    def _stop(self) -> None:
        noticed = self.agent_noticed.wait(2.0)
        hang.stop_agent(self.proc, self.grace, sig=None if noticed else self.signum, known=self._known)


def launch(cfg: TrainerConfig, *, echo: bool = True, stdout_to_stderr: bool = False,
           preflight: dict | None = None) -> dict:
    """Run the job to its end (or to a signal), then write and return its run.json document."""
    records.clean_temps(Path(cfg.run_dir))  # debris of earlier runs that crashed mid-write
    label = node_label(cfg)
    logs = torchrun.log_dir(cfg, label)
    logs.mkdir(parents=True, exist_ok=True)
    agent_log = logs / "agent.stderr.log"
    argv = torchrun.argv(cfg, logs)
    env = torchrun.environment(cfg, nvidia_driver_present(), label)
    sockets = socket_dir(cfg, label)
    sockets.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        return _run_job(cfg, argv, env, logs, agent_log, sockets, echo, stdout_to_stderr, preflight)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def _run_job(cfg, argv, env, logs, agent_log, sockets, echo, stdout_to_stderr, preflight) -> dict:
    started = time.time()
    out_sink = sys.stderr if stdout_to_stderr else sys.stdout
    terminal = Terminal()
    with StopOnSignal() as stop:
        stop.terminal = terminal
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", preexec_fn=_die_with_parent)
        stop.attach(proc)
        agent = AgentLog(agent_log)
        try:
            pumps = [threading.Thread(target=_pump, args=(proc.stdout, [out_sink] if echo else [], None, terminal),
                                      daemon=True),
                     threading.Thread(target=_pump, args=(proc.stderr, [sys.stderr] if echo else [],
                                                          stop.agent_noticed, terminal, [agent]), daemon=True)]
            for t in pumps:
                t.start()
            # Always on: without --hang-timeout its threshold calibrates itself from the job's own progress.
            # Each poll makes every rank serialise its flight record: every 2 s, unless a short fixed threshold.
            poll = 1.0 if cfg.hang_timeout is not None and cfg.hang_timeout < 20 else 2.0
            dog = _Watchdog(proc, cfg.records(), logs, cfg.hang_timeout, poll=poll,
                            sockets=env.get("DDPDOCTOR_WORKER_SOCKET"), node=logs.name, nnodes=cfg.nnodes)
            dog.terminal = terminal
            dog.start()
            try:
                proc.wait()
                stop.wait_stopped()  # torchrun gone; its workers too, or SIGKILLed by now
            finally:
                if dog:
                    dog.stop()
                for t in pumps:
                    t.join(5)
        finally:
            agent.close()
        records.clean_temps(Path(cfg.run_dir), stale_s=0, run=cfg.run_id)  # this job is over: no writer of its temp files is left
        doc = build_document(cfg, proc.returncode, agent.text(), logs,
                             time.time() - started, dog.report if dog else None, interrupted=stop.signum)
        doc["preflight"] = preflight
        doc["collectives"] = dog.collectives()
        if not doc["metrics_summary"] and doc["collectives"]:  # a user script: its collectives are its steps
            doc["metrics_summary"] = collectives_summary(doc["collectives"])
        doc["run_json"] = str((cfg.records() / "run.json").resolve())  # the summary and the hang panel name it
        doc["logs"] = str(Path(doc["logs"]).resolve())
        problems = [_problem(agent_log, agent.error)] if agent.error is not None else []
        try:
            documents.dump(doc, cfg.records() / "run.json")
        except UsageError as exc:  # a full disk: the result is still shown (trainer_cmd), then this line
            problems.append(str(exc))
        if problems:
            doc["unwritten"] = problems
            _blame_the_disk(doc, problems, Path(cfg.run_dir))
    return doc


def _blame_the_disk(doc: dict, problems: list[str], run_dir: Path) -> None:
    """A failure whose records say nothing, on a run dir that could not be written: the full disk is the
    likely cause (the ranks' logs and error files were lost the same way), so the root cause says so."""
    rc = doc.get("root_cause")
    if not rc or rc.get("message") or rc.get("category") not in ("unknown", None):
        return
    rc["message"] = f"the ranks left no readable record, and {problems[0]}"
    rc["fix"] = (f"free space where --run-dir points ({run_dir}) or point --run-dir at a disk with room, then "
                 "rerun: the ranks' logs, error files and run.json are written there")


def read_metrics(run_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted((run_dir / "metrics").glob("rank*.jsonl")):
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        stride = max(1, len(rows) // MAX_POINTS)
        out[path.stem[4:]] = rows[::stride] if stride > 1 else rows
    return out


def metrics_summary(metrics: dict[str, list[dict]]) -> dict:
    if not metrics:
        return {}
    rank0 = metrics.get("0") or next(iter(metrics.values()))
    per_rank_tps = [sum(r["tokens_per_s"] for r in rows) / len(rows) for rows in metrics.values() if rows]
    steps = [r["step_time_s"] for rows in metrics.values() for r in rows]
    return {
        "steps": max((r["step"] for rows in metrics.values() for r in rows), default=0),
        "first_loss": rank0[0]["loss"] if rank0 else None,
        "final_loss": rank0[-1]["loss"] if rank0 else None,
        "tokens_per_s_mean": round(sum(per_rank_tps), 1),  # the job's throughput: every rank's share added
        "step_time_s_mean": round(sum(steps) / len(steps), 5) if steps else None,
        "peak_mem_bytes": max((r.get("peak_mem_bytes") or 0 for rows in metrics.values() for r in rows), default=0),
        "ranks": len(metrics),
    }


def collectives_summary(summary: dict) -> dict:
    ranks = summary.get("ranks") or {}
    done = [r["completed"] for r in ranks.values() if r.get("completed") is not None]
    gaps = sorted(r["interval_s_median"] for r in ranks.values() if r.get("interval_s_median") is not None)
    straggler = summary.get("straggler") or {}
    return {"collectives": max(done) if done else 0, "collective_interval_s": gaps[len(gaps) // 2] if gaps else None,
            "ranks": len(ranks), "straggler_rank": straggler.get("rank"),
            "straggler_late_s": straggler.get("late_s_median")}


def checksums(run_dir: Path) -> bool | None:
    path = run_dir / "checksums.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return all(r.get("equal") for r in rows) if rows else None


def adopt_exit_dumps(verdict: postmortem.Verdict, run_dir: Path) -> None:
    """A job that failed without a hang (a collective mismatch gloo aborts at once): the flight records the
    ranks wrote as they ended (at exit, or on the launcher's SIGTERM) say whose call differs from the majority's,
    or who was behind; attribution.adopt decides whether they outrank the first failure."""
    from .fr_dumps import find_dumps, judge_dumps

    attribution.adopt(verdict, judge_dumps(find_dumps([run_dir / "flight_recorder"])))


def hang_root_cause(report: dict) -> dict:
    verdict = report.get("verdict") or {}
    culprits = verdict.get("culprits") or []
    ranks = [c["rank"] for c in culprits] or report.get("stalled_ranks") or []
    threshold = report.get("threshold") or {}
    first = culprits[0] if culprits else {}
    if verdict:
        message = f"{verdict['summary']} (no progress for {report['stalled_s']:.0f} s; threshold " \
                  f"{threshold.get('seconds')} s, {threshold.get('source')})"
    else:
        who = f"rank(s) {', '.join(map(str, ranks))}" if ranks else "no single rank (all stopped together)"
        message = f"no rank made progress for {report['stalled_s']:.0f} s; behind the others: {who}"
    return postmortem.RankFailure(
        rank=ranks[0] if ranks else None, local_rank=None, host=first.get("host") or socket.gethostname(),
        exit_code=None, category="hang", error_type=verdict.get("class", "Hang"), message=message,
        location=first.get("where") or _hang_location(report, ranks),
        traceback="\n".join(f"--- rank {r} ---\n{s}" for r, s in report.get("stacks", {}).items()),
        fix=verdict.get("fix") or "look at the stack of the rank(s) behind: a rank that never reaches the "
            "collective the others wait in (a data loader stall, a rank-dependent branch, a deadlock) hangs the job",
    ).to_json()


def _hang_location(report: dict, ranks: list[int]) -> str | None:
    """Without a verdict (no flight recorder answered): the innermost user frame of a stalled rank's stack."""
    for r in ranks:
        frames = postmortem.FRAME.findall(report.get("stacks", {}).get(str(r), ""))
        for file, line, _ in frames:  # faulthandler prints the innermost frame first
            if not any(part in file for part in postmortem.LIBRARY):
                return f"{file}:{line}"
    return None


def hang_consequences(report: dict) -> list[dict]:
    """The ranks that waited for the culprit, each with where it waited."""
    verdict = report.get("verdict") or {}
    coll = verdict.get("collective") or {}
    culprits = ", ".join(str(c["rank"]) for c in verdict.get("culprits", []))

    def waited(c: dict) -> str:  # each rank's own op: a barrier's waiters and an all_reduce's are not the same
        if c.get("waited_in"):
            return f"waited in {c['waited_in']}"
        return f"waited in {coll['op']} #{coll['seq']}" if coll else "waited"

    return [postmortem.RankFailure(rank=c["rank"], local_rank=None, host=c.get("host"), exit_code=None,
                                   category="hang", location=c.get("where"), victim=True,
                                   reason=f"{waited(c)} for rank(s) {culprits}" + (f" at {c['where']}" if c.get("where") else ""),
                                   fix="nothing to fix on this rank: see the root cause").to_json()
            for c in verdict.get("consequences", [])]


def interrupted_root(signum: int) -> dict:
    name = signal.Signals(signum).name
    return postmortem.RankFailure(
        rank=None, local_rank=None, host=socket.gethostname(), exit_code=128 + signum, signal=name,
        category="interrupted", message=f"run-trainer received {name}: torchrun and every worker were stopped",
        fix="nothing to fix: the run was stopped on request (continue it with --resume RUN_ID)").to_json()


def _said_before(root: dict | None) -> bool:
    """A real failure that says what it is, not one the signal itself caused (KeyboardInterrupt, SIGTERM)."""
    return bool(root) and not root["victim"] and root["category"] not in ("unknown", "stopped")


def build_document(cfg: TrainerConfig, code: int, agent_stderr: str, logs: Path, wall: float,
                   hang_report: dict | None, interrupted: int | None = None) -> dict:
    run_dir = cfg.records()
    with evidence_io.reading(logs.parent) as notes:  # every node's logs sit under records/logs/
        verdict = postmortem.analyse(logs, agent_stderr, socket.gethostname())
        if not hang_report and code != 0:
            adopt_exit_dumps(verdict, run_dir)
    metrics = read_metrics(run_dir)
    root = verdict.root_cause.to_json() if verdict.root_cause else None
    consequences = [f.to_json() for f in verdict.consequences]
    # A rank that failed of its own as the job stalled (an exception, a C++ abort on a collective mismatch) is
    # the cause; not so a signal (the watchdog's own SIGKILL after the grace) or a collective timeout.
    if hang_report and root and not root["victim"] and root["category"] not in ("unknown", "signal", "timeout", "hang"):
        pass
    elif hang_report:
        if root:
            consequences.insert(0, dict(root, victim=True, reason="stopped by the hang watchdog"))
        root = hang_root_cause(hang_report)
        consequences = hang_consequences(hang_report) or consequences
    elif interrupted and not _said_before(root):
        # Only a real failure that came before the signal stays the root cause; the rest followed the signal.
        if root:
            consequences.insert(0, dict(root, victim=True, reason="stopped after run-trainer was interrupted"))
        root = interrupted_root(interrupted)
    failed = code != 0 or hang_report is not None or interrupted is not None
    if failed and root is None:
        root = postmortem.RankFailure(
            rank=None, local_rank=None, host=socket.gethostname(), exit_code=code,
            message=f"torchrun exited with code {code} and no rank left an error record",
            fix=f"read torchrun's own output in {logs / 'agent.stderr.log'}",
            log_tail="\n".join(agent_stderr.splitlines()[-30:])).to_json()
    exit_code = 128 + interrupted if interrupted else ExitCode.FAIL if failed else ExitCode.OK
    return documents.envelope(
        "run-trainer",
        run_id=cfg.rendezvous_id(),
        config=cfg.to_json(),
        verdict="fail" if failed else "pass",
        exit_code=exit_code,
        interrupted=signal.Signals(interrupted).name if interrupted else None,
        start=records.start_info(run_dir, resumed_run(cfg)),
        torchrun_exit_code=code,
        restarts=max(0, len(verdict.attempts) - 1),
        attempts=verdict.attempts,
        wall_s=round(wall, 2),
        metrics=metrics,
        metrics_summary=metrics_summary(metrics),
        checksums_equal=checksums(run_dir),
        root_cause=root if failed else None,
        consequences=consequences if failed else [],
        culprit_ranks=(([c["rank"] for c in (hang_report.get("verdict") or {}).get("culprits", [])]
                        if hang_report and root and root.get("category") == "hang" else [])
                       or attribution.culprit_ranks(root, consequences)) if failed else [],
        hang=hang_report,
        logs=str(logs),
        node=records.node_of(logs),  # node rank 0 prints the full result; the others one line (trainer_cmd)
        input_notes=notes,
        preflight=None,
    )
