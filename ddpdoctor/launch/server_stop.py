"""The end of a rank's worker server (torch's, which the bootstrap starts) at the script's exit, never blocking
that exit: registered with atexit by bootstrap.start_worker_server."""
from __future__ import annotations

import os
import sys

SERVER_DRAIN_S = 0.5  # for a stack request already taken to finish before the server stops
SERVER_STOP_LIMIT_S = 10  # shutdown() blocked this long is blocked for good: the rank ends (exit 1), not hangs


def stop_worker_server(server, path: str, inode: int | None, pid: int) -> None:
    """The worker server's end, at the script's exit, without ever blocking the exit. torch's `dump_traceback`
    handler takes the GIL on the server's thread, and the server's shutdown() joins that thread while the
    caller holds the GIL: a stack request in flight then blocks the rank at exit forever (a healthy job's rank,
    seen under load). So no new request can come (its socket path removed: a client's connect fails), and one
    already taken finishes while this thread sleeps (the GIL released), before shutdown() joins the server.
    A client that connected before the path went and asks only after the sleep could still block it: then
    faulthandler's own thread, which needs no GIL, ends the rank after SERVER_STOP_LIMIT_S with exit code 1 and
    every thread's stack on stderr ("Timeout (0:00:10)!"), rather than leave it hanging. (This replaces a
    faulthandler timer the script itself set, from its exit on.)
    A forked child that exits normally leaves its parent's server alone (its thread is not in the child)."""
    import faulthandler
    import time

    if os.getpid() != pid:
        return
    try:
        if inode is not None and os.stat(path).st_ino == inode:  # its own socket, not a restarted rank's
            os.unlink(path)
    except OSError:
        pass
    time.sleep(SERVER_DRAIN_S)
    try:
        faulthandler.dump_traceback_later(SERVER_STOP_LIMIT_S, exit=True, file=sys.stderr)
    except (ValueError, RuntimeError, OSError, AttributeError):  # stderr closed by the script: no bound
        pass
    server.shutdown()
    faulthandler.cancel_dump_traceback_later()
