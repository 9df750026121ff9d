"""clock-skew: each node's wall clock against the master's, NTP-style through the master's probe listener.

Several request/reply samples; the one with the smallest round trip is kept, its offset bounded by
rtt / 2. Skew confuses rendezvous heartbeats (c10d compares peers' timestamps with its own clock),
expires credentials (munge, S3 signatures) and garbles merged logs.
"""
from __future__ import annotations

from ddpdoctor.api import Check, Option, best_sample, per_node, time_exchange

FIX = ("enable time sync on every node: `timedatectl set-ntp true`, or with chrony `chronyc makestep` "
       "(and `systemctl enable --now chronyd`)")


class ClockSkewCheck(Check):
    name = "clock-skew"
    facts_shape = {"offset_ms": "number", "bound_ms": "number", "warn_ms": "number"}
    description = "Wall-clock offset of every node from the master (NTP-style, error bound = RTT/2)"
    phase = "cluster"
    cross_node = True  # a job's prologs meet for it (unattended/meet.py)
    options = {
        "warn_ms": Option(100.0, "offset above this many ms is a warning"),
        "fail_ms": Option(1000.0, "offset above this many ms is a failure"),
        "samples": Option(8, "request/reply samples per node; the smallest round trip wins"),
        "reply_timeout_s": Option(5.0, "seconds the master's time echo may take to answer"),
    }

    def gather(self, ctx) -> dict:
        view = ctx.cluster
        # The warning limit travels with the facts so that the clock export carries it (the report draws it).
        limit = {"warn_ms": ctx.opts["warn_ms"]}
        if view.me["name"] == view.master["name"]:
            return {"offset_ms": 0.0, "bound_ms": 0.0, "rtt_ms": 0.0, "samples": 0, "reference": True, **limit}
        try:
            samples = time_exchange(view.master["addr"], view.master["probe_port"], ctx.opts["samples"],
                                    timeout=ctx.opts["reply_timeout_s"])
        except OSError as exc:
            # The mesh check judges reachability; here it only means no clock measurement.
            return {"offset_ms": None, "error": f"{type(exc).__name__}: {exc}", "samples": 0, "reference": False,
                    **limit}
        best = best_sample(samples)
        # The sample's offset is master minus this node; report this node minus the master (positive: ahead).
        return {"offset_ms": round(-best.offset_ms, 3), "bound_ms": round(best.rtt_ms / 2, 3),
                "rtt_ms": round(best.rtt_ms, 3), "samples": len(samples), "reference": False, **limit}

    def exports(self, facts: dict) -> dict:
        if "offset_ms" not in facts:
            return {}
        return {"clock": {"offset_ms": facts.get("offset_ms"), "bound_ms": facts.get("bound_ms"),
                          "limit_ms": facts.get("warn_ms")}}

    def compare(self, facts_by_node, opts):
        warn_ms, fail_ms = opts["warn_ms"], opts["fail_ms"]
        # Offsets are against the master's clock; when most nodes agree with each other and not with the master,
        # the master is the odd clock: judge every node against the majority then (it names the master).
        ref, agree, bound_ref = consensus(facts_by_node, warn_ms)

        def judge(node, f):
            off, bound = f.get("offset_ms"), f.get("bound_ms") or 0.0
            if off is None:
                yield self.warn(f"no clock sample from {node}: {f.get('error') or 'no answer'}", [node],
                                actual=f.get("error"), expected="the master's time echo answers",
                                fix="see the mesh check for the link to the master; rerun the preflight")
                return
            if f.get("reference") and ref == 0.0:
                yield self.passed("reference clock (the master)", [node], actual=0.0)
                return
            dev = off - ref
            if f.get("reference"):
                bound = bound_ref
                text = (f"{node} (the master) is {abs(dev):.2f} ms ± {bound:.2f} ms {'ahead of' if dev > 0 else 'behind'} "
                        f"the other nodes ({len(agree)} of {len(facts_by_node)} agree with each other)")
            else:
                text = f"{node} is {abs(off):.2f} ms ± {bound:.2f} ms {'ahead of' if off > 0 else 'behind'} the master"
                if ref != 0.0:
                    text += f"; {abs(dev):.2f} ms from most nodes"
            # Judge the smallest offset consistent with the measurement, so a slow link is not called skew.
            least = max(0.0, abs(dev) - bound)
            measured = {"offset_ms": off, "bound_ms": bound}
            if f.get("reference"):  # the master against the majority's clock, not its own 0
                measured = {"offset_ms": round(dev, 3), "bound_ms": bound, "against": "most nodes"}
            kw = dict(actual=measured, expected=f"|offset| <= {warn_ms:g} ms")
            if least > fail_ms:
                yield self.fail(text, [node], fix=FIX, **kw)
            elif least > warn_ms:
                yield self.warn(text, [node], fix=FIX, **kw)
            else:
                yield self.passed(text, [node], **kw)

        return per_node(facts_by_node, judge)


def consensus(facts_by_node, warn_ms: float) -> tuple[float, list[str], float]:
    """(the offset most nodes share, those nodes, the largest error bound among them) when more than half of
    the measured nodes agree within ``warn_ms`` around an offset further than that from the master's clock;
    else (0.0, [], 0.0): the master's clock is the reference. Two nodes that differ are a tie: the master stays."""
    offs = {n: f["offset_ms"] for n, f in facts_by_node.items()
            if isinstance(f.get("offset_ms"), (int, float)) and not isinstance(f.get("offset_ms"), bool)}
    if len(offs) < 3 or not any(f.get("reference") for f in facts_by_node.values()):
        return 0.0, [], 0.0  # without the master's own entry nobody can say the master is the odd clock
    mid = sorted(offs.values())[len(offs) // 2]
    agree = [n for n, v in offs.items() if abs(v - mid) <= warn_ms]
    if len(agree) * 2 <= len(offs) or abs(mid) <= warn_ms:
        return 0.0, [], 0.0
    return mid, sorted(agree), max(float(facts_by_node[n].get("bound_ms") or 0.0) for n in agree)
