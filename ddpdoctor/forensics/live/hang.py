"""The hang watchdog: no rank makes progress for longer than the threshold (calibrated, or --hang-timeout) ->
collect every rank's flight recorder, stacks and process state, judge (collectives.py), stop the job (procs.py)."""
from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import psutil

from ..evidence.procs import (askable, exit_record, failed_at, rank_per_process, ranks_of,
                              record_at_exit, stop_agent, workers)
from ..judge import policy
from ..judge.decide import Context, Evidence, Failures, decide
from .stall import (SendRecvMotion, Threshold, behind, cpu_seconds, in_init, last_steps, movement, own_code,
                    p2p_waiting, progress_mark, stack_waits, stacks_of)
from . import early, exchange
from ..evidence import nccl_ras
from .busy import BusyWait
from .peers import PeerStart
from .collect import evidence_of
from .stragglers import Live

class Watchdog:
    """Runs beside torchrun. Progress is every rank's completed collectives (torch's flight recorder, asked
    through the bootstrap's worker server) and, for the reference trainer, its metrics; the ranks' logs growing
    when neither answers. When the threshold fires it collects every rank's evidence, judges, records
    ``self.report`` and stops the agent."""

    def __init__(self, agent, run_dir: Path, logs: Path, timeout: float | None, poll: float = 1.0,
                 sockets: str | None = None, host: str | None = None, node: str = "node", nnodes: int = 1,
                 busy_timeout: float | None = None):
        self.agent, self.run_dir, self.logs, self.poll = agent, run_dir, logs, poll
        self.threshold = Threshold(timeout)
        self.sockets, self.host = sockets, host or socket.gethostname()
        # Several nodes: each sees only its own ranks; they swap evidence through the shared run dir.
        self.node, self.nnodes, self.exchange = node, nnodes, run_dir / "hang"
        self.report: dict | None = None
        self.last_fr: dict[int, dict] = {}
        self.gone: set[int] = set()  # ranks with a record whose process the last poll no longer found
        # The user's own process-group timeout (the flight recorder's timeout_ms) may expire before the
        # threshold: evidence taken live just before it (kept until the job ends by that timeout or resumes).
        self.early: dict | None = None
        self.live_line: str | None = None  # the one line said at once when the evidence was taken (announce)
        self.judged_at: float | None = None  # when the judging that made self.report began
        self.stragglers = Live()  # fed by each poll's flight records (stragglers.py); run.py sets its `say`
        self.init_armed = False  # armed by ranks waiting inside init_process_group (stall.past_start_up)
        self.p2p_only = False  # initialised, no collective recorded, a rank seen waiting: motion from its stacks
        self.stack_waiting = False  # the last stack poll (p2p_only): a rank waited
        self.p2p_motion = SendRecvMotion()  # its motion, poll after poll
        self.moved_ranks: list[int] = []  # the ranks the last movement check saw move or work (movement)
        self.busy = BusyWait(busy_timeout)  # ranks waiting on a busy one (judge.policy): said, not stopped
        self.peers = PeerStart(self.exchange, node, nnodes)  # another node's ranks still starting (peers.py)
        self.last_reading: policy.Reading | None = None
        self._stop, self._standing_down = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-hang-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def stand_down(self) -> None:
        """The job is being stopped on request (a signal to run-trainer): from now on nothing is judged. The
        stop ends the ranks one by one, and a rank left waiting for one already gone is no hang."""
        self._standing_down.set()
        self._stop.set()

    def report_before(self, at: float | None) -> dict | None:
        """The report, if its judging began before ``at`` (the moment of a stop request; None: no request)."""
        if self.report is None or at is None:
            return self.report
        return self.report if self.judged_at is not None and self.judged_at < at else None

    def _run(self) -> None:
        launched = up_since = time.time()
        started = seen = None
        pids: set[int] = set()
        moved = False  # progress seen after arming: the job is past its start-up
        while not self._stop.wait(self.next_wait()):
            if self.agent.poll() is not None:
                break
            current = {p.pid for p in workers(self.agent.pid)}
            if current != pids:  # a (re)start of the workers: their start-up is no hang either
                if current - pids:
                    self.early = None  # new workers: the evidence was of the attempt before (a rank exiting keeps it)
                    self.stragglers.restart(time.time())  # and a new attempt's rhythm (stragglers.py)
                pids, started, launched, moved = current, None, time.time(), False
                up_since = launched  # start-up's bound counts from here (or from init_process_group's end)
                self.init_armed = self.p2p_only = self.stack_waiting = False
            mark = self.progress()
            self.stragglers.observe({r: fr for r, fr in self.last_fr.items() if r not in self.gone}, time.time())
            now = time.time()
            was_armed = started is not None
            if started is None:
                started = self.armed_at(mark[0], launched, now)
            if mark != seen:
                moved, _ = moved or was_armed, self.busy.reset()  # progress: a wait on a busy rank is over
                if seen is not None or any(mark[0].values()) or mark[1] or mark[2]:
                    self.threshold.progressed(now)
                    if self.early is not None:
                        # Before the deadline: the collective completed in time, no hang. After it, the first
                        # change is the timeout itself (gloo counts a timed-out collective as completed);
                        # sustained progress means the job went on after it.
                        self.early["after"] += 1
                        if now < self.early["deadline"] or self.early["after"] > 2:
                            self.early = None
                seen = mark
            if self.init_armed and mark[0] and None not in mark[0].values():  # init behind every rank: start-up
                self.init_armed, moved, up_since = False, False, now  # again, its bound from now (starting_up)
            if self.early is None:
                self.early = self.before_timeout(now)
            elif now >= self.early["deadline"] + 0.5:
                # The user's timeout has expired and the collective did not complete before it: the job is
                # over. Judge what was seen before it (after it, gloo counts the timed-out collective as
                # completed and the waiting ranks unwind) and stop the job now.
                self.judged_at = now
                self.report = self.from_early(stop=True)
                return
            if started is not None and not moved and self.starting_up(moved, up_since, now):
                started = now  # start-up silence does not count: the stall counts from its end
            failing = self.failing(now, launched)  # each poll: another node learns of it from its mark at once
            fired = started is not None and self.threshold.fired(now, started) and not self.exiting(launched, now)
            if fired and not self.still(failing, launched):
                started, fired = (started if failing else time.time()), False
            if fired or self.peer_fired():
                self.judged_at = now
                self.report = self.fire(self.threshold.stalled(now, started or launched))
                if self.report is not None:
                    return
        if (self.report is None and self.early is not None and not self._standing_down.is_set()
                and self.agent.poll() not in (None, 0)):
            self.judged_at = time.time()
            self.report = self.from_early(stop=False)  # the job ended by its own timeout: the evidence before it

    def next_wait(self) -> float:
        """The polling period, shortened to wake up when the pending collective nears its process group's
        timeout (to take the evidence) and right after it expires (to stop the job)."""
        pending = self.pending()
        if not pending:
            return self.poll
        deadline, timeout = min(pending)
        at = deadline - early.margin(self.poll, timeout) if self.early is None else self.early["deadline"] + 0.5
        return min(self.poll, max(0.2, at - time.time()))

    def pending(self) -> list[tuple[float, float]]:
        return early.pending(self.last_fr, self.gone)

    def before_timeout(self, now: float) -> dict | None:
        """Collect every rank's evidence when the oldest pending collective nears its process group's timeout:
        the job is not stopped (it may still complete); the evidence is judged if the job ends by that timeout."""
        pending = self.pending()
        if not pending:
            return None
        deadline, timeout = min(pending)
        if now < deadline - early.margin(self.poll, timeout):
            return None
        evidence = self.collect(workers(self.agent.pid))
        if not evidence:
            return None
        self.announce(evidence, deadline - time.time())
        return {"evidence": evidence, "deadline": deadline, "timeout": timeout, "at": time.time(), "after": 0,
                "waited_s": round(time.time() - (deadline - timeout), 1),
                # as it stood then: the timeout's own completion (gloo) would count as a 30 s "gap" after it
                "threshold_s": self.threshold.describe()["seconds"]}

    def announce(self, evidence: dict[int, dict], left_s: float) -> None:
        """The live hang line: the judge's verdict on the evidence just taken, in one line (``live_line``), before
        the ranks' own timeout tracebacks; the full panel follows when the job has ended."""
        from . import collectives
        from ..judge.words import live_line

        self.live_line = live_line(collectives.judge(evidence), left_s)

    def from_early(self, stop: bool) -> dict:
        """The report from the evidence taken before the user's process-group timeout expired."""
        threshold = early.threshold(self.early, self.early.get("threshold_s", self.threshold.describe()["seconds"]),
                                    stop)
        return self.build_report(self.early["evidence"], self.early["waited_s"], threshold, stop=stop)

    def armed_at(self, done: dict, launched: float, now: float) -> float | None:
        """When silence starts to count: once every rank reports collectives (start-up, `import torch` on a
        loaded node, is no hang), or a rank is stopped (SIGSTOP: no start-up), or at the latest a minute (or
        two thresholds) after the launch."""
        from ..evidence import worker_client

        if done and all(v is not None for v in done.values()):
            return now
        if any(worker_client.process_state(p.pid) == "stopped" for p in workers(self.agent.pid)):
            return now
        if self.sockets and done and self.in_init():
            self.init_armed = True
            return now
        if self.p2p_only:
            return now  # initialised, moving by its stacks (progress): its silence counts
        if not self.sockets or now - launched > self.grace():
            return launched
        return None

    def starting_up(self, moved: bool, launched: float, now: float) -> bool:
        """Still starting up, so silence is no hang (the stall counts from its end): armed (every rank has
        completed its first collectives), no progress since, and no rank waiting in a collective. A job's first
        collectives are often followed by seconds of work in every rank's own code: the reference trainer's
        barrier after preparing the data, then `import torch._dynamo` (AdamW, DDP) and the model, which on a
        loaded node outlast a short --hang-timeout; judged then, every rank is "outside collectives" and the
        first is blamed. It ends at the first progress after arming, as soon as a rank waits in a collective
        (the others may never come) or its stack stands in a send/recv (waits_in_p2p: no record shows one), at
        once for a stopped rank (SIGSTOP: no start-up), at the latest a minute (or two thresholds) after launch."""
        from ..evidence import worker_client

        if moved or not self.sockets or now - launched > self.grace() or self.init_armed or self.stack_waiting:
            return False
        if any(worker_client.waiting(fr) for fr in self.last_fr.values()):
            return False
        stopped = any(worker_client.process_state(p.pid) == "stopped" for p in workers(self.agent.pid))
        return not stopped and not self.waits_in_p2p()

    def waits_in_p2p(self) -> bool:
        """A rank's stack stands in a send/recv (stall.p2p_waiting): past its start-up."""
        self.stack_waiting = p2p_waiting(self.sockets, self.run_dir, workers(self.agent.pid))
        return self.stack_waiting

    def in_init(self) -> bool:
        """Some rank waits inside init_process_group (stall.in_init): asked only while not armed yet."""
        return in_init(self.sockets, self.run_dir, workers(self.agent.pid))

    def grace(self) -> float:
        """How long start-up or an exit keeps silence from counting (then a rank stuck there is named)."""
        return policy.grace_s(self.threshold.fixed)

    def failing(self, now: float, since: float) -> bool:
        """A rank here (or on another node: its mark) raised, its error file written, and is still ending: exit
        handlers (a logger's upload, interpreter shutdown on a loaded node) take seconds while its peers wait.
        torchrun acts once it has exited (stops the job, or restarts it: stopping it first forbade the restart).
        Bounded by grace(); another node's mark counts from this attempt's start (``since``)."""

        times = [t for t in map(failed_at, workers(self.agent.pid)) if t is not None]
        if self.nnodes > 1:
            if times:
                exchange.mark_failing(self.exchange, self.node, min(times))
            times += [t for t in exchange.failing_marks(self.exchange, exclude=self.node) if t >= since]
        return bool(times) and now - min(times) <= self.grace()

    def exiting(self, since: float, now: float) -> bool:
        """Every rank of this node has written its flight record at exit (the bootstrap's atexit, after the
        script's last line; or on torchrun's SIGTERM after a failure, which torchrun reports): the job is
        ending, not hung. Seen under load with a short --hang-timeout: a finished job's ranks spent seconds in
        interpreter shutdown ("Garbage-collecting"), were judged "outside collectives" and stopped. Bounded like
        the start-up: a minute (or two thresholds) after the first rank's record, silence counts again."""
        ranks = ranks_of(workers(self.agent.pid))
        if not ranks:
            return False
        times = []
        for rank in ranks:
            try:
                times.append(record_at_exit(self.run_dir, rank).stat().st_mtime)
            except OSError:
                return False
        return min(times) >= since and now - min(times) <= self.grace()

    def collectives(self) -> dict | None:
        """Per-rank progress of the job from its collectives (any script), with the straggler if there is one."""
        from . import collectives

        return collectives.summary_of(self.last_fr, self.run_dir)

    def peer_fired(self) -> bool:
        """Another node's watchdog has judged this job hung: collect here now too, while the ranks still wait."""
        return self.nnodes > 1 and bool(exchange.published(self.exchange, exclude=self.node))

    def progress(self) -> tuple:
        """(rank -> completed collectives, newest metrics/log mtime): any change is progress."""
        from ..evidence import worker_client

        done, moving, initialised = {}, None, {}
        if self.sockets:
            procs = workers(self.agent.pid)
            running = rank_per_process(procs)
            self.gone = set(self.last_fr) - set(running)
            for proc, rank in zip(procs, running):
                if rank is None:
                    continue
                fr = worker_client.flight_record(self.sockets.replace("{rank}", str(rank)), timeout=2.0)
                done[rank] = worker_client.completed(fr)
                if fr is None:
                    # Its server gone at exit: the record it wrote then is its last word. A poll that caught a
                    # collective in flight must not leave that collective "pending" while the rank spends seconds
                    # in interpreter shutdown: its process-group deadline would stop a job that had finished.
                    fr = exit_record(self.run_dir, rank, proc)
                if fr is not None:
                    self.last_fr[rank] = fr  # the progress summary at the end reads the last one
                initialised[rank] = bool(fr and fr.get("pg_config"))
            self.peers.note(done, procs, running)  # no collective yet and their CPU grows: say it to the others
            quiet = bool(done) and all(initialised.values()) and all(v is None for v in done.values())
            if quiet:  # initialised, no collective recorded: start-up, or a job that only sends and receives
                moving = self.stack_motion(procs, running)
                self.p2p_only = self.p2p_only or self.stack_waiting  # a rank waits: it is no start-up
                moving = moving if self.p2p_only else None
            else:
                self.p2p_only = False
        # Log growth only counts when no flight recorder answers: a chatty hung rank must not look alive.
        logs = self.logs if not any(v is not None for v in done.values()) and moving is None else Path("/nonexistent")
        return done, progress_mark(self.run_dir, logs), moving

    def still(self, failing: bool, launched: float) -> bool:
        """The fired threshold stands: no rank is failing (torchrun acts on it), the job's motion is a hang
        (judge.policy: some rank waits and no rank moved; a job whose ranks compute, or that waits on a busy rank,
        is not stopped here: the silence counts from now), and the job did not reach its end while the movement
        was sampled (every rank's record at exit written meanwhile)."""
        if failing:
            return False
        reading = self.read_motion()
        if reading.motion is policy.JobMotion.WAITING_ON_BUSY:
            stop = self.busy.past_bound()
        else:  # nothing read at all (no worker server answered): the silence alone, as before any stack
            stop = reading.stoppable or reading.motion is policy.JobMotion.UNKNOWN
        return stop and not self.exiting(launched, time.time())

    def read_motion(self) -> policy.Reading:
        """The job's motion over a short window (stall.movement), kept until the next check; a job waiting on a
        busy rank is said once per episode (busy.BusyWait)."""
        procs = workers(self.agent.pid)
        reading, samples = movement(self.sockets, self.run_dir, procs, self._stop.wait)
        reading, starting = self.peers.over(reading)
        self.last_reading = reading
        self.moved_ranks = sorted(set(reading.busy) | set(reading.starting))
        line = self.busy.observe(reading, samples, starting)
        if line:
            self.say(line)
        return reading

    def say(self, line: str) -> None:
        """Where a live line goes: run-trainer's terminal (launch.run overrides it)."""

    def stack_motion(self, procs: list[psutil.Process], running: list[int | None]) -> tuple:
        """A send/recv-only job's motion (stall.motion): each rank's stack from its worker server, its CPU time."""
        stacks = stacks_of(self.sockets, askable(self.run_dir, procs, running))
        self.stack_waiting = stack_waits(stacks)
        moved, changed = self.p2p_motion.read(stacks, cpu_seconds(procs, running))
        if changed:  # moving, not hung: no flight record times a send/recv, the stacks do
            self.stragglers.sample(own_code(stacks), time.time(), self.poll)
        return moved

    def fire(self, stalled_s: float) -> dict:
        procs = workers(self.agent.pid)
        evidence = self.collect(procs)
        if not evidence and self.agent.poll() is None and self.nnodes == 1:
            return None  # the workers ended meanwhile: a failure torchrun reports, not a hang
        return self.build_report(evidence, stalled_s, self.threshold.describe(), stop=True, procs=procs)

    def build_report(self, evidence: dict[int, dict], stalled_s: float, threshold: dict, stop: bool,
                     procs: list[psutil.Process] | None = None) -> dict:
        """Judge the evidence (with the other nodes' when there are several), then stop the job if asked."""
        from . import collectives

        procs = workers(self.agent.pid) if procs is None else procs
        evidence, nodes = exchange.with_the_others(self.exchange, self.node, self.nnodes, evidence, stop)
        verdict = collectives.judge(evidence) if evidence else None
        if verdict is not None and self.nnodes > 1:
            verdict["nodes"] = {n: r for n, r in sorted(nodes.items())}
            verdict["missing_nodes"] = self.nnodes - len(nodes)
            if verdict["missing_nodes"]:
                verdict["summary"] += (f" (records of {verdict['missing_nodes']} of {self.nnodes} nodes missing: "
                                       "judged from the others)")
        stacks = {r: ev["stacks"] for r, ev in evidence.items() if ev.get("stacks")}
        steps = last_steps(self.run_dir)
        stalled = [c["rank"] for c in (verdict or {}).get("culprits", [])] or behind(steps, stacks)
        report = {"stalled_s": round(stalled_s, 1), "threshold": threshold,
                  "last_steps": {str(k): v for k, v in sorted(steps.items())}, "stalled_ranks": stalled,
                  "verdict": verdict, "stacks": {str(k): v for k, v in sorted(stacks.items())},
                  "local_ranks": {str(r): ev["local_rank"] for r, ev in sorted(evidence.items())
                                  if ev.get("local_rank") is not None},
                  "flight_recorder": {str(r): exchange.last_entries(ev.get("fr"), 20)
                                      for r, ev in sorted(evidence.items())}}
        if (ras := nccl_ras.consult({r: ev.get("fr") for r, ev in evidence.items()}, stalled)) is not None:
            report["ras"] = ras  # NCCL's own view of the hang, or why it was not asked
        report["outcome"] = decide(Evidence(verdict=verdict), Failures(culprit_ranks=tuple(stalled)),
                                   Context("live", failed=True, threshold=threshold, hung=True)).to_json()
        if not stop:
            return report
        for p in procs:  # a SIGSTOPped rank takes the SIGTERM only once it runs again
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                pass
        stop_agent(self.agent)
        return report

    def collect(self, procs: list[psutil.Process]) -> dict[int, dict]:
        """Every rank's evidence at once (collect.evidence_of)."""
        return evidence_of(procs, self.run_dir, self.sockets, self.host, self.node)
