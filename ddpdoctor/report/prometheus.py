"""A document as Prometheus series for node_exporter's textfile collector: DIR/ddpdoctor.prom, written to a temp
file in DIR and renamed (report/textfile.py: no link followed, a bounded lock), so the collector never reads half
a file.

Series (HELP and TYPE lines come with each family; every series carries ``command``, the ddpdoctor command that
wrote it, so preflight, the node check and nccl-bench share one file: each write replaces its own command's series
and keeps the others'). The level scale, once: 0 pass, 1 skip, 2 warn, 3 fail (worst highest: alert on ``== 3``).

- ``ddpdoctor_check_status{check}``: the check's worst level on this node, one per check, and one per GPU (``gpu``,
  ``UUID``) where a finding names a GPU;
- ``ddpdoctor_check_skipped_for_time{check}``: 1 when this run skipped the check because its budget ran out (its
  status then reads 1, as a check that does not apply), else 0;
- ``ddpdoctor_run_status``: the run's verdict on the same scale;
- ``ddpdoctor_run_duration_seconds``: how long the run took (the node check: from its process's start);
- ``ddpdoctor_node_drains_total`` / ``ddpdoctor_node_resumes_total``: counters of the node check's drains and
  resumes of this node (scontrol succeeded), carried from the file's previous values;
- ``ddpdoctor_bus_bandwidth_gbs{collective,message_size,placement,dtype}``: nccl-bench's busbw per op and size
  (NCCL Inspector's label names);
- ``ddpdoctor_last_run_timestamp_seconds``: when the run's document was made (alert on staleness).

Labels as dcgm-exporter names them, so one Grafana board joins the series: ``Hostname``; ``gpu`` and ``UUID``
where a GPU is meant; ``hpc_job`` from the scheduler's job id for preflight and nccl-bench inside a job, never on the
node check's series (a prolog's job label would start new series at every job).
"""
from __future__ import annotations

import datetime as _dt
import os
import socket
from pathlib import Path
from typing import Callable, Mapping

from ..launchers import job_id as scheduler_job_id

FILE = "ddpdoctor.prom"
LOCK = ".ddpdoctor.prom.lock"
STATUS = {"pass": 0, "skip": 1, "warn": 2, "fail": 3}
HELP = {
    "ddpdoctor_check_status": "ddpdoctor check result on this node: 0 pass, 1 skip, 2 warn, 3 fail",
    "ddpdoctor_check_skipped_for_time": "1 when this run skipped the check because its time budget ran out",
    "ddpdoctor_run_status": "ddpdoctor run verdict, on ddpdoctor_check_status's scale",
    "ddpdoctor_run_duration_seconds": "how long the ddpdoctor run took",
    "ddpdoctor_node_drains": "drains of this node by the ddpdoctor node check",
    "ddpdoctor_node_resumes": "resumes of this node by the ddpdoctor node check (its own drains only)",
    "ddpdoctor_bus_bandwidth_gbs": "nccl-bench bus bandwidth (nccl-tests busbw) in GB/s per collective and size",
    "ddpdoctor_last_run_timestamp_seconds": "when the ddpdoctor run that wrote these series ended (Unix time)",
    "ddpdoctor_meeting_link_status": "a failing link from this node to peer in the job's prologs' meeting, on "
                                     "ddpdoctor_check_status's scale",
    "ddpdoctor_meeting_skipped": "1 when this prolog's meeting of the job's nodes did not happen, else 0",
    "ddpdoctor_meetings_skipped": "prolog meetings of the job's nodes that did not happen on this node",
    "ddpdoctor_records_not_kept": "node check records that could not be written to results_dir",
    "ddpdoctor_records_unkept": "node check records not kept since the last one kept (why: the error)",
    "ddpdoctor_records_unkept_since_timestamp_seconds": "when the first record not kept since the last kept one "
                                                        "was made (Unix time; 0: none)",
    "ddpdoctor_check_could_not_run": "1 when this run's check could not run (its gather raised or hung), else 0",
    "ddpdoctor_kept_facts_not_written": "1 when the health check could not keep its facts for the prologs, else 0",
}
# exposed with _total; the others are gauges
COUNTERS = ("ddpdoctor_node_drains", "ddpdoctor_node_resumes", "ddpdoctor_meetings_skipped",
            "ddpdoctor_records_not_kept")
MEETING_COMMAND = "node-check-meeting"  # the meeting's series: only a prolog that met (or should have) replaces them
Sample = tuple[str, dict, float]  # (family, labels, value)


def job_id(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    return scheduler_job_id(env)


def samples(doc: dict, *, command: str, hostname: str | None = None, job: str | None = None) -> list[Sample]:
    """Every series of this document for this host (pure)."""
    from ..text import no_surrogates

    base = {"Hostname": no_surrogates(hostname or socket.gethostname()), "command": command}
    if job:  # a name or id that is not UTF-8 (surrogate-escaped by os.environ) cannot be written: U+FFFD instead
        base["hpc_job"] = no_surrogates(job)
    out: list[Sample] = []
    if doc.get("kind") == "preflight":
        out += _check_status(doc, base)
    if doc.get("kind") == "nccl-bench":
        out += _bandwidth(doc, base)
    verdict = doc.get("verdict")
    if verdict in STATUS:
        out.append(("ddpdoctor_run_status", dict(base), float(STATUS[verdict])))
    duration = _duration(doc)
    if duration is not None:
        out.append(("ddpdoctor_run_duration_seconds", dict(base), duration))
    created = _epoch(doc.get("created"))
    if created is not None:
        out.append(("ddpdoctor_last_run_timestamp_seconds", dict(base), created))
    return out


def node_check_samples(doc: dict, hostname: str | None = None) -> list[Sample]:
    """The unattended node check's series: no job label (a prolog's job would start new series at every job, and
    an alert on them fire and resolve with each one), and its drain and resume counters' increments (``write``
    adds the file's previous values)."""
    out = samples(doc, command="node-check", hostname=hostname, job=None)
    nc = doc.get("node_check") or {}
    did = nc.get("action") if (nc.get("scontrol") or {}).get("ok") else None
    base = {"Hostname": hostname or socket.gethostname(), "command": "node-check"}
    out.append(("ddpdoctor_node_drains", dict(base), 1.0 if did == "drain" else 0.0))
    out.append(("ddpdoctor_node_resumes", dict(base), 1.0 if did == "resume" else 0.0))
    return out + _not_done(doc, nc, base)


def _not_done(doc: dict, nc: dict, base: dict) -> list[Sample]:
    """What the node check could not do, never silent (issue 56.6): its record not kept (and how many since the last
    one kept, since when, why), a check whose own gather failed, the health check's kept facts not written."""
    from ..registry import TOOL_ERROR

    pending = nc.get("unkept_pending") if isinstance(nc.get("unkept_pending"), dict) else {}
    out = [("ddpdoctor_records_not_kept", dict(base), 1.0 if nc.get("record_not_kept") else 0.0),
           ("ddpdoctor_records_unkept", dict(base, why=str(pending.get("why") or "")),
            float(pending.get("count") or 0)),
           ("ddpdoctor_records_unkept_since_timestamp_seconds", dict(base), float(pending.get("since_s") or 0.0))]
    errored = {str(r.get("check")) for r in doc.get("results") or [] if (r.get("details") or {}).get(TOOL_ERROR)}
    ran = sorted({str(r.get("check")) for r in doc.get("results") or []})
    out += [("ddpdoctor_check_could_not_run", dict(base, check=c), 1.0 if c in errored else 0.0) for c in ran]
    if nc.get("context") == "health_check":
        out.append(("ddpdoctor_kept_facts_not_written", dict(base), 1.0 if nc.get("kept_facts_not_written") else 0.0))
    return out


def unkept_in(old: list[Sample]) -> dict:
    """The count of records not kept, why and since when, as a node check's series in ``old`` hold them ({} when
    none): what the next run carries."""
    out: dict = {}
    for name, labels, value in old:
        if labels.get("command") != "node-check" or value <= 0:
            continue
        if name == "ddpdoctor_records_unkept":
            out.update(count=int(value), why=labels.get("why", ""))
        elif name == "ddpdoctor_records_unkept_since_timestamp_seconds":
            out.update(since_s=value, since=_dt.datetime.fromtimestamp(value, _dt.timezone.utc)
                       .isoformat(timespec="seconds"))
    return out


def recount_unkept(doc: dict, old: list[Sample]) -> dict:
    """``doc`` with its count of records not kept taken from ``old``, the file as read under its lock: the count the
    run read when it started is stale when another check failed to keep its record meanwhile (two at once would
    both write 1). A run that kept its record writes 0 whatever the file held; ``doc`` itself is not changed."""
    nc = doc.get("node_check") or {}
    if not nc.get("record_not_kept") or not isinstance(nc.get("unkept_pending"), dict):
        return doc
    now = unkept_in(old)
    pending = nc["unkept_pending"]
    recounted = {"count": now.get("count", 0) + 1, "why": now.get("why") or pending.get("why") or "",
                 "since_s": now.get("since_s") or pending.get("since_s") or 0.0}
    return dict(doc, node_check=dict(nc, unkept_pending=recounted))


def previous(directory: str | os.PathLike, command: str) -> list[Sample]:
    """The series ``command`` wrote last in DIR/ddpdoctor.prom ([] when none, or it cannot be read): what the node
    check carries from run to run (the records it could not keep, where results_dir itself is full)."""
    from . import textfile

    try:
        with textfile.Folder(directory) as folder:
            return [s for s in _parse(folder.read(FILE)) if s[1].get("command") == command]
    except Exception:  # noqa: BLE001 - a folder refused or unreadable: nothing carried (the write will say why)
        return []


def meeting_samples(doc: dict, hostname: str | None = None, before: list[Sample] | None = None) -> list[Sample]:
    """The prolog's meeting's series (command ``node-check-meeting``, so that a health check, which holds no
    meeting, leaves them as the last meeting wrote them): each failing link this node is one end of, with the
    other end as ``peer`` (the port and what answered are in the job's comment and the record: a port label would
    start a new series at every job), and whether the meeting was skipped. A failing link the last meeting wrote
    (``before``: previous()) stays until a meeting measures it again: one that met with that peer. [] where no
    meeting was wanted (no cross_node, a one-node job)."""
    met = (doc.get("node_check") or {}).get("cross_node")
    if not isinstance(met, dict) or met.get("needed") is False:
        return []
    me = (doc.get("node_check") or {}).get("node")
    base = {"Hostname": hostname or socket.gethostname(), "command": MEETING_COMMAND}
    out: list[Sample] = []
    for link in met.get("links") or []:
        nodes = [str(n) for n in link.get("nodes") or []]
        if me in nodes and len(nodes) == 2:
            peer = nodes[1] if nodes[0] == me else nodes[0]
            out.append(("ddpdoctor_meeting_link_status", dict(base, peer=peer, check=str(link.get("check"))),
                        float(STATUS["fail"])))
    measured = set() if met.get("skipped") else {str(n) for n in met.get("nodes") or []}
    out += [s for s in before or [] if s[0] == "ddpdoctor_meeting_link_status"
            and s[1].get("peer") not in measured and (s[0], s[1]) not in [(o[0], o[1]) for o in out]]
    skipped = 1.0 if met.get("skipped") else 0.0
    out.append(("ddpdoctor_meeting_skipped", dict(base), skipped))
    out.append(("ddpdoctor_meetings_skipped", dict(base), skipped))
    return out


def _duration(doc: dict) -> float | None:
    """The node check's own elapsed time (from its process's start), else the document's timings summed."""
    elapsed = (doc.get("node_check") or {}).get("elapsed_s")
    if isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool):
        return float(elapsed)
    parts = [v for v in (doc.get("timings") or {}).values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return float(sum(parts)) if parts else None


def _this_node(doc: dict) -> str | None:
    nodes = list(doc.get("nodes") or {})
    return doc.get("this_node") or (nodes[0] if len(nodes) == 1 else None)


def _check_status(doc: dict, base: dict) -> list[Sample]:
    """The worst level of each check's results for this node (a cluster finding naming several nodes counts for
    each of them), and per GPU where a result names one."""
    me = _this_node(doc)
    out = _skipped_for_time(doc, me, base)
    worst: dict[tuple, str] = {}
    for r in doc.get("results") or []:
        if r.get("level") not in STATUS or (me and r.get("nodes") and me not in r["nodes"]):
            continue
        details = r.get("details") if isinstance(r.get("details"), dict) else {}
        gpu = details.get("gpu")
        key = (str(r.get("check")), None if gpu is None else str(gpu), str(details.get("uuid") or ""))
        if STATUS[r["level"]] >= STATUS.get(worst.get(key, "pass"), 0):
            worst[key] = r["level"]
    for (check, gpu, uuid), level in sorted(worst.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        labels = dict(base, check=check)  # no level label: the value is the level (a label would split the series)
        if gpu is not None:
            labels.update(gpu=gpu, UUID=uuid)
        out.append(("ddpdoctor_check_status", labels, float(STATUS[level])))
    return out


def _skipped_for_time(doc: dict, me: str | None, base: dict) -> list[Sample]:
    """1 for each check this node's gather skipped because the budget ran out (runner: ``for_time``), 0 for the
    others it ran: a check not run for lack of time is not a check that does not apply."""
    gather = ((doc.get("nodes") or {}).get(me) or {}).get("gather") or {}
    return [("ddpdoctor_check_skipped_for_time", dict(base, check=str(name)),
             1.0 if isinstance(o, dict) and o.get("for_time") else 0.0) for name, o in sorted(gather.items())]


def _bandwidth(doc: dict, base: dict) -> list[Sample]:
    out = []
    for row in doc.get("rows") or []:
        for placement in ("out_of_place", "in_place"):
            busbw = (row.get(placement) or {}).get("busbw_gbs")
            if isinstance(busbw, (int, float)) and not isinstance(busbw, bool):
                out.append(("ddpdoctor_bus_bandwidth_gbs",
                            dict(base, collective=str(row.get("op")), message_size=str(row.get("size")),
                                 placement=placement, dtype=str(row.get("dtype") or "")), float(busbw)))
    return out


def _epoch(created) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(created)).timestamp()
    except ValueError:
        return None


def write(directory: str | os.PathLike, new: list[Sample], command: str) -> Path:
    """DIR/ddpdoctor.prom with ``new`` in place of this command's earlier series, the other commands' kept; under a
    lock file beside it, so two ddpdoctor runs on the node never lose each other's series. Everything in DIR is
    opened through DIR's descriptor without following a link (textfile.py); the lock is waited for LOCK_WAIT_S at
    most (TimeoutError: the caller says the metrics were not written, the verdict stands)."""
    from . import textfile

    path = Path(directory) / FILE
    with textfile.Folder(directory) as folder, folder.locked(LOCK):
        old = _parse(folder.read(FILE))
        kept = [s for s in old if s[1].get("command") != command]
        folder.replace(FILE, _render(kept + _counted(new, old)))
    return path


def update(directory: str | os.PathLike, make: Callable[[list[Sample]], dict[str, list[Sample]]]) -> Path:
    """DIR/ddpdoctor.prom read, changed and written once, all under its lock: ``make`` gets the series in the file
    and returns each command's new series (a command it leaves out keeps its own). One write per run (a prolog's
    node-check and meeting series together), and what a run carries from the last one (the meeting's failing
    links) is read under the same lock as it is written: two checks at once never lose each other's update."""
    from . import textfile

    path = Path(directory) / FILE
    with textfile.Folder(directory) as folder, folder.locked(LOCK):
        old = _parse(folder.read(FILE))
        by_command = make(old)
        kept = [s for s in old if s[1].get("command") not in by_command]
        new = [sample for samples in by_command.values() for sample in samples]
        folder.replace(FILE, _render(kept + _counted(new, old)))
    return path


def _counted(new: list[Sample], old: list[Sample]) -> list[Sample]:
    """The counters' increments in ``new`` added to their previous values in the file (same family and labels)."""
    before = {(name, tuple(sorted(labels.items()))): value for name, labels, value in old if name in COUNTERS}
    return [(name, labels, value + before.get((name, tuple(sorted(labels.items()))), 0.0) if name in COUNTERS
             else value) for name, labels, value in new]


def _parse(raw: bytes | None) -> list[Sample]:
    """The series already in the file; a file that does not parse (not ours), or too large to merge, is replaced."""
    from prometheus_client.parser import text_string_to_metric_families

    if raw is None:
        return []
    try:
        return [(f.name, dict(s.labels), s.value) for f in text_string_to_metric_families(raw.decode("utf-8"))
                for s in f.samples if f.name in HELP and s.name in (f.name, f"{f.name}_total")]
    except (ValueError, UnicodeDecodeError):
        return []


def _render(series: list[Sample]) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from ..text import no_surrogates

    by_name: dict[str, list[tuple[dict, float]]] = {}
    for name, labels, value in series:
        by_name.setdefault(name, []).append((labels, value))

    class Series:  # a prometheus_client collector over fixed values
        def collect(self):
            for name in sorted(by_name):
                names = sorted({k for labels, _ in by_name[name] for k in labels})
                kind = CounterMetricFamily if name in COUNTERS else GaugeMetricFamily
                family = kind(name, HELP[name], labels=names)
                for labels, value in by_name[name]:
                    # a check or node name with a lone surrogate (from a file, from os.environ) cannot be UTF-8
                    family.add_metric([no_surrogates(str(labels.get(k, ""))) for k in names], value)
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Series())
    return generate_latest(registry)
