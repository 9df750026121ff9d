"""Packaging and plugins for real: the plugin guide's example (checks/PLUGINS.md) and a broken plugin installed with pip into a
target directory and run through the CLI; a built wheel installs ddpdoctor_checks and ddpdoctor_trainer."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pip_install(project: Path, target: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(project)], check=True, capture_output=True, timeout=300)


def ddpdoctor(target: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def write_project(root: Path, name: str, entry_points: str, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.3.0"\n\n{entry_points}\n'
        '[tool.setuptools]\npackages = ["' + '", "'.join(sorted({f.split("/")[0] for f in files})) + '"]\n')
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def readme_plugin_example() -> tuple[str, str]:
    """The plugin guide's code and its entry-point table (checks/PLUGINS.md, linked from README), exactly as a
    user would copy them."""
    text = (ROOT / "checks" / "PLUGINS.md").read_text()
    code = re.search(r"```python\n(# my_checks/hugepages.py\n.*?)```", text, re.S).group(1)
    toml = re.search(r"```toml\n# pyproject.toml of your distribution\n(.*?)```", text, re.S).group(1)
    return code, toml


def plugin_cluster_example() -> tuple[str, str]:
    """The plugin guide's cluster-check example and its entry-point table, exactly as written there."""
    text = (ROOT / "checks" / "PLUGINS.md").read_text()
    code = re.search(r"```python\n(# my_checks/master_rtt.py\n.*?)```", text, re.S).group(1)
    toml = re.search(r"```toml\n# pyproject.toml of a distribution with the cluster check\n(.*?)```", text,
                     re.S).group(1)
    return code, toml


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    base = tmp_path_factory.mktemp("plugins")
    target = base / "site"
    code, toml = readme_plugin_example()
    pip_install(write_project(base / "hp", "ddpdoctor-hugepages", toml,
                              {"my_checks/__init__.py": "", "my_checks/hugepages.py": code}), target)
    broken_eps = ('[project.entry-points."ddpdoctor.checks"]\n'
                  'broken-import = "broken_plugin.bad_import:Nope"\n'
                  'broken-compare = "broken_plugin.bad_compare:RaisesInCompare"\n')
    pip_install(write_project(base / "broken", "ddpdoctor-broken-plugin", broken_eps, {
        "broken_plugin/__init__.py": "",
        "broken_plugin/bad_import.py": "raise RuntimeError('plugin exploded at import')\n",
        "broken_plugin/bad_compare.py": (
            "from ddpdoctor.api import Check\n"
            "class RaisesInCompare(Check):\n"
            "    name = 'broken-compare'\n    description = 'raises in compare'\n"
            "    def gather(self, ctx):\n        return {'x': 1}\n"
            "    def compare(self, facts_by_node, opts):\n        raise ZeroDivisionError('oops')\n"),
    }), target)
    return target


@pytest.mark.timeout(300)
def test_readme_plugin_is_listed_and_runs(plugins):
    p = ddpdoctor(plugins, "checks")
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "hugepages" in ln)
    assert "ddpdoctor-hugepages" in line
    p = ddpdoctor(plugins, "preflight", "--only", "hugepages", "--json")
    doc = json.loads(p.stdout)
    (r,) = doc["results"]
    assert r["check"] == "hugepages" and r["level"] in ("pass", "warn")
    mode = json.loads(p.stdout)["nodes"][doc["results"][0]["nodes"][0]]["facts"]["hugepages"]["mode"]
    assert mode in ("always", "madvise", "never")
    # An option set on the command line reaches compare: accept nothing, and the same mode warns.
    p = ddpdoctor(plugins, "preflight", "--only", "hugepages", "--json", "--set", "hugepages.allowed=none")
    assert json.loads(p.stdout)["results"][0]["level"] == "warn"
    assert p.returncode == 0  # warnings do not fail


@pytest.mark.timeout(300)
def test_broken_plugins_become_fail_results_not_crashes(plugins):
    p = ddpdoctor(plugins, "preflight", "--only", "broken-import,broken-compare,env-vars", "--json")
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    results = {r["check"]: r for r in json.loads(p.stdout)["results"]}
    assert results["broken-import"]["level"] == "fail"
    assert "ddpdoctor-broken-plugin" in results["broken-import"]["summary"] + results["broken-import"]["fix"]
    assert "plugin exploded" in json.dumps(results["broken-import"])
    assert results["broken-compare"]["level"] == "fail" and "ZeroDivisionError" in results["broken-compare"]["summary"]
    assert results["env-vars"]["level"] in ("pass", "warn")
    p = ddpdoctor(plugins, "checks")
    assert p.returncode == 0 and "broken-import" in p.stdout


@pytest.mark.timeout(600)
def test_built_wheel_installs_checks_and_trainer_under_their_own_names(tmp_path):
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                              ".pytest_cache", ".benchmarks", "dist"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, timeout=500)
    (wheel,) = dist.glob("ddpdoctor-*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("ddpdoctor_checks/") for n in names)
    assert any(n.startswith("ddpdoctor_trainer/") for n in names)
    assert not any(n.startswith(("checks/", "reference_trainer/", "tests/")) for n in names)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = ("import ddpdoctor, ddpdoctor_checks, ddpdoctor_trainer, ddpdoctor_checks.packages as p\n"
             "from ddpdoctor import registry\n"
             "print(ddpdoctor.__file__); print(ddpdoctor_checks.__file__); print(ddpdoctor_trainer.__file__)\n"
             "print(sorted(lc.name for lc in registry.discover() if not lc.check.description.startswith('(plugin')))\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for line in lines[:3]:
        assert line.startswith(str(site)), lines
    assert "torch-build" in lines[3] and "collective" in lines[3]
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--only", "packages,env-vars", "--json"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["verdict"] == "pass", p.stderr


@pytest.mark.timeout(300)
def test_plugin_guide_cluster_check_runs_in_a_two_node_cluster(tmp_path):
    target = tmp_path / "site"
    code, toml = plugin_cluster_example()
    pip_install(write_project(tmp_path / "rtt", "ddpdoctor-master-rtt", toml,
                              {"my_checks/__init__.py": "", "my_checks/master_rtt.py": code}), target)
    p = ddpdoctor(target, "checks")
    assert p.returncode == 0, p.stderr
    assert "ddpdoctor-master-rtt" in next(ln for ln in p.stdout.splitlines() if "master-rtt" in ln)
    # Two nodes on this machine, started by --local-nodes: the plugin's gather runs on both, after they met.
    p = ddpdoctor(target, "preflight", "--local-nodes", "2", "--only", "master-rtt", "--timeout", "30", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert len(doc["nodes"]) == 2 and doc["local_nodes"]["exit_codes"] == [0, 0]
    master = next(n for n, d in doc["nodes"].items() if d["rank"] == 0)
    for name, node in doc["nodes"].items():
        facts = node["facts"]["master-rtt"]
        assert facts["ok"] is True and facts["master"] == master and facts["rtt_ms"] >= 0, facts
        assert node["exports"]["master-rtt"] == {"summary": {"master RTT": f"{facts['rtt_ms']:.2f} ms"}}
    (r,) = [r for r in doc["results"] if r["check"] == "master-rtt"]
    assert r["level"] == "pass" and sorted(r["nodes"]) == sorted(doc["nodes"]), r
    assert r["summary"].startswith("every node connects to the master; slowest ")
    # An option set on the command line reaches every node's compare: no connect is fast enough, both warn.
    p = ddpdoctor(target, "preflight", "--local-nodes", "2", "--only", "master-rtt", "--timeout", "30", "--json",
                  "--set", "master-rtt.warn_ms=0")
    doc = json.loads(p.stdout)
    warned = sorted(n for r in doc["results"] if r["check"] == "master-rtt" and r["level"] == "warn"
                    for n in r["nodes"])
    assert warned == sorted(doc["nodes"]), doc["results"]


CONTRACT_PROBE = r"""
import json
from ddpdoctor import documents, registry, runner
from ddpdoctor.report import viewmodel as view

checks = {lc.name: lc for lc in registry.discover()}
chosen = [checks["hugepages"], checks["parity"]]
nodes = {}
for rank, (name, mode) in enumerate((("node0", "madvise"), ("node1", "madvise"), ("node2", "always"))):
    facts = {"hugepages": {"mode": mode}, "parity": {"ddpdoctor": "0.1.0", "checks": ["hugepages", "parity"]}}
    # What a node's runner sends: each gather's outcome with the check's contract computed from its facts.
    gather = {c: {"status": "ok", **runner.contract(checks[c].check, f)} for c, f in facts.items()}
    nodes[name] = {"rank": rank, "host": name, "addr": None, "facts": facts, "gather": gather}
results = runner.compare_all(chosen, nodes, {}, run={"nnodes": 3})
doc = documents.preflight_doc(scope="cluster", nodes=nodes, checks=[], results=results, run={"nnodes": 3})
merged = view.merge_nodes([doc])
print(json.dumps({"doc": doc, "table": view.versions_table(merged), "diff": view.facts_diff(merged)}))
"""


@pytest.mark.timeout(300)
def test_readme_plugin_takes_part_in_parity_and_the_report_through_its_contract(plugins):
    # A real run on this node: the document carries the plugin's exports and comparables beside its facts.
    p = ddpdoctor(plugins, "preflight", "--only", "hugepages", "--json")
    doc = json.loads(p.stdout)
    (node,) = doc["nodes"].values()
    mode = node["facts"]["hugepages"]["mode"]
    assert node["exports"]["hugepages"] == {"summary": {"THP": mode}}
    assert node["comparable"]["hugepages"] == {"mode": mode}
    # Three nodes, one with another mode: parity (which knows nothing of the plugin) names the odd node.
    env = {**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run([sys.executable, "-c", CONTRACT_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    parity = [r for r in out["doc"]["results"] if r["check"] == "parity" and r["level"] == "fail"]
    assert [r["nodes"] for r in parity] == [["node2"]]
    assert parity[0]["summary"] == "hugepages mode on node2 differs: 'always' vs 'madvise' on the others"
    assert out["doc"]["nodes"]["node2"]["exports"]["hugepages"] == {"summary": {"THP": "always"}}
    # The report: the plugin's cell in the per-node table (odd on node2) and its key in the facts that differ.
    table = out["table"]
    assert "THP" in table["columns"]
    col = table["columns"].index("THP")
    odd = [r for r in table["rows"] if r["nodes"] == ["node2"]]
    assert odd and odd[0]["cells"][col] == {"value": "always", "odd": True}
    diff = {d["fact"]: d for d in out["diff"]}
    assert diff["hugepages.mode"]["majority"] == "madvise" and diff["hugepages.mode"]["odd"] == [
        {"node": "node2", "value": "always"}]
