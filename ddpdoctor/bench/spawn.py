"""Starting the benchmark's ranks: in this process under a launcher, or through torch's elastic launcher.

Under torchrun/srun (RANK and WORLD_SIZE in the environment) this process is one rank. Otherwise
``ddpdoctor nccl-bench`` starts ``nproc`` local ranks with torch.distributed.launcher.api.elastic_launch
(torchrun's own machinery: c10d rendezvous, worker monitoring, error files), across nodes when given
``--master/--nnodes``. A rank that dies is named from torch's ChildFailedError (rank, host, exit code).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, fields

from ..errors import DdpdoctorError
from ..exitcodes import ExitCode
from ..cluster.local import free_port
from .harness import PROGRESS_ENV
from .worker import CONFIG_ENV, main as worker_main


class BenchFailed(DdpdoctorError):
    exit_code = ExitCode.FAIL


@dataclass
class LaunchPlan:
    nproc: int
    nnodes: int = 1
    master: str | None = None  # HOST:PORT of the c10d rendezvous; default: this machine, a free port
    node_rank: int | None = None
    rdzv_timeout_s: int = 120


def under_launcher(env=os.environ) -> bool:
    return "RANK" in env and "WORLD_SIZE" in env


def run_in_this_process(cfg: dict) -> None:
    worker_main(cfg)


def start_ranks(cfg: dict, plan: LaunchPlan) -> None:
    """Start the ranks through torch's launcher; the config travels as a JSON file named in the env.

    A stop signal is obeyed at any moment: from the end of torch's import (held back until then) to the last
    rank's end, it stops the ranks (torch's agent, or nothing yet started), removes the run's folder and ends
    the command with the signal's code; the clean-up itself runs with the stop signals held, so a second
    signal cannot cut it short (it is obeyed right after)."""
    from ..lifetime import import_held

    import_held("torch.distributed.launcher.api")  # loads torch: a SIGTERM meanwhile waits until it is done
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    handlers = _signal_handlers()
    stopped_by, done, beats, waker, run_dir = None, threading.Event(), [], None, None
    PENDING.clear()
    try:
        try:
            run_dir = tempfile.mkdtemp(prefix="ddpdoctor-bench-")
            progress = os.path.join(run_dir, "progress")
            lc = _launch_config(cfg, plan, run_dir, progress)
            if handlers:
                _handle_stops_between_spawns()
            waker = threading.Thread(target=_wake_stopped_ranks, args=(done, progress, beats, _resend_a_lost_stop),
                                     name="ddpdoctor-bench-wake", daemon=True)
            waker.start()
            elastic_launch(lc, _entry)()
        except ChildFailedError as exc:
            behind = ranks_behind(progress, beats or None)
            raise BenchFailed(behind + describe_failure(exc) if behind else describe_failure(exc)) from None
    except SignalException as exc:  # the agent stopped the ranks (or none had started): end as the signal says
        from ..lifetime import stop_signal_of

        stopped_by = stop_signal_of(exc)
    finally:
        _clean_up(handlers, run_dir, done, waker)
    if stopped_by is None and PENDING:  # a stop whose exception torch's code swallowed: still obeyed, at the end
        stopped_by = PENDING["signal"]
    if stopped_by == signal.SIGINT:
        raise KeyboardInterrupt
    if stopped_by is not None:
        signal.raise_signal(stopped_by)  # the command's own handler (SIGTERM: exit 143), else the default


def _launch_config(cfg: dict, plan: LaunchPlan, run_dir: str, progress: str):
    """torch's LaunchConfig of this run; the config file, the progress folder and their variables made."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    os.makedirs(progress, exist_ok=True)
    endpoint = plan.master or f"127.0.0.1:{free_port()}"
    os.environ[CONFIG_ENV] = cfg_path
    os.environ[PROGRESS_ENV] = progress
    # A stop ends the ranks with SIGTERM, at once: multiprocessing's resource tracker (started with the first
    # rank, this environment its own) then frees the semaphores they held and said so after the command's last
    # line ("There appear to be 11 leaked semaphore objects"). Freeing them is its job; the warning is noise.
    quiet = "ignore:resource_tracker:UserWarning"
    warnings = os.environ.get("PYTHONWARNINGS", "")
    if quiet not in warnings:
        os.environ["PYTHONWARNINGS"] = f"{warnings},{quiet}" if warnings else quiet
    # the stop signals are this module's handler's (_handle_stops_between_spawns); torch >= 2.9 sets its
    # TORCHELASTIC_SIGNALS_TO_HANDLE from this field, over whatever the environment said
    own = {"signals_to_handle": "SIGQUIT"} if "signals_to_handle" in {f.name for f in fields(LaunchConfig)} else {}
    return LaunchConfig(
        **own, min_nodes=plan.nnodes, max_nodes=plan.nnodes, nproc_per_node=plan.nproc,
        run_id=f"ddpdoctor-bench-{uuid.uuid5(uuid.NAMESPACE_DNS, endpoint).hex[:8]}",
        rdzv_backend="c10d", rdzv_endpoint=endpoint, rdzv_timeout=plan.rdzv_timeout_s,
        rdzv_configs={"rank": plan.node_rank} if plan.node_rank is not None else {},
        max_restarts=0, monitor_interval=0.1, start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=os.path.join(run_dir, "logs")),
    )


def _clean_up(handlers: dict, run_dir: str | None, done: threading.Event, waker: threading.Thread | None) -> None:
    """After the launch, however it ended: the command's handlers back (torch's agent leaves its own, raising
    SignalException, installed), the wake thread stopped before its folder goes, the run's folder removed (the
    config, the progress notes and torch's per-rank logs have been read: nothing outlives the command). The stop
    signals are held meanwhile: one that comes now is obeyed once this is done."""
    on_main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if on_main else None
    try:
        done.set()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.environ.pop(SIGNALS_ENV, None)
        if waker is not None:
            waker.join(timeout=5.0)  # it wakes every 0.5 s; a psutil call never blocks for long
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _wake_stopped_ranks(done: threading.Event, progress: str, beats: list, tick=lambda done: None) -> None:
    """Once the ranks are being stopped (one of them ended: it failed, or a signal came), a rank frozen with
    SIGSTOP cannot act on the signal torch sends it, and torch waits 30 s before its SIGKILL: SIGCONT lets it
    end now. The ranks' heartbeats are kept first (``beats``): a woken rank may beat once more before it ends.
    The ranks are this process's children (start_method spawn). Quiet whatever happens: a helper of the
    command, it never prints (its folder removed under it, a child gone between two looks)."""
    import psutil

    me, seen = psutil.Process(), set()
    while not done.wait(0.5):
        tick(done)
        try:
            kids = {k.pid: k for k in me.children()}
            live = {pid for pid, k in kids.items() if k.status() != psutil.STATUS_ZOMBIE}
            if seen - live:  # a rank we saw running has ended: the others are being stopped
                beats[:] = beats or _read_notes(progress, ".beat")
                for k in kids.values():
                    if k.pid in live and k.status() == psutil.STATUS_STOPPED:
                        k.send_signal(signal.SIGCONT)
            seen |= live
        except (psutil.Error, OSError):
            continue


def _signal_handlers() -> dict:
    """The handlers torch's agent replaces (TORCHELASTIC_SIGNALS_TO_HANDLE), to put back when it is done:
    left in place, Ctrl-C and SIGTERM were torch's SignalException, "internal error", exit 4."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}


SIGNALS_ENV = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # the signals torch's agent turns into its SignalException
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _handle_stops_between_spawns() -> None:
    """SIGTERM, SIGINT and SIGHUP become torch's SignalException, as torch's own handler makes them (the agent
    then stops the ranks), but never while the main thread is starting a rank: raised between the rank's exec
    and the write of its start-up data (multiprocessing's spawn), the rank reads nothing and prints an EOFError
    traceback under the command's one line. There the signal is sent again a moment later. torch's agent is told
    (its env var) to leave these signals to this handler; SIGQUIT stays its own."""
    os.environ[SIGNALS_ENV] = "SIGQUIT"
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_the_ranks)


def _stop_the_ranks(signum: int, frame) -> None:
    """torch's agent stops the ranks with the signal its SignalException carries: SIGTERM, whichever came. A
    rank killed by SIGTERM ends at once and silently; SIGINT made each rank still importing torch print a
    KeyboardInterrupt traceback and could keep one in a collective until torch's 30 s grace ran out. The
    command still ends as the signal that came says (Ctrl-C: 130)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if PENDING and _stopping(frame):
        return  # the agent is already stopping the ranks for the first one: let it finish
    if _starting_a_rank(frame) or _importing(frame):  # a half-loaded module: "cannot load module more than once"
        threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
        return
    PENDING.setdefault("signal", signal.Signals(signum))
    PENDING["raised"] = time.monotonic()
    exc = SignalException(f"Process {os.getpid()} got signal: {signal.Signals(signum)}", sigval=signal.SIGTERM)
    exc.received_signal = signal.Signals(signum)  # what the command ends with (lifetime.stop_signal_of)
    raise exc


PENDING: dict = {}  # the stop signal raised in this launch ("signal") and when it was last raised ("raised")
RESEND_S = 1.0  # a stop raised this long ago while the launch still runs was swallowed by torch's code


def _resend_a_lost_stop(done: threading.Event) -> None:
    """From the wake thread: a stop raised RESEND_S ago while the launch still runs was swallowed somewhere in
    torch's agent (an ``except Exception`` on the way: the sweep ran on), so it is sent again."""
    if PENDING and not done.is_set() and time.monotonic() - PENDING.get("raised", 0.0) >= RESEND_S:
        PENDING["raised"] = time.monotonic()
        os.kill(os.getpid(), PENDING["signal"])


def _in_frames(frame, test) -> bool:
    for _ in range(200):
        if frame is None:
            return False
        if test(frame.f_code.co_name, frame.f_code.co_filename.replace("\\", "/")):
            return True
        frame = frame.f_back
    return False


def _importing(frame) -> bool:
    """The main thread is importing a module (torch loads some lazily during the launch)."""
    return _in_frames(frame, lambda name, path: path.startswith("<frozen importlib._bootstrap"))


def _stopping(frame) -> bool:
    """The main thread is in torch's agent stopping the ranks (its shutdown or a context's close), or in this
    module's clean-up after the launch."""
    return _in_frames(frame, lambda name, path: (name in ("_shutdown", "_close", "close", "_stop_workers")
                                                 and "/torch/distributed/elastic/" in path)
                      or (name == "_clean_up" and path.endswith("/bench/spawn.py")))


def _starting_a_rank(frame) -> bool:
    """The main thread is inside multiprocessing's Popen._launch (the spawn of a rank), at most 200 frames up."""
    for _ in range(200):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "_launch" and "/multiprocessing/popen_" in code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


def _entry() -> int:
    return worker_main(None)


STALE_S = 3.0  # a rank whose heartbeat stopped this long before the others' did was frozen, not waiting


def _read_notes(progress_dir: str, suffix: str) -> list[dict]:
    notes = []
    try:
        names = os.listdir(progress_dir)
    except OSError:  # removed at the command's end (the wake thread may look once more)
        return []
    for name in names:
        if not name.endswith(suffix):
            continue
        try:
            with open(os.path.join(progress_dir, name)) as fh:
                notes.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return notes


def ranks_behind(progress_dir: str, beats: list[dict] | None = None) -> str:
    """'rank 1 on node7 stopped answering ...; ' when one rank's last note lags (it never entered the
    collective the others entered), or its heartbeat stopped long before theirs (frozen inside it: SIGSTOP,
    Ctrl-Z; the others then time out, and torch's first failure is one of the ranks that waited)."""
    notes = _read_notes(progress_dir, ".json")
    if len(notes) < 2:
        return ""
    furthest = max(n["step"] for n in notes)
    ahead = next(n for n in notes if n["step"] == furthest)
    lagging = sorted((n for n in notes if n["step"] < furthest), key=lambda n: n["rank"])
    if lagging and len(lagging) < len(notes):
        who = ", ".join(f"rank {n['rank']} on {n['host']}" for n in lagging)
        return (f"{who} stopped answering: the others entered {ahead['op']} {ahead['size']} B and waited for it "
                f"until the timeout; ")
    beats = _read_notes(progress_dir, ".beat") if beats is None else beats
    last = max((b["t"] for b in beats), default=0.0)
    frozen = sorted((b for b in beats if last - b["t"] > STALE_S), key=lambda b: b["rank"])
    if not frozen or len(frozen) == len(beats):
        return ""
    who = ", ".join(f"rank {b['rank']} on {b['host']}" for b in frozen)
    quiet = max(last - b["t"] for b in frozen)
    return (f"{who} stopped answering during {ahead['op']} {ahead['size']} B: no sign of life for {quiet:.0f} s "
            f"while the others waited for it (process frozen: stopped with SIGSTOP or Ctrl-Z, or stuck in the "
            f"kernel or driver); ")


def describe_failure(exc) -> str:
    """The first rank that failed, from torch's own failure record: rank, host, exit code or signal, error."""
    rank, failure = exc.get_first_failure()
    code = failure.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    if failure.signal_name() not in ("", "<N/A>") and code is not None and code < 0:
        how = f"was killed by {failure.signal_name()}"
    inner = failure.message
    while isinstance(inner, dict):  # an error file's {"message": {"message": "...", "extraInfo": ...}}
        inner = inner.get("message", "")
    lines = str(inner or "").splitlines()
    message = lines[0] if lines else ""
    host = getattr(failure, "hostname", None) or socket.gethostname()
    others = sorted(r for r in exc.failures if r != rank)
    tail = f"; ranks {', '.join(map(str, others))} stopped after it" if others else ""
    return f"rank {rank} on {host} {how}" + (f": {message}" if message else "") + tail
