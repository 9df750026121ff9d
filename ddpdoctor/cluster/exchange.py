"""The exchange step, "the master publishes, the nodes answer": before the cluster gather, the master runs
``publish`` of every cluster check that declares ``publishes`` (a JSON object: a nonce, a file name, a value
to reproduce); the values travel in one sealed message (kind "exchange"); every node's gather finds its
check's value in ``ctx.cluster.published[check name]`` and answers in its facts; the master's compare
judges the answers. No check is known here by name (PROTOCOL.md, checks/PLUGINS.md)."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

from ..api import NodeContext
from ..redaction import scrub

PUBLISH_CAP_S = 10.0  # a publish writes a file or draws a nonce: seconds, not minutes


def publishers(plan) -> list:
    """The plan's cluster checks that publish (their master runs ``publish``, their nodes wait for it)."""
    return [lc for lc in plan.phase("cluster") if getattr(lc.check, "publishes", False)]


def publish_all(plan, view, *, rank: int, nnodes: int, deadline: float) -> dict[str, dict]:
    """On the master: every publishing check's value, {check: JSON object}. A publish that raises, overruns
    or returns something else publishes {"error": why} (its nodes' gathers say so); None publishes nothing."""
    values: dict[str, dict] = {}
    for lc in publishers(plan):
        limit = max(0.1, min(PUBLISH_CAP_S, lc.check.timeout_s, deadline - time.monotonic()))
        ctx = NodeContext(node=view.me["name"], rank=rank, nnodes=nnodes, run=dict(plan.run),
                          opts=lc.check.with_defaults(plan.opts_by_check.get(lc.name)), cluster=view,
                          deadline=time.monotonic() + limit)
        value = _bounded_publish(lc.check, ctx, limit)
        if value is not None:
            values[lc.name] = value
    return values


def _bounded_publish(check, ctx: NodeContext, limit: float) -> dict | None:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = check.publish(ctx)
        except BaseException as exc:  # noqa: BLE001 - a plugin must never take the run down
            box["error"] = f"{type(exc).__name__}: {exc}"

    t = threading.Thread(target=work, name=f"publish-{check.name}", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        return {"error": f"the master's publish did not finish within {limit:g} s"}
    if "error" in box:
        return {"error": f"the master's publish raised {box['error']}"[:4000]}
    value = box.get("value")
    if value is None:
        return None
    if not isinstance(value, dict):
        return {"error": f"the master's publish returned {type(value).__name__}, not a dict"}
    return scrub(json.loads(json.dumps(value, default=str)))
