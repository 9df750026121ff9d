"""The worker bootstrap: what run-trainer adds to every process it starts, around an unmodified script.

`python -m ddpdoctor.launch.bootstrap script.py args...` or `... -m package.module args...` runs the
script as plain `python script.py` would (sys.argv, sys.path[0], `__main__`, exit codes, signals), plus:

- torch's error file for an uncaught exception, exactly as `@record` writes it (the post-mortem reads it);
- SIGUSR1 -> every thread's Python stack into DDPDOCTOR_STACKS_DIR/rank<R>.txt (faulthandler, not chained:
  a script without a handler would otherwise die of the signal); the launcher's SIGTERM -> the same into
  DDPDOCTOR_STACKS_DIR/sigterm/rank<R>.txt, then the flight record, then the process ends of SIGTERM;
- local rank 0: this node's node rank (torchrun's GROUP_RANK, decided at the rendezvous) into
  DDPDOCTOR_NODE_FILE, so run-trainer knows whether it is node rank 0, the node that prints the full result;
- Python 3.12+: the sizes of the rank's send/recv and all-to-all calls into DDPDOCTOR_CALLS_DIR/rank<R>.calls
  (size_watch: sys.monitoring, no function replaced), for who sent a message of the wrong size;
- torch's worker server on DDPDOCTOR_WORKER_SOCKET ({rank} replaced): its C++ thread answers while the
  main thread is blocked inside a collective: stacks (`dump_traceback`), the flight recorder
  (`fr_trace_json`).

Nothing here may end, slow or change the user's process: every addition is best effort and silent.
"""
from __future__ import annotations

import os
import sys

from . import error_file

USAGE = "usage: python -m ddpdoctor.launch.bootstrap (SCRIPT.py | -m MODULE) [ARGS...]"


def parse(argv: list[str]) -> tuple[str, str, list[str]]:
    """('path', script, args) or ('module', name, args)."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if len(argv) >= 2 and argv[0] == "-m":
        return "module", argv[1], argv[2:]
    if argv and not argv[0].startswith("-"):
        return "path", argv[0], argv[1:]
    raise SystemExit(USAGE)


def rank() -> str:
    return os.environ.get("RANK", "0")


def install_stack_dump() -> None:
    import faulthandler
    import signal

    stacks = os.environ.get("DDPDOCTOR_STACKS_DIR")
    if not stacks:
        return
    try:
        os.makedirs(stacks, exist_ok=True)
        out = open(os.path.join(stacks, f"rank{rank()}.txt"), "a")  # noqa: SIM115 - for the process lifetime
        faulthandler.register(signal.SIGUSR1, file=out, all_threads=True, chain=False)
        _KEEP.append(out)
    except (OSError, ValueError, RuntimeError):
        pass


def record_node_rank() -> None:
    """{"node_rank", "nnodes", "master_addr"} of this attempt into DDPDOCTOR_NODE_FILE (local rank 0 only;
    a restart's rendezvous may change it, so every attempt rewrites it)."""
    path = os.environ.get("DDPDOCTOR_NODE_FILE")
    if not path or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        import json

        record = {"node_rank": int(os.environ["GROUP_RANK"]), "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", "0")),
                  "master_addr": os.environ.get("MASTER_ADDR")}
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except (OSError, ValueError, KeyError):
        pass
    finally:
        if os.path.exists(tmp):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def start_worker_server() -> None:
    """torch's own worker server, as control_plane.worker_main starts it. Its handlers are C++ only on
    purpose: a Python handler needs the GIL on the server's thread, and one caught by interpreter shutdown
    aborts the process ("FATAL: exception not rethrown"), turning a script's exit code 1 into SIGABRT."""
    template = os.environ.get("DDPDOCTOR_WORKER_SOCKET")
    if not template:
        return
    try:
        import atexit

        from torch._C._distributed_c10d import _WorkerServer

        path = template.replace("{rank}", rank())
        if os.path.exists(path):
            os.unlink(path)  # a previous attempt's, after a restart
        server = _WorkerServer(path)
        _KEEP.append(server)  # at once: a server dropped now would stop in its destructor, and that can block
        try:
            inode = os.stat(path).st_ino
        except OSError:
            inode = None
        # Stopped before the interpreter tears down, as worker_main does, without ever blocking the exit
        from .server_stop import stop_worker_server

        atexit.register(stop_worker_server, server, path, inode, os.getpid())
        atexit.register(dump_flight_record)  # runs first (atexit is last-in, first-out)
    except Exception:  # noqa: BLE001 - forensics must never stop the job
        pass


def watch_call_sizes() -> None:
    """Python 3.12+: who sent what size, kept where gloo's abort of the receiver leaves it (size_watch)."""
    folder = os.environ.get("DDPDOCTOR_CALLS_DIR")
    if not folder or sys.version_info < (3, 12):
        return
    try:
        from .size_watch import start

        start(folder, rank())
    except Exception:  # noqa: BLE001 - forensics must never stop the job
        pass


def dump_flight_record() -> None:
    """At a normal exit: the whole flight record into DDPDOCTOR_FR_DIR/rank<R>.json, so the job's summary
    counts every collective (the watchdog's last poll is up to a second old, and the server is gone)."""
    out_dir = os.environ.get("DDPDOCTOR_FR_DIR")
    if not out_dir or forked():  # a forked child's exit is not the rank's: its record stays the rank's own
        return
    try:
        import torch._C._distributed_c10d as c10d

        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"rank{rank()}.json")
        tmp = f"{path}.{os.getpid()}.tmp"
        from ..forensics.evidence.fr_backends import dump_every_instance

        raw = dump_every_instance(c10d)
        if _ENDED:  # the script's own end (sys.exit, or its last line): "ended" beside torch's own fields
            import json

            try:
                raw = json.dumps({**json.loads(raw), "ended": _ENDED}).encode()
            except (ValueError, TypeError):
                pass
        try:
            with open(tmp, "wb") as fh:
                fh.write(raw)
            os.replace(tmp, path)
        finally:  # a full disk: no half-written temp file left behind
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception:  # noqa: BLE001
        pass


def install_dump_on_sigterm() -> None:
    """SIGTERM, how torchrun stops the other ranks once one failed -> this rank's flight record is written
    first (the post-mortem then compares every rank's last collectives), and the process still ends of
    SIGTERM (exit -15), as without the bootstrap. Python runs a signal handler only when the main thread runs
    Python again, which a rank blocked inside a collective does not: the handler's C part also writes the
    signal to a wakeup fd, and a helper thread acts on it. A script that installs its own SIGTERM handler
    replaces this one, and the helper then ignores the signal; forked children (DataLoader workers) drop it."""
    import signal
    import socket
    import threading

    if not os.environ.get("DDPDOCTOR_FR_DIR") or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    try:
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        os.register_at_fork(after_in_child=_forget_sigterm)
        _KEEP.extend([reader, writer])
        threading.Thread(target=_watch_sigterm, args=(reader,), name="ddpdoctor-sigterm", daemon=True).start()
    except (OSError, ValueError, RuntimeError):
        pass


def _on_sigterm(signum, frame) -> None:  # the main thread, when it runs Python again
    _die_of_sigterm()


def _watch_sigterm(reader) -> None:
    import signal

    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _die_of_sigterm()


def _die_of_sigterm() -> None:
    import signal

    if error_file.RECORDING.held_here():
        error_file.RECORDING.pending = True  # the main thread writes its error file: it stops once that is done
        return
    if not _TERM_ONCE.acquire(blocking=False):
        return  # the other path is at it
    error_file.RECORDING.wait_clear(error_file.GRACE_S)  # the rank's own exception is being written: let it land
    dump_stack_at_sigterm()
    dump_flight_record()
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(signal.SIGTERM, None)  # SIG_DFL, from any thread (signal.signal wants the main one)
    except (OSError, AttributeError):
        os._exit(128 + signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)


def dump_stack_at_sigterm() -> None:
    """Where this rank was when the launcher stopped it: every thread's stack into
    DDPDOCTOR_STACKS_DIR/sigterm/rank<R>.txt. A rank stopped before it raised anything leaves no traceback, and
    gloo's flight record (JSON) carries no call sites: this names the line of the odd call of a desync, or the
    place a missing rank was stuck in, for the post-mortem. Overwritten: only the last stop matters."""
    stacks = os.environ.get("DDPDOCTOR_STACKS_DIR")
    if not stacks:
        return
    try:
        import faulthandler

        folder = os.path.join(stacks, "sigterm")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank{rank()}.txt"), "w") as fh:
            faulthandler.dump_traceback(file=fh, all_threads=True)
    except Exception:  # noqa: BLE001 - a full disk must not keep the rank from ending
        pass


def _forget_sigterm() -> None:
    import signal

    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (OSError, ValueError):
        pass


def run(kind: str, target: str, args: list[str]) -> None:
    if kind == "path":
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))  # as `python script.py`: its directory first
        if target.endswith(".py"):
            run_source(target)
        else:
            import runpy

            runpy.run_path(target, run_name="__main__")  # a directory or zip with __main__.py
    else:
        import runpy

        sys.argv = [target, *args]  # run_module puts the module's file in argv[0], as `python -m` does
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)


def run_source(target: str) -> None:
    """What the interpreter does for `python script.py`: a fresh `__main__` module, sys.argv[0] as given,
    `__file__` absolute. (runpy.run_path would rewrite sys.argv[0] and only lend the module while it runs.)"""
    import types

    path = os.path.abspath(target)
    with open(path, "rb") as fh:
        code = compile(fh.read(), path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=path, __cached__=None, __spec__=None, __loader__=None,
                           __builtins__=__builtins__)
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def note_end(exc: SystemExit | None) -> None:
    """The script ended of its own (its last line, or sys.exit): the exit code and where sys.exit was called go
    into this rank's flight record at exit. A rank that ends while the others still call collectives leaves
    them waiting; the post-mortem then says it ended, rather than look for it in a stack it no longer has."""
    code = 0 if exc is None or exc.code is None else exc.code if isinstance(exc.code, int) else 1
    where = None
    tb = exc.__traceback__ if exc is not None else None
    while tb is not None:  # the innermost frame of the script's own code: the sys.exit call
        if not _ours(tb.tb_frame.f_code.co_filename):
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    _ENDED.update(exit_code=code, where=where)
    # The record at exit now, not only at the very end: the script's own exit handlers (registered after the
    # bootstrap's, so run before it: a logger's upload) may take seconds, and the watchdog knows the job is
    # ending, not hung, by every rank's record. The atexit one still follows, with what they added. A script
    # that never loaded torch's c10d has no record (and importing torch now would only slow its exit).
    if "torch._C._distributed_c10d" in sys.modules:
        dump_flight_record()


def record_and_exit(exc: BaseException) -> None:
    """What `@record` and the interpreter do for an uncaught exception: the error file, the traceback on
    stderr (through sys.excepthook), exit code 1; both without this module's frames. A child the script forked
    writes no error file: the rank's is the rank's own failure (the watchdog takes it as the rank failing)."""
    tb = exc.__traceback__
    while tb is not None and _ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    exc = exc.with_traceback(tb or exc.__traceback__)
    if forked():
        sys.excepthook(type(exc), exc, exc.__traceback__)
        sys.stderr.flush()
        sys.exit(1)
    error_file.RECORDING.set()
    try:
        error_file.write(exc)
    except Exception:  # noqa: BLE001
        pass
    finally:
        error_file.RECORDING.clear()
    if error_file.RECORDING.pending:
        _die_of_sigterm()
    sys.excepthook(type(exc), exc, exc.__traceback__)
    sys.stderr.flush()
    sys.exit(1)


def _ours(filename: str) -> bool:
    return filename in (__file__, getattr(sys.modules.get("runpy"), "__file__", "")) or filename.endswith(
        ("runpy.py", "<frozen runpy>"))


_KEEP: list = []  # the stack file and the server live as long as the process
_PID: list[int] = []  # the rank's own process (main), not a child forked from it
_ENDED: dict = {}  # how the script ended of its own (note_end), for the flight record at exit


def forked() -> bool:
    """This process is a child the script forked, not the rank (its exit handlers are inherited)."""
    return bool(_PID) and os.getpid() != _PID[0]


def _term_lock():
    import threading

    return threading.Lock()


_TERM_ONCE = _term_lock()


def die_with_the_agent() -> None:
    """Linux: SIGKILL this rank when torchrun's agent dies, even by SIGKILL (an orphaned rank blocked in a
    collective would wait forever for peers that are gone). torchrun starts workers from its main thread,
    whose end is what PR_SET_PDEATHSIG watches. Not applied when the agent is already gone (ppid 1)."""
    from ..lifetime import die_with_parent

    parent = os.getppid()
    if not die_with_parent():  # not Linux: run-trainer's own clean-up still stops the job
        return
    if os.getppid() != parent:  # the agent died before the call took effect
        os._exit(137)


def main(argv: list[str] | None = None) -> None:
    kind, target, args = parse(sys.argv[1:] if argv is None else argv)
    if kind == "path" and not os.path.isfile(target):
        print(f"python: can't open file {target!r}: [Errno 2] No such file or directory", file=sys.stderr)
        raise SystemExit(2)
    _PID.append(os.getpid())
    from ..lifetime import restore_checkpoint_signals

    die_with_the_agent()
    restore_checkpoint_signals()  # what run-trainer's agent ignores, the rank meets as under plain torchrun
    record_node_rank()
    install_stack_dump()
    start_worker_server()
    watch_call_sizes()
    install_dump_on_sigterm()
    try:
        run(kind, target, args)
    except SystemExit as exc:  # passes as under plain python, noted first
        note_end(exc)
        raise
    except Exception as exc:  # noqa: BLE001 - KeyboardInterrupt passes as under plain python
        record_and_exit(exc)
    else:
        note_end(None)


if __name__ == "__main__":
    main()
