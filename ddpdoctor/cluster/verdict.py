"""The cluster verdict: every node's facts merged, compared, and the nodes that fell silent or sent invalid
messages turned into findings; plus the document each node prints (the master's and a worker's alike).
"""
from __future__ import annotations

import copy

from .. import documents, runner
from ..api import Level, Result
from ..exitcodes import ExitCode
from .messages import Finding, about

# Reasons an invalid message can have that point at a real node with a wrong --token, not at a stranger.
TOKEN_WORDS = ("signature does not match", "unsigned, and this node requires", "signed with a token, and this node")


def is_token_problem(finding: Finding) -> bool:
    return any(w in finding.why for w in TOKEN_WORDS)


def merge(view, facts: dict, cfacts: dict) -> dict[str, dict]:
    """Node name -> {rank, host, addr, fqdn, facts, gather}, the shape runner.compare_all reads."""
    merged: dict[str, dict] = {}
    for n in view.nodes:
        nm = n["name"]
        entry = {"rank": n["rank"], "host": n["host"], "addr": n["addr"], "fqdn": n.get("fqdn"), "facts": {},
                 "gather": {}}
        for part in (facts.get(nm), cfacts.get(nm)):
            if part:
                entry["facts"].update(part["facts"])
                entry["gather"].update(part["gather"])
        merged[nm] = entry
    return merged


def silent_results(silent: dict[str, str]) -> list[Result]:
    return [Result(check="cluster", level=Level.FAIL, summary=f"node {nm} {why}", nodes=[nm], actual=why,
                   expected="every node reports until the verdict",
                   fix=f"look at node {nm}: was ddpdoctor killed or stopped (OOM, scheduler, Ctrl-Z, a hung "
                       f"filesystem)? rerun the preflight there")
            for nm, why in sorted(silent.items())]


def _rank_of(key: str) -> int | None:
    try:
        return int(key.split("/")[1])
    except (IndexError, ValueError):
        return None


def as_consequence(r: Result, note: str, fix: str) -> Result:
    """A failure kept as a skip that names its cause (``note``): shown, but no node is blamed for it."""
    return Result(check=r.check, level=Level.SKIP, nodes=list(r.nodes), actual=r.actual, expected=r.expected,
                  summary=f"{r.summary} ({note})", fix=fix, details=r.details)


def consequences_of_silence(results: list[Result], silent: dict[str, str],
                            collective_checks: set[str] = frozenset()) -> list[Result]:
    """A failure that names a live node together with a node that died or froze (a link into it), or a live
    node's collective while a node went silent (the collective needs every node), is that node's doing: it is
    kept as a skip saying so, and the live node is not blamed. Failures naming the silent node alone stay."""
    out = []
    for r in results:
        dead = [n for n in r.nodes if n in silent]
        if r.level is Level.FAIL and silent and r.check in collective_checks and not dead:
            dead = sorted(silent)
        if r.level is Level.FAIL and dead and (len(dead) < len(r.nodes) or r.check in collective_checks):
            r = as_consequence(r, f"a consequence: {', '.join(dead)} stopped answering",
                               f"see the failure of node {dead[0]} above")
        out.append(r)
    return out


def collective_explained(results: list[Result], collective_checks: set[str]) -> list[Result]:
    """The collective is a smoke test: when it fails everywhere while another check already fails on some
    nodes (an interface that does not exist, a firewall), those nodes are the cause, and the collective's
    failure on the other nodes is kept as a skip that says so rather than blaming them too."""
    causes = [r for r in results if r.level is Level.FAIL and r.check not in collective_checks and r.nodes]
    blamed = {n for r in causes for n in r.nodes}
    if not causes:
        return results
    out = []
    for r in results:
        if r.level is Level.FAIL and r.check in collective_checks and r.nodes and not set(r.nodes) & blamed:
            first = causes[0]
            r = as_consequence(r, f"a consequence of: {first.check} on {', '.join(first.nodes)}", first.fix)
        out.append(r)
    return out


def finding_results(findings: list[Finding], where: str, joined_ranks: frozenset[int] = frozenset()) -> list[Result]:
    """Invalid messages: a node with another token is a failure; anything else in the store is a warning.
    An identity with another token for a rank that a valid node holds (``joined_ranks``) rejected no node:
    it is a stray or forged write (anyone who reaches the port can write one), so a warning too, or an
    unauthenticated writer could fail every healthy run."""
    out = []
    for f in findings:
        who = f.claimed or "an unknown writer (the store does not record who wrote a key)"
        if is_token_problem(f) and f.key.startswith("ident/") and _rank_of(f.key) not in joined_ranks:
            out.append(Result(
                check="cluster", level=Level.FAIL,
                summary=f"a node was rejected: {about(f.key)} failed: {f.why} ({who})", nodes=[],
                actual=f.why, expected="every node signs with the cluster's token",
                fix="pass the same --token (or DDPDOCTOR_TOKEN) on every node",
                details=f.to_json()))
        else:
            out.append(Result(
                check="cluster", level=Level.WARN,
                summary=f"{where} ignored an invalid message in place of {about(f.key)}: {f.why} "
                        f"(claims to be {who})", nodes=[],
                actual=f.why, expected="only this run's nodes write to the rendezvous store",
                fix="something else writes to the rendezvous port: use --token and a port only this job uses",
                details=f.to_json()))
    return out


def duplicate_rank_result(ident: dict, holder: str | None) -> Result:
    late = f"{ident.get('host')} ({ident.get('addr')})"
    return Result(check="cluster", level=Level.FAIL, nodes=[holder] if holder else [],
                  summary=f"node rank {ident.get('rank')} is claimed by {holder} and again by {late}: two nodes run "
                          f"with the same --node-rank", actual=[holder, late], expected="one node per rank",
                  fix="give each node its own --node-rank (0..N-1), or omit it everywhere to let ranks be assigned")


def decide(plan, run_settings: dict, view, merged: dict, silent: dict, findings: list[Finding], timings: dict,
           advice_fn, extra: list[Result] = (), withhold_why: str | None = None, me: str | None = None) -> dict:
    """The master's verdict document. ``withhold_why`` (the run was not authenticated): every fix but those the
    master gives from its own facts alone (``me``) is withheld, and the document says so and why."""
    collective = {lc.name for lc in plan.phase("collective")}
    results = consequences_of_silence(runner.compare_all(plan.checks, merged, plan.opts_by_check, run=run_settings),
                                      silent, collective)
    results = collective_explained(results, collective)
    results += silent_results(silent)
    results += finding_results(findings, "the master", frozenset(n["rank"] for n in view.nodes))
    results += list(extra)
    advice = advice_fn(results)
    doc = documents.preflight_doc(scope="cluster", nodes=merged, checks=[lc.describe() for lc in plan.checks],
                                  results=results, run=run_settings, timings=timings) | {"advice": advice}
    if withhold_why:
        keep = own_fixes(plan, run_settings, merged, me)
        withhold_fixes(doc, withhold_why, keep=lambda r: r.get("fix") in keep)
    return doc


def own_fixes(plan, run_settings: dict, merged: dict, me: str | None) -> set[str]:
    """The fixes the checks give from the master's own facts alone: no other node's value is in them, so an
    unauthenticated run may still show them (on the master)."""
    if me not in merged:
        return set()
    alone = {me: copy.deepcopy(merged[me])}
    return {r.fix for r in runner.compare_all(plan.checks, alone, plan.opts_by_check, run=run_settings) if r.fix}


def withhold(result: dict, why: str) -> dict:
    """A result whose fix is not shown: its finding stays; ``fix_withheld`` says why (the renderers show it)."""
    if not result.get("fix"):
        return dict(result)
    return dict(result, fix="", fix_withheld=result.get("fix_withheld") or why)


def withhold_fixes(doc: dict, why: str, keep=lambda r: False) -> dict:
    """Withhold every fix of ``doc``'s results but those ``keep`` accepts; its groups are made again."""
    from ..grouping import group_results

    doc["results"] = [r if keep(r) else withhold(r, why) for r in doc["results"]]
    doc["groups"] = group_results(doc["results"], len(doc["nodes"]))
    return doc


def published(doc: dict) -> dict:
    """What the master sends every node: the verdict and each node's exports (the gate reads its interface),
    without the bulky raw facts and comparables (packages, env: ~10 KB a node)."""
    bulky = ("facts", "gather", "comparable", "contract_errors")
    return {k: doc[k] for k in ("results", "verdict", "exit_code", "advice", "scope", "run_id", "auth") if k in doc} | {
        "nodes": {n: {k: v for k, v in d.items() if k not in bulky} for n, d in doc["nodes"].items()}}


# Why a fix is not shown (a result's ``fix_withheld``; the terminal and the HTML report show it in its place).
WITHHELD_OPEN = ("this run was not authenticated, so the facts this fix would be built from could be forged "
                 "(anyone who reaches the rendezvous port can write them); rerun with DDPDOCTOR_TOKEN set on every "
                 "node to see it")
WITHHELD_UNVERIFIED = ("this node cannot tell the master's message from a forgery (it has neither --token nor the "
                       "run's key file); read the fix in the master's output, or rerun with DDPDOCTOR_TOKEN set on "
                       "every node")


def worker_document(plan, run_settings: dict, verdict: dict, timings: dict, this_node: str,
                    findings: list[Finding], auth: dict | None = None, advice_fn=None, verified: bool = True) -> dict:
    """A non-master node's document: the master's verdict, plus what this node itself refused to read.
    Unauthenticated (``auth``), no command from the master is printed: fixes are withheld and the lines to
    paste are built here, from the verdict's structured fields (``advice_fn``). Not ``verified`` (this node
    could not check the master's signature): the verdict is shown as the master's message claims it, and
    the exit code is NOT_VERIFIED, never 0."""
    trusted = auth is None or auth.get("authenticated", False)
    why = WITHHELD_OPEN if verified else WITHHELD_UNVERIFIED
    results = [r if trusted else withhold(r, why) for r in verdict["results"]]
    results += [r.to_json() for r in finding_results(findings, f"node {this_node}")]
    exit_code = verdict["exit_code"] if verified else ExitCode.NOT_VERIFIED
    level = verdict["verdict"]
    if findings and level == "pass":
        level = "warn"
    from ..grouping import group_results

    advice = verdict.get("advice", [])
    if not trusted:
        advice = advice_fn(results) if advice_fn is not None else []
    extra = {"auth": dict(auth, verdict_verified=verified)} if auth is not None else {}
    return documents.envelope("preflight", run_id=verdict.get("run_id"), scope="cluster", run=run_settings,
                          verdict=level, exit_code=exit_code,
                          checks=[lc.describe() for lc in plan.checks], nodes=verdict["nodes"], results=results,
                          groups=group_results(results, len(verdict["nodes"])),
                          advice=advice, timings=timings, this_node=this_node, role="worker", **extra)
