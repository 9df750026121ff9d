"""The py-spy evidence source: running `py-spy dump --locals` on a live rank from outside (no signal to it) and
parsing its text (threads, frames with their arguments and locals) into the evidence model's RankState: frames, and
what torch's frames say the rank waits in (the collective, send/recv with its peer from dst/src, init).

py-spy needs ptrace rights on the process (root or CAP_SYS_PTRACE, or the same user with
kernel.yama.ptrace_scope 0); a refusal is a `DumpFailure.PERMISSION` with the command that fixes it.
"""
from __future__ import annotations

import enum
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from ...numbers import parse_int
from . import model
from .model import RankState
from .stacks import C10D, wait_of

TIMEOUT_S = 10.0
MAX_OUTPUT = 4 << 20  # a dump longer than this is cut: a rank's stacks with locals are a few KB

_THREAD = re.compile(r'^Thread (?P<tid>\S+) \((?P<state>[^)]*)\)(?::\s*"(?P<name>[^"]*)")?\s*$')
_FRAME = re.compile(r"^    (?P<func>\S.*?) \((?P<file>.+?)(?::(?P<line>\d+))?\)\s*$")
_VAR = re.compile(r"^            (?P<name>[^:\s][^:]*): (?P<value>.*)$")
_PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<cmd>.*)$")


class DumpFailure(enum.Enum):
    PERMISSION = "permission"  # ptrace refused
    GONE = "gone"  # the process ended
    TIMEOUT = "timeout"
    NOT_PYTHON = "not_python"
    NO_PYSPY = "no_py_spy"
    OTHER = "other"


@dataclass
class Frame:
    function: str
    file: str
    line: int | None
    arguments: dict[str, str] = field(default_factory=dict)
    locals: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass
class Thread:
    tid: str
    state: str  # py-spy's: "idle", "active", "active+gil"
    name: str | None
    frames: list[Frame]  # innermost first, as py-spy prints them


@dataclass
class Dump:
    """One py-spy dump of one process, or why there is none (``failure`` with py-spy's own line)."""
    pid: int
    threads: list[Thread] = field(default_factory=list)
    failure: DumpFailure | None = None
    error: str = ""
    thread: str | None = None  # the name (its start) of the thread that runs the rank's training, where a launcher
    #                            runs it in a thread of its own (Ray Train's TrainingThread(...)): set by the reader

    def main_thread(self) -> Thread | None:
        """The thread that runs the rank's training: ``thread``'s where it is set and alive, else the script's:
        MainThread by name, else the one whose outermost frame is <module>."""
        if self.thread:
            training = [t for t in self.threads if t.name and t.name.startswith(self.thread)]
            if training:
                return training[0]
        named = [t for t in self.threads if t.name == "MainThread"]
        if named:
            return named[0]
        moduled = [t for t in self.threads if t.frames and t.frames[-1].function == "<module>"]
        return (moduled or self.threads or [None])[0]


def binary() -> str | None:
    """py-spy on PATH, else beside this interpreter (a venv's bin/, the scripts dir of the wheel's install), else
    where pip put the wheel's binary (a venv that reads a parent environment's packages has it there)."""
    found = shutil.which("py-spy")
    if found:
        return found
    name = "py-spy.exe" if os.name == "nt" else "py-spy"
    for candidate in (Path(sys.executable).parent / name, Path(sysconfig.get_path("scripts")) / name,
                      _installed()):
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _installed() -> Path | None:
    """The binary the py-spy wheel installed, from its own file list."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("py-spy")
    except PackageNotFoundError:
        return None
    return next((Path(dist.locate_file(f)).resolve() for f in dist.files or () if f.name in ("py-spy", "py-spy.exe")),
                None)


def dump(pid: int, tool: str | None = None, timeout: float = TIMEOUT_S, native: bool = False) -> Dump:
    """``py-spy dump --locals`` of ``pid``, parsed; never raises, never signals the process. ``native``: with the C
    and C++ frames too (``--native``: where Python frames stop, in torch's C++ such as DDP's Reducer; it costs
    about half a second of CPU, reading libtorch's symbols, and pauses the process about 0.1 s)."""
    tool = tool or binary()
    if not tool:
        return Dump(pid, failure=DumpFailure.NO_PYSPY, error="py-spy is not installed (pip install py-spy)")
    try:
        res = subprocess.run([tool, "dump", "--locals", "--full-filenames", *(["--native"] if native else []),
                              "--pid", str(pid)], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Dump(pid, failure=DumpFailure.TIMEOUT, error=f"py-spy dump took over {timeout:g} s")
    except OSError as exc:
        return Dump(pid, failure=DumpFailure.NO_PYSPY, error=f"{tool}: {exc.strerror or exc}")
    out = res.stdout[:MAX_OUTPUT].decode("utf-8", errors="replace")
    if res.returncode != 0 or not out.strip():
        err = (res.stderr[:4096] or res.stdout[:4096]).decode("utf-8", errors="replace")
        return Dump(pid, failure=classify_failure(err, pid), error=first_line(err))
    return parse(out, pid)


def as_faulthandler_text(d: Dump) -> str:
    """A dump's threads in faulthandler's own layout (innermost first, the main thread marked), the form the stack
    readers take (stacks.main_thread): one reader for the stacks a rank's worker server, its SIGUSR1 handler or
    py-spy gave. "" when the dump failed."""
    if d.failure is not None:
        return ""
    main = d.main_thread()
    blocks = []
    for t in sorted(d.threads, key=lambda t: t is not main):
        head = f"{'Current thread' if t is main else 'Thread'} {t.tid} (most recent call first):"
        blocks.append("\n".join([head, *(f'  File "{f.file}", line {f.line if f.line is not None else 0} in '
                                        f"{f.function}" for f in t.frames)]))
    return "\n\n".join(blocks) + "\n"


def classify_failure(text: str, pid: int) -> DumpFailure:
    low = text.lower()
    if "permission denied" in low or "operation not permitted" in low or "ptrace" in low and "denied" in low:
        return DumpFailure.PERMISSION
    if "no such file" in low or "no such process" in low or not Path(f"/proc/{pid}").exists():
        return DumpFailure.GONE
    if "python" in low and ("failed to find" in low or "not a python" in low or "version" in low):
        return DumpFailure.NOT_PYTHON
    return DumpFailure.OTHER


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Stack backtrace")]
    return lines[0][:300] if lines else ""


def parse(text: str, pid: int | None = None) -> Dump:
    """py-spy's dump text (``--locals`` optional) -> a Dump: threads, frames innermost first, each frame's
    arguments and locals as py-spy shows them (strings: reprs, cut by py-spy)."""
    result = Dump(pid if pid is not None else 0)
    thread: Thread | None = None
    frame: Frame | None = None
    section: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        if pid is None and (m := _PROCESS.match(line)):
            result.pid = int(m["pid"])
        if m := _THREAD.match(line):
            thread = Thread(m["tid"], m["state"], m["name"], [])
            result.threads.append(thread)
            frame = section = None
        elif thread is not None and (m := _FRAME.match(line)):
            frame = Frame(m["func"], m["file"], parse_int(m["line"]) if m["line"] else None)
            thread.frames.append(frame)
            section = None
        elif frame is not None and line.strip() in ("Arguments:", "Locals:"):
            section = frame.arguments if line.strip() == "Arguments:" else frame.locals
        elif section is not None and (m := _VAR.match(line)):
            section[m["name"].strip()] = m["value"].strip()
    return result


def to_state(dump: Dump, rank: int, *, host: str | None = None, local_rank: int | None = None) -> RankState:
    """A readable dump as the evidence model's record of ``rank``: the main thread's frames (innermost first, each
    with py-spy's arguments and locals: torch's send/recv frames carry dst/src there), the wait they show
    (stacks.wait_of, the one reading of "which torch call is it inside"), still running."""
    thread = dump.main_thread()
    frames = tuple(model.Frame(f.file, f.line or 0, f.function,
                               locals=tuple({**f.locals, **f.arguments}.items()))
                   for f in (thread.frames if thread else []))
    return RankState(rank, model.Source.PY_SPY, host=host, pid=dump.pid, local_rank=local_rank, frames=frames,
                     wait=wait_of(frames), ending=model.STILL_RUNNING,
                     raw={"thread": thread.name if thread else None, "state": thread.state if thread else None,
                          "default_group": default_group(thread)})


C10D_LOGGER = "torch/distributed/c10d_logger.py"


def default_group(thread: Thread | None) -> bool | None:
    """Whether the torch.distributed call the stack stands in runs on the default (world) group, from what its
    caller passed: c10d's logging wrapper, the frame just outside the call, keeps the call's ``args`` and
    ``kwargs`` (py-spy's locals). True: no group passed (none among the arguments before ``group``'s place, as the
    call's own frame lists them, nor by name, or ``group=None``); False: a group was passed (a DeviceMesh's, FSDP's,
    a user's subgroup, or the world's by name); None: the stack does not say (no wrapper, a repr py-spy cut). A
    collective's own ``group`` argument shows the group it resolved, the default one's address as any other."""
    frames = thread.frames if thread else []
    calls = [i for i, f in enumerate(frames) if f.file.endswith(C10D)]
    if not calls or calls[-1] + 1 >= len(frames) or not frames[calls[-1] + 1].file.endswith(C10D_LOGGER):
        return None
    names, wrapper = list(frames[calls[-1]].arguments), frames[calls[-1] + 1]
    args, kwargs = wrapper.locals.get("args"), wrapper.locals.get("kwargs")
    if "group" not in names or args is None or kwargs is None or "..." in args or "..." in kwargs:
        return None
    if re.search(r"""["']group["']\s*:""", kwargs):
        return re.search(r"""["']group["']\s*:\s*None\b""", kwargs) is not None
    return _items(args) <= names.index("group")


def _items(text: str) -> int:
    """How many items py-spy's repr of a tuple holds ("(<Tensor at 0x1>, 0)": 2; "(<Tensor at 0x1>)": 1)."""
    inner = text.strip()
    inner = inner[1:-1] if inner[:1] == "(" and inner[-1:] == ")" else inner
    if not inner.strip():
        return 0
    depth, count, quote = 0, 1, ""
    for ch in inner:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count


def python_frames(thread: Thread | None) -> tuple:
    """The thread's Python frames (function, file, line), innermost first: a native dump's without its C frames
    (a shared object's), to match it against a Python-only dump of the same moment."""
    return tuple((f.function, f.file, f.line) for f in (thread.frames if thread else []) if not model.is_native(f.file))


def signature(thread: Thread | None) -> tuple:
    """What changes when a rank moves: every frame with its line, arguments and locals (a new Work object, a
    new tensor, a loop counter)."""
    if thread is None:
        return ()
    return tuple((f.function, f.file, f.line, tuple(sorted(f.arguments.items())), tuple(sorted(f.locals.items())))
                 for f in thread.frames)
