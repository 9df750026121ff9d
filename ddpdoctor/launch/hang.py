"""The hang watchdog: no rank makes progress for S seconds -> dump every rank's stack, name the ranks behind,
stop the job. Progress is the per-rank metrics file the reference trainer appends to each step (a user
script without one is judged by its log files growing)."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil

COLLECTIVE_FRAMES = ("all_reduce", "allreduce", "barrier", "backward", "wait", "broadcast", "all_gather",
                     "reduce_scatter", "_engine_run_backward", "all_to_all", "recv", "send")


def last_steps(run_dir: Path) -> dict[int, int]:
    """Global rank -> last step it logged."""
    out = {}
    for path in (run_dir / "metrics").glob("rank*.jsonl"):
        try:
            lines = path.read_text().strip().splitlines()
            out[int(path.stem[4:])] = json.loads(lines[-1])["step"] if lines else 0
        except (OSError, ValueError, KeyError):
            continue
    return out


def progress_mark(run_dir: Path, logs: Path) -> float:
    """The newest modification time among the progress files: metrics, else the ranks' logs."""
    newest = 0.0
    for pattern in ((run_dir / "metrics").glob("rank*.jsonl"), logs.glob("*/attempt_*/*/std*.log")):
        for p in pattern:
            try:
                newest = max(newest, p.stat().st_mtime)
            except OSError:
                continue
    return newest


def workers(agent_pid: int) -> list[psutil.Process]:
    """The agent's worker processes (its direct children running Python)."""
    try:
        return [c for c in psutil.Process(agent_pid).children(recursive=True) if "python" in c.name().lower()]
    except psutil.Error:
        return []


def behind(steps: dict[int, int], stacks: dict[int, str]) -> list[int]:
    """Ranks behind the others: a lower last step; or, all equal, the ranks not waiting inside a collective."""
    if steps and len(set(steps.values())) > 1:
        low = min(steps.values())
        return sorted(r for r, s in steps.items() if s == low)
    if stacks:
        outside = [r for r, text in stacks.items() if text and not any(f in text for f in COLLECTIVE_FRAMES)]
        if outside and len(outside) < len(stacks):
            return sorted(outside)
    return []


class Watchdog:
    """Runs beside torchrun; when it fires it records what it saw in ``self.report`` and stops the agent."""

    def __init__(self, agent: "psutil.Popen | object", run_dir: Path, logs: Path, timeout: float, poll: float = 1.0):
        self.agent, self.run_dir, self.logs, self.timeout, self.poll = agent, run_dir, logs, timeout, poll
        self.report: dict | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-hang-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        started = time.time()
        while not self._stop.wait(self.poll):
            if self.agent.poll() is not None:
                return
            mark = max(progress_mark(self.run_dir, self.logs), started)
            if time.time() - mark > self.timeout:
                self.report = self.fire(time.time() - mark)
                return

    def fire(self, stalled_s: float) -> dict:
        procs = workers(self.agent.pid)
        stacks_dir = self.run_dir / "stacks"
        before = {p: p.stat().st_size for p in stacks_dir.glob("rank*.txt")} if stacks_dir.exists() else {}
        for p in procs:
            try:
                p.send_signal(signal.SIGUSR1)  # faulthandler in the reference trainer dumps all threads
            except psutil.Error:
                pass
        time.sleep(1.5)
        stacks = {}
        for path in sorted(stacks_dir.glob("rank*.txt")) if stacks_dir.exists() else []:
            text = path.read_text(errors="replace")[before.get(path, 0):]
            if text.strip():
                stacks[int(path.stem[4:])] = text
        if not stacks:
            stacks = _py_spy(procs)
        steps = last_steps(self.run_dir)
        report = {"stalled_s": round(stalled_s, 1), "last_steps": {str(k): v for k, v in sorted(steps.items())},
                  "stalled_ranks": behind(steps, stacks), "stacks": {str(k): v for k, v in sorted(stacks.items())}}
        stop_agent(self.agent)
        return report


def _py_spy(procs) -> dict[int, str]:
    """User scripts have no faulthandler hook: py-spy (when installed) reads their stacks from outside."""
    from .config import py_spy

    tool = py_spy()
    if not tool:
        return {}
    import subprocess

    out = {}
    for p in procs:
        try:
            rank = int(p.environ().get("RANK", "-1"))
            res = subprocess.run([tool, "dump", "--pid", str(p.pid)], capture_output=True, text=True, timeout=20)
            out[rank] = res.stdout
        except (psutil.Error, OSError, subprocess.TimeoutExpired, ValueError):
            continue
    return out


def stop_agent(agent, grace: float = 10.0) -> None:
    """SIGTERM the agent (it stops its workers); whatever is left after the grace period gets SIGKILL."""
    try:
        family = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(recursive=True)]
    except psutil.Error:
        return
    try:
        os.kill(agent.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    _, alive = psutil.wait_procs(family, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
