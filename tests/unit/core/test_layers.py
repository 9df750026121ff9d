"""The package's import structure: no cycles between ddpdoctor modules, and the layers of ARCHITECTURE.md.

Every import counts, the ones inside functions too (a function-level import is still a dependency; it only
hides a cycle from the interpreter until the function runs). The layers, top to bottom:

    cli        ddpdoctor.cli.*, __main__: may import anything
    engines    preflight, runner, cluster/, bench/, launch/, forensics/ (anything not named below): no cli, no
               rendering; inside forensics/: evidence/ at the bottom, judge/ above it, live/, postmortem/ and
               attach/ side by side on top; nothing of forensics/ imports launch/
    rendering  report/ (its console_*.py too): documents and below only, never an engine
    documents  the envelope, shapes, inputs, the exports contract's readers, the plugin API and the other
               leaves below: nothing above them
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "ddpdoctor"

RENDERING = ("ddpdoctor.report", "ddpdoctor.report.console_bench", "ddpdoctor.report.console_trainer")
DOCUMENTS = {"ddpdoctor", "ddpdoctor.api", "ddpdoctor.errors", "ddpdoctor.exitcodes", "ddpdoctor.documents",
             "ddpdoctor.shapes", "ddpdoctor.inputs", "ddpdoctor.grouping", "ddpdoctor.devices",
             "ddpdoctor.exports", "ddpdoctor.registry", "ddpdoctor.settings", "ddpdoctor.baseline",
             "ddpdoctor.lifetime", "ddpdoctor.text", "ddpdoctor.majority", "ddpdoctor.options",
             "ddpdoctor.check_helpers", "ddpdoctor.numbers", "ddpdoctor.human", "ddpdoctor.rank_lists", "ddpdoctor.trust",
             "ddpdoctor.shared_libs"}
# The launcher table (one module per launcher) sits with the documents: checks reach it through ddpdoctor.api;
# so does redaction (one module per rule set), which everything applies before a fact or a text leaves.
DOCUMENT_PACKAGES = ("ddpdoctor.launchers", "ddpdoctor.redaction")

# Known exceptions, each with its reason.
# An entry that no longer occurs must be deleted here (test_allowlists_are_not_stale), so none outlives its fix.
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()
ALLOWED_LAYER_EDGES = {
    # The plugin API's helpers (check_helpers.py, re-exported by api) as a facade over the engine's own code
    # (function-level imports): time exchange, connect probe, lookup, the launcher's environment, the
    # collective harness. Their code could move below the API; the engine imports nothing back (no cycle).
    ("ddpdoctor.check_helpers", "ddpdoctor.cluster.endpoint"),
    ("ddpdoctor.check_helpers", "ddpdoctor.cluster.probe"),
    ("ddpdoctor.check_helpers", "ddpdoctor.bench.harness"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(module: str, path: Path, node: ast.AST) -> list[str]:
    """The dotted names one import statement reaches (``from . import x`` names the module ``pkg.x``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)] if node.level else []
    target = ".".join(base + ([node.module] if node.module else []))
    return [f"{target}.{a.name}" for a in node.names] + [target]


def import_graph() -> dict[str, set[str]]:
    """module -> the ddpdoctor modules it imports, at any depth of its code (parsed once per test process: every
    test here reads it, 0.4 CPU-s each)."""
    return {module: set(deps) for module, deps in _parsed_graph().items()}


@functools.lru_cache(maxsize=1)
def _parsed_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = _targets(module, path, node)
            if isinstance(node, ast.ImportFrom):  # `from pkg import name`: the submodule if it is one, else pkg
                names = [n for n in names[:-1] if n in mods] or names[-1:]
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name != module and name.startswith("ddpdoctor"):
                    deps.add(name)
        graph[module] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer(module: str) -> str:
    if module == "ddpdoctor.__main__" or module.startswith("ddpdoctor.cli"):
        return "cli"
    if any(module == r or module.startswith(r + ".") for r in RENDERING):
        return "rendering"
    if module in DOCUMENTS or any(module == p or module.startswith(p + ".") for p in DOCUMENT_PACKAGES):
        return "documents"
    return "engines"


# What each layer may import (besides itself).
MAY_IMPORT = {"cli": {"cli", "engines", "rendering", "documents"}, "engines": {"engines", "documents"},
              "rendering": {"rendering", "documents"}, "documents": {"documents"}}


def _without(graph: dict[str, set[str]], edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    return {m: {d for d in deps if (m, d) not in edges} for m, deps in graph.items()}


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "ddpdoctor.exports" in graph["ddpdoctor.report.views.clock"]  # from ...exports import ...
    assert "ddpdoctor.registry" in graph["ddpdoctor.exports"]  # imported inside _installed_checks
    assert "ddpdoctor.forensics.judge.attribution" in graph["ddpdoctor.forensics.postmortem.analysis"]  # from . import attribution


def test_cycle_finder_finds_a_planted_cycle():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(planted) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_ddpdoctor_modules():
    found = cycles(_without(import_graph(), ALLOWED_CYCLE_EDGES))
    assert not found, "import cycles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_import_only_downwards():
    graph = _without(import_graph(), ALLOWED_LAYER_EDGES)
    wrong = sorted(f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in graph.items() for d in deps
                   if layer(d) not in MAY_IMPORT[layer(m)])
    assert not wrong, "imports against ARCHITECTURE.md's layers:\n" + "\n".join(wrong)


def test_rendering_never_imports_the_engine():
    graph = import_graph()
    for module in (m for m in graph if layer(m) == "rendering"):
        assert not {d for d in graph[module] if layer(d) in ("engines", "cli")}, module


@pytest.mark.parametrize("allowed", [ALLOWED_CYCLE_EDGES, ALLOWED_LAYER_EDGES], ids=["cycles", "layers"])
def test_allowlists_are_not_stale(allowed):
    graph = import_graph()
    stale = sorted(f"{a} -> {b}" for a, b in allowed if b not in graph.get(a, set()))
    assert not stale, f"fixed: delete from the allowlist: {stale}"


def test_the_cluster_engine_sits_below_the_preflight_command_and_the_renderers():
    """The protocol runs the plan it is given: it imports neither preflight.py above it nor a renderer nor the
    CLI (Plan and gather come from the runner, display-safe text from text.py)."""
    graph = import_graph()
    above = ("ddpdoctor.preflight", "ddpdoctor.report", "ddpdoctor.cli")
    wrong = {m: sorted(d for d in deps if d.startswith(above))
             for m, deps in graph.items() if m.startswith("ddpdoctor.cluster")}
    assert {m: d for m, d in wrong.items() if d} == {}
    assert "ddpdoctor.runner" in graph["ddpdoctor.cluster.node"]


FORENSICS = "ddpdoctor.forensics"
# forensics/ from the bottom: each may import its own sub-package and those listed, nothing else of forensics/.
FORENSICS_MAY_IMPORT = {"evidence": set(), "judge": {"evidence"}, "live": {"evidence", "judge"},
                        "postmortem": {"evidence", "judge"}, "attach": {"evidence", "judge"}}


def _forensics_part(module: str) -> str | None:
    if not module.startswith(FORENSICS + "."):
        return None
    return module[len(FORENSICS) + 1:].split(".")[0]


def test_forensics_layers_evidence_judge_then_the_three_entry_points():
    """ARCHITECTURE.md's forensics: evidence/ imports nothing above it, judge/ no entry point, the entry points
    (live, postmortem, attach) none of each other; nothing in forensics/ imports launch/ (run-trainer's launching
    sits on top of the forensics, never below)."""
    graph = import_graph()
    wrong = []
    for module, deps in graph.items():
        part = _forensics_part(module)
        if part is None:
            continue
        for dep in deps:
            if dep.startswith("ddpdoctor.launch.") or dep == "ddpdoctor.launch":
                wrong.append(f"{module} imports {dep} (launch/)")
            other = _forensics_part(dep)
            if other and other != part and other not in FORENSICS_MAY_IMPORT[part]:
                wrong.append(f"{module} ({part}) imports {dep} ({other})")
    assert not wrong, "\n".join(sorted(wrong))
    assert set(FORENSICS_MAY_IMPORT) == {p.name for p in (PACKAGE / "forensics").iterdir() if p.is_dir()
                                         and (p / "__init__.py").exists()}
