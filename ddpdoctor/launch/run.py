"""Running a job: torchrun as a child (its output passed through), the hang watchdog beside it, then the
post-mortem and the run-trainer document (run.json, built by ``outcome``). SIGTERM or Ctrl-C stops
torchrun, which stops its workers; what is left after a grace period is killed, so nothing outlives the
command, and the post-mortem still runs (signals.py)."""
from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import documents
from ..errors import UsageError
from ..redaction import Lines, know_job, redact_text
from ..text import safe_text
from ..forensics.evidence import job_files, user_code
from ..forensics.live import hang, stall
from . import records, torchrun
from ..devices import nvidia_driver_present
from .config import REFERENCE_MODULE, TrainerConfig, node_label, socket_dir
from .fold import Folder, entry_point_named
from ..forensics.live.pace import Pace
from .outcome import blame_the_disk, build_document, collectives_summary
from .signals import StopOnSignal, agent_child


class Terminal:
    """Where torchrun's and the ranks' output is echoed: the user's terminal until run-trainer stops the job
    itself (a hang verdict, a signal), then nowhere: what stopping them makes them print (torchrun's
    `SignalException: Process N got signal: 15` traceback, the ranks' KeyboardInterrupt) goes to the run's logs
    only, and the verdict is the last word on the terminal. Lines held while muted are echoed after all if the
    stop is called off (the watchdog found the workers already gone: torchrun's own failure report follows)."""

    def __init__(self, status_on: bool = False) -> None:
        self._lock = threading.Lock()
        self._muted = False
        self._held: list = []
        self.status_on = status_on  # a terminal: the job's progress is one line under the output (pace.py)
        self._status: str | None = None

    def status(self, text: str | None) -> None:
        """The progress line at the bottom of the terminal, redrawn in place (None: gone)."""
        with self._lock:
            self._erase()
            self._status = None if self._muted or not self.status_on else text
            self._draw()

    def _erase(self) -> None:
        if self._status:
            _write(sys.stderr, "\r\x1b[2K")

    def _draw(self) -> None:
        if self._status:
            width = max(20, shutil.get_terminal_size().columns - 1)  # one row: a wrapped one could not be erased
            _write(sys.stderr, self._status[:width])

    def mute(self) -> None:
        with self._lock:
            self._erase()
            self._status = None
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
            self._erase()  # the line goes above the progress line, which is drawn again under it
            _write(sink, line)
            self._draw()


def _write(sink, line: str) -> None:
    try:
        sink.write(line)
        sink.flush()
    except (OSError, ValueError):
        pass


def _pump(src, sinks, noticed: threading.Event | None = None, terminal: Terminal | None = None,
          logs: list | None = None, folder: Folder | None = None, rename=None) -> None:
    """Copy one of torchrun's pipes line by line: to ``logs`` always, as written; to ``sinks`` (the terminal,
    secrets redacted, control sequences shown as text: it is often a scheduler's log file) through ``terminal``
    when given, so that it can be muted, and through ``folder`` when given (tracebacks folded to their last
    frames: fold.py)."""
    redact = Lines()  # one per stream: a key block's context carries across lines
    for line in iter(src.readline, ""):
        if noticed is not None and "death signal" in line:
            noticed.set()  # torchrun's "Received SIGINT death signal, shutting down workers"
        for sink in logs or ():
            _write(sink, line)
        if sinks:
            shown = safe_text(redact(line if rename is None else rename(line)), keep="\r")  # ESC, OSC: shown
            _show(sinks, folder.feed(shown) if folder is not None else [shown], terminal)
    if sinks and folder is not None:
        _show(sinks, folder.flush(), terminal)


def _show(sinks, lines: list[str], terminal: Terminal | None) -> None:
    for shown in lines:
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

    pace: Pace | None = None

    def say(self, line: str) -> None:
        """A live line (the culprit, or ranks waiting on a busy one) on the terminal, before the job's own output."""
        (self.terminal.write if self.terminal is not None else _write)(sys.stderr, redact_text(line) + "\n")

    def announce(self, evidence, left_s):
        """Say the culprit at once, on the terminal (not muted yet): the ranks' timeout tracebacks come after."""
        super().announce(evidence, left_s)
        if self.live_line:
            self.say(self.live_line)

    def progress(self):
        """Each poll's progress mark, also shown as the job's pace (steps, or collectives done)."""
        mark = super().progress()
        if self.pace is not None:
            self.pace.observe(mark[0], stall.last_steps(self.run_dir))
        return mark

    def from_early(self, stop: bool):
        """The user's process-group timeout expired: the job is stopped next, so the terminal is muted too (the
        ranks' own timeout errors came before; torchrun's SignalException traceback would come after)."""
        if stop and self.terminal is not None:
            self.terminal.mute()
        return super().from_early(stop)


class AgentLog:
    """torchrun's stderr: to agent.stderr.log while the disk takes it (secrets redacted: the run dir is what
    users share), and its last AGENT_LOG_BYTES in memory, so the post-mortem reads the failure table even when
    the file could not be written (a full --run-dir)."""

    def __init__(self, path: Path, max_bytes: int = job_files.AGENT_LOG_BYTES):
        self.path, self.max_bytes = path, max_bytes
        self.lines: collections.deque[str] = collections.deque()
        self.size = 0
        self.error: OSError | None = None
        self._lock = threading.Lock()
        self._redact = Lines()
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
                    self._file.write(self._redact(line))
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


def launch(cfg: TrainerConfig, *, echo: bool = True, stdout_to_stderr: bool = False,
           preflight: dict | None = None, fold: bool = True) -> dict:
    """Run the job to its end (or to a signal), then write and return its run.json document. ``fold``: the
    ranks' tracebacks relayed folded to their last frames (False: everything, as -v)."""
    records.clean_temps(Path(cfg.run_dir))  # debris of earlier runs that crashed mid-write
    # the job's own package is the user's code wherever installed (the reference trainer's after `pip install .`)
    user_code.declare(cfg.script, cfg.module or (REFERENCE_MODULE if cfg.is_reference else None))
    label = node_label(cfg)
    logs = torchrun.log_dir(cfg, label)
    logs.mkdir(parents=True, exist_ok=True)
    agent_log = logs / "agent.stderr.log"
    argv = torchrun.argv(cfg, logs)
    env = torchrun.environment(cfg, nvidia_driver_present(), label)
    know_job(env, [*cfg.script_args, *cfg.preflight_args])  # their secret values, scrubbed from all we write
    sockets = socket_dir(cfg, label)
    sockets.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        folders = [Folder(_shown_path(logs)) for _ in range(2)] if fold else [None, None]
        return _run_job(cfg, argv, env, logs, agent_log, sockets, echo, stdout_to_stderr, preflight, folders)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def _interactive() -> bool:
    """Both streams on a terminal: only there does a progress line redrawn in place read as one."""
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _shown_path(path: Path) -> str:
    """The logs as the fold line names them: relative to the working directory when under it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def _watchdog(cfg, proc, logs, env, terminal: Terminal, echo: bool, stdout_to_stderr: bool) -> _Watchdog:
    """The hang watchdog beside torchrun, with what it says while the job runs."""
    # Always on: without --hang-timeout its threshold calibrates itself from the job's own progress.
    # Each poll makes every rank serialise its flight record: every 2 s, unless a short fixed threshold.
    poll = 1.0 if cfg.hang_timeout is not None and cfg.hang_timeout < 20 else 2.0
    dog = _Watchdog(proc, cfg.records(), logs, cfg.hang_timeout, poll=poll,
                    sockets=env.get("DDPDOCTOR_WORKER_SOCKET"), node=logs.name, nnodes=cfg.nnodes,
                    busy_timeout=cfg.busy_timeout)
    dog.terminal = terminal
    if echo:  # a straggler named while the job runs: one line on the terminal (stragglers.py)
        dog.stragglers.say = lambda text: terminal.write(sys.stderr, text + "\n")
    if echo and not stdout_to_stderr:  # the job's pace: a status line on a terminal, else now and then
        dog.pace = Pace(show=terminal.status if terminal.status_on else None,
                        say=lambda text: terminal.write(sys.stderr, text + "\n"), nnodes=cfg.nnodes)
    return dog


def _run_job(cfg, argv, env, logs, agent_log, sockets, echo, stdout_to_stderr, preflight, folders) -> dict:
    started = time.time()
    out_sink = sys.stderr if stdout_to_stderr else sys.stdout
    terminal = Terminal(status_on=echo and not stdout_to_stderr and _interactive())
    with StopOnSignal() as stop:
        stop.terminal = terminal
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", preexec_fn=agent_child)
        stop.attach(proc)
        agent = AgentLog(agent_log)
        try:
            pumps = [threading.Thread(target=_pump, args=(proc.stdout, [out_sink] if echo else [], None, terminal,
                                                          None, folders[0]), daemon=True),
                     threading.Thread(target=_pump, args=(proc.stderr, [sys.stderr] if echo else [],
                                                          stop.agent_noticed, terminal, [agent], folders[1],
                                                          entry_point_named(cfg.shown_script(), torchrun.BOOTSTRAP)),
                                      daemon=True)]
            for t in pumps:
                t.start()
            dog = _watchdog(cfg, proc, logs, env, terminal, echo, stdout_to_stderr)
            stop.watch(dog)
            dog.start()
            try:
                proc.wait()
                stop.wait_stopped()  # torchrun gone; its workers too, or SIGKILLed by now
            finally:
                if dog:
                    dog.stop()
                terminal.status(None)  # the verdict follows: no progress line under it
                for t in pumps:
                    t.join(5)
        finally:
            agent.close()
        records.clean_temps(Path(cfg.run_dir), stale_s=0, run=cfg.run_id)  # this job is over: no writer of its temp files is left
        doc = build_document(cfg, proc.returncode, agent.text(), logs,
                             time.time() - started, dog.report_before(stop.at), interrupted=stop.signum)
        doc["preflight"] = preflight
        doc["collectives"] = dog.collectives()
        doc["stragglers"] = dog.stragglers.to_json()
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
            blame_the_disk(doc, problems, Path(cfg.run_dir))
    return doc
