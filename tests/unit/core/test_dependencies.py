"""Every third-party import the project makes is a declared dependency, and CI installs per README.

A fresh venv only has what pyproject declares: an import that works here only because this Python happens
to have the package (numpy, which torch 2.14 no longer brings) breaks a user's first run.
"""
from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("ddpdoctor", "checks", "reference_trainer")
OWN = {"ddpdoctor", "ddpdoctor_checks", "ddpdoctor_trainer"}
# Modules reached other than by an import statement: Tensor.numpy() needs numpy installed.
IMPLICIT = {"numpy": re.compile(r"\.numpy\(\)")}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[\s<>=!~;\[]", dep, maxsplit=1)[0] for dep in project["dependencies"]}
    return {_norm(n) for n in names}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> dict[str, str]:
    """Top-level module -> the first file importing it, over every module the package ships."""
    found: dict[str, str] = {}
    for src in SOURCES:
        for path in sorted((ROOT / src).rglob("*.py")):
            text = path.read_text()
            for node in ast.walk(ast.parse(text)):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
            for module, pattern in IMPLICIT.items():
                if pattern.search(text):
                    found.setdefault(module, str(path.relative_to(ROOT)))
    return found


def _third_party(modules: dict[str, str]) -> dict[str, str]:
    return {m: where for m, where in modules.items() if m not in sys.stdlib_module_names and m not in OWN}


def test_every_third_party_import_is_declared():
    dists = metadata.packages_distributions()
    declared = _declared()
    missing = []
    for module, where in sorted(_third_party(_imported_modules()).items()):
        if module == "tomli":  # declared with a marker (Python < 3.11 only), imported under the same guard
            continue
        owners = {_norm(d) for d in dists.get(module, [])} or {_norm(module)}
        if not owners & declared:
            missing.append(f"{module} (imported by {where}; distribution {', '.join(sorted(owners))})")
    assert not missing, "undeclared dependencies: " + "; ".join(missing)


def test_numpy_is_declared_for_the_trainer_checksums():
    assert "numpy" in _third_party(_imported_modules())
    assert "numpy" in _declared()


def _quick_start() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_ci_runs_readme_commands_in_a_fresh_venv():
    ci = (ROOT / ".ci" / "run").read_text()
    install, test = _quick_start()
    assert install == "pip install . && ddpdoctor preflight"
    assert "pip install -q ." in ci and "ddpdoctor preflight" in ci
    assert "&& ddpdoctor report)" in ci  # the installed package builds a report from the result it kept
    # four tests at a time (pytest-xdist), a file's tests spread unless they share a module fixture (loadgroup)
    assert test == "pip install -e '.[test]' && python3 -m pytest -q -n 4 --dist loadgroup"
    assert "pip install -q -e '.[test]' && python3 -m pytest -q -n 4 --dist loadgroup ||" in ci
    assert re.search(r"python3 -m venv \S+", ci) and "system-site-packages" not in ci
    assert "source " in ci and "/bin/activate" in ci


@pytest.mark.parametrize("dep", ["torch", "click", "rich", "jinja2", "markupsafe", "psutil", "nvidia-ml-py"])
def test_core_dependencies_declared(dep):
    assert dep in _declared()


def test_every_package_of_the_sources_is_installed():
    """`pip install .` ships only the packages pyproject lists: a subpackage missing there works in the
    editable install the tests use and fails for a user (ddpdoctor.report.views: `ddpdoctor report` exit 4)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    missing = []
    for name, src in tool["package-dir"].items():
        for init in sorted((ROOT / src).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / src).parts
            package = ".".join((name, *parts))
            if "__pycache__" not in parts and package not in listed:
                missing.append(f"{package} ({init.parent.relative_to(ROOT)})")
    assert not missing, "packages pip install . would leave out: " + ", ".join(missing)
