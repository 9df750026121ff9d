"""Stacks as text -> frames and the wait they show: faulthandler's dumps (the worker server's `dump_traceback`,
SIGUSR1's stacks/rank<R>.txt, the SIGTERM stack stacks/sigterm/rank<R>.txt, a "Fatal Python error" dump) and
Python tracebacks. The one parser of a frame line and the one reading of "which torch call is it inside"."""
from __future__ import annotations

import re

from ...numbers import parse_int
from .library_waits import library_wait, outside_handlers
from .model import DEFAULT_GROUP, Call, Frame, Wait, WaitKind, user_frame

# faulthandler writes `File "f", line N in fn`; tracebacks `File "f", line N, in fn`.
FRAME = re.compile(r'File "(?P<file>[^"\n]{1,4096})", line (?P<line>\d{1,9}),? in (?P<func>[^\s]{1,512})')
C10D = "torch/distributed/distributed_c10d.py"
P2P = {"send": WaitKind.SEND, "recv": WaitKind.RECV}
INIT = ("init_process_group", "_store_based_barrier", "_new_process_group_helper", "rendezvous")
# A store's wait: TCPStore.wait/get inside torch's own code (the store-based barrier, a user's store.wait).
STORE_FUNCS = ("wait", "get", "_store_based_barrier")
# torch's store error: "wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2" (the key's last part is the
# rank whose address the waiter needs: the rank that never arrived).
STORE_KEYS = re.compile(r"keys?: (?P<keys>[^\s,\]\)]{1,512}(?:, ?[^\s,\]\)]{1,512}){0,63})")


def frames_of(block: str) -> tuple[Frame, ...]:
    """Every frame of one stack, in the text's order."""
    out = []
    for m in FRAME.finditer(block or ""):
        line = parse_int(m["line"], lo=0, hi=10**9)
        if line is not None:
            out.append(Frame(m["file"], line, m["func"]))
    return tuple(out)


def main_thread(stacks: str | None) -> tuple[Frame, ...]:
    """The frames of the thread that runs the script, innermost first: faulthandler lists the dumping thread
    first (the worker server's C++ thread: no Python frame); the script's thread has the `<module>` frame."""
    if not stacks:
        return ()
    best: tuple[Frame, ...] = ()
    for block in re.split(r"\n[ \t]*\n", stacks.strip()):
        frames = frames_of(block)
        if any(f.function == "<module>" for f in frames):
            return frames
        if len(frames) > len(best):
            best = frames
    return best


def traceback_frames(tb: str | None) -> tuple[Frame, ...]:
    """A Python traceback's frames, innermost first (a traceback lists the innermost last)."""
    return tuple(reversed(frames_of(tb or "")))


def has_script(frames: tuple[Frame, ...]) -> bool:
    """The stack is still in the script (its `<module>` frame): a rank already exiting says nothing there."""
    return any(f.function == "<module>" for f in frames)


def wait_of(frames: tuple[Frame, ...]) -> Wait:
    """What the stack shows the rank waiting in: the outermost torch.distributed call (the one the user made),
    its peer from py-spy's locals when it has them; else a library's wait (``library_waits``: DDP's Reducer
    inside backward, FSDP2's hooks, a pipelining schedule's P2POp batch, ...); nothing when the stack is in the
    user's own code. A library's wait names the library (``Wait.library``) beside the torch call."""
    if not frames:
        return Wait(WaitKind.UNKNOWN)
    frames = outside_handlers(frames)  # a signal handler's own collective is not where the rank stood
    if not frames:
        return Wait(WaitKind.UNKNOWN)
    lib = library_wait(frames)
    c10d = [f for f in frames if f.file.endswith(C10D) or f.file.endswith(C10D.replace("/", "\\"))]
    if c10d and not _inside_user(frames, c10d[-1]):
        c10d = []  # torch's call is further out than the user's innermost frame: the user's code runs inside it
    if not c10d:
        if lib is None:
            return Wait(WaitKind.NONE, site=user_frame(frames))
        site = user_frame(frames)
        return Wait(lib.kind, call=Call(DEFAULT_GROUP, lib.op, site=site), site=site, library=lib)
    outer = c10d[-1]  # innermost first: the last torch frame is the call the user (or a library) made
    site = _caller(frames, outer)
    if any(f.function in INIT for f in c10d):
        return Wait(WaitKind.INIT, call=Call(DEFAULT_GROUP, "init_process_group", site=site), site=site, library=lib)
    if outer.function in P2P:
        peer_name = "dst" if outer.function == "send" else "src"
        peer = parse_int(outer.local(peer_name) or outer.local("group_" + peer_name) or "", lo=0, hi=1 << 20)
        call = Call(DEFAULT_GROUP, outer.function, peer=peer, site=site)
        return Wait(P2P[outer.function], call=call, peer=peer, site=site, library=lib)
    return Wait(WaitKind.COLLECTIVE, call=Call(DEFAULT_GROUP, outer.function, site=site), site=site, library=lib)


def _inside_user(frames: tuple[Frame, ...], outer: Frame) -> bool:
    """torch's frame is inside (called from) the user's innermost frame, not a library's caller of user code
    (a user callback that torch's code runs, e.g. init_process_group's rendezvous handler)."""
    first_user = next((i for i, f in enumerate(frames) if not f.library), len(frames))
    return frames.index(outer) < first_user


def _caller(frames: tuple[Frame, ...], outer: Frame) -> Frame | None:
    """The user's frame that called ``outer`` (the next one out that is not a library's)."""
    after = frames[frames.index(outer) + 1:]
    return user_frame(after)


def store_keys(text: str | None) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
    """(the keys a store wait timed out on, the ranks they name) from torch's store error; ranks None when the
    keys end in no rank number."""
    m = STORE_KEYS.search(text or "")
    if not m:
        return (), None
    keys = tuple(k.strip() for k in m["keys"].split(",") if k.strip())
    ranks = []
    for k in keys:
        last = k.rstrip("/").rsplit("/", 1)[-1]
        r = parse_int(last, lo=0, hi=1 << 20)
        if r is not None:
            ranks.append(r)
    return keys, (tuple(sorted(set(ranks))) if ranks else None)
