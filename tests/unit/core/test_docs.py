"""The docs name only files that exist: every module path in backticks (`judge/sizes/kept.py`) and every relative
link ([SCHEMA.md](ddpdoctor/SCHEMA.md)) of README.md and the package's and tests' .md files resolves to a file or
folder of this checkout (issue 55 item 9: docs named modules that had moved)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted([ROOT / "README.md", *(ROOT / "ddpdoctor").rglob("*.md"), *(ROOT / "checks").glob("*.md"),
               *(ROOT / "tests").rglob("*.md")])
# Where a path in a doc is read from, besides the doc's own folder: the repository, the package, the forensics
# (FORENSICS.md and ARCHITECTURE.md name its modules by their subpackage), the tests.
BASES = ("", "ddpdoctor", "ddpdoctor/forensics", "tests", "tests/unit")
# Paths in another project's tree, named where ddpdoctor is compared with it (tests/benchmarks/README.md: NVRx).
ELSEWHERE = {"src/nvidia_resiliency_ext/attribution/trace_analyzer/fr_attribution.py", "attribution/base.py",
             "inprocess/attribution.py", "orchestration/config.py", "fr_attribution.py", "api_keys.py", "job.py",
             "logging_utils.py", "path_utils.py"}
CODE = re.compile(r"`([^`\n]+)`")
MODULE = re.compile(r"(?<![\w./<>*{-])([\w.-]+(?:/[\w.-]+)*\.py)\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _names() -> set[str]:
    return {p.name for p in ROOT.rglob("*.py") if ".git" not in p.parts}


def _exists(doc: Path, path: str) -> bool:
    return any((base / path).exists() for base in (doc.parent, *(ROOT / b for b in BASES)))


def _missing(doc: Path, names: set[str]) -> list[str]:
    text = doc.read_text()
    wrong = []
    for span in CODE.findall(text):
        for path in MODULE.findall(span):
            if path in ELSEWHERE or (path.startswith("ddpdoctor_") and "/" not in path):
                continue
            known = _exists(doc, path) if "/" in path else path in names
            if not known:
                wrong.append(f"`{path}`")
    for target in LINK.findall(text):
        if not target.startswith(("http://", "https://", "mailto:")) and not (doc.parent / target).exists():
            wrong.append(f"link {target}")
    return wrong


@pytest.mark.timeout(60)
def test_every_module_path_and_link_in_the_docs_exists():
    assert DOCS, "no .md file found"
    names = _names()
    wrong = {str(d.relative_to(ROOT)): w for d in DOCS if (w := _missing(d, names))}
    assert not wrong, f"the docs name files that do not exist: {wrong}"


def test_a_moved_module_is_caught():
    """The check itself: a path that does not exist is reported, one that does is not."""
    doc = ROOT / "ddpdoctor" / "forensics" / "FORENSICS.md"
    assert _exists(doc, "judge/sizes/kept.py") and _exists(doc, "launch/size_watch.py")
    assert not _exists(doc, "judge/sizes.py")
