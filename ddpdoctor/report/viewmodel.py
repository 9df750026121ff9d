"""The report's data: any set of ddpdoctor documents merged into one view model (pure; no HTML here).

Sections: verdict, findings (failures first, with their fix), a check x node matrix whose identical nodes
are grouped (usable at 512 nodes), facts that differ from the majority, clock offsets, the reachability
matrix, bench curves and per-node figures, the trainer's curves and root cause, and collapsed details.

This module is the entry (``build``); each document kind's view lives in ``report/views/``: ``common``
(levels, findings, labels), ``preflight`` (matrix, differences, versions, details), ``clock``, ``mesh``,
``bench`` and ``trainer``. Nodes are read through the check contract only (``ddpdoctor.exports``).
"""
from __future__ import annotations

from collections import Counter

from ..grouping import group_results
from .views.attach import attach_finding, attach_view
from .views.bench import BENCH_SETTINGS, bench_failure, bench_finding, bench_hosts, bench_settings, bench_view  # noqa: F401
from .views.clock import CLOCK_MIN_HALF_SPAN_MS, clock_axis, clock_checks, clock_limit, clock_offsets, nice_step  # noqa: F401
from .views.common import (  # noqa: F401 - the views' names, as the report and its tests read them
    MEMBERS_SHOWN, PASS_MEMBERS_SHOWN, SEVERITY, document_size, finding_group, plural, run_warnings, short_labels,
    single_group, worst)
from .views.mesh import MATRIX_FULL, reachability, rtt_text  # noqa: F401
from .views.preflight import (  # noqa: F401
    FULL_DETAIL_NODES, VERSION_COLUMNS, check_matrix, detail_candidates, details, facts_diff, merge_nodes, node_versions,
    one_per_cluster_run, run_baseline, versions_row, versions_table)
from .views.trainer import rank_table, trainer_finding, trainer_line, trainer_view  # noqa: F401


def build(docs: list[dict]) -> dict:
    docs = one_per_cluster_run(docs)  # the master's cluster.json and the nodes' own copies of its verdict
    pre = [d for d in docs if d.get("kind") == "preflight"]
    bench = [d for d in docs if d.get("kind") == "nccl-bench"]
    train = [d for d in docs if d.get("kind") == "run-trainer"]
    attached = [d for d in docs if d.get("kind") == "attach"]
    nodes = merge_nodes(pre)
    labels, label_note = short_labels(sorted(nodes))
    results = [r for d in pre for r in d.get("results", [])]
    # The documents carry their own "groups", but several documents are grouped together here, with the
    # same function (grouping.group_results), over every result.
    groups = [finding_group(g, results) for g in group_results(results, len(nodes))]
    findings = [g for g in groups if g["level"] in ("fail", "warn")]
    # A failed benchmark or a trainer's root cause comes first, as a finding of its own.
    for finding in [bench_finding(d) for d in bench] + [trainer_finding(d) for d in train] + \
            [attach_finding(d) for d in attached]:
        if finding:
            findings.insert(0, finding)
    verdicts = [d.get("verdict", "pass") for d in docs]
    clock, limit = clock_offsets(nodes, results, labels), clock_limit(nodes)
    return {
        "verdict": worst(verdicts) if verdicts else "pass",
        "counts": dict(Counter(r.get("level") for r in results)),
        "documents": [{"kind": d.get("kind"), "run_id": d.get("run_id"), "created": d.get("created"),
                       "verdict": d.get("verdict"), "scope": d.get("scope"), "tool_version": d.get("tool_version"),
                       "size": document_size(d)}
                      for d in docs],
        "warnings": run_warnings(docs),
        "findings": findings,
        "passing": [g for g in groups if g["level"] == "pass"],
        "skipped": [g for g in groups if g["level"] == "skip"],
        "matrix": check_matrix(results, sorted(nodes)),
        "versions": versions_table(nodes),
        "facts_diff": facts_diff(nodes, baseline=run_baseline(docs)),
        "clock": clock,
        "clock_limit_ms": limit,
        "clock_span": clock_axis(clock, limit),
        "labels": label_note,
        "mesh": reachability(nodes, labels),
        "bench": [bench_view(d) for d in bench],
        "trainer": [trainer_view(d) for d in train],
        "attach": [attach_view(d) for d in attached],
        "details": (shown := details(nodes, findings)),
        "details_more": len(detail_candidates(nodes, findings)) - len(shown),
        "node_count": len(nodes),
        # One count for the header only when every preflight saw the same nodes; merged runs of different
        # sizes (a 1-node and a 3-node run) say their own size on their own line instead.
        "node_count_line": (plural(len(nodes), "node") if nodes and len({len(d.get("nodes") or {}) for d in pre}) == 1
                            else None),
    }
