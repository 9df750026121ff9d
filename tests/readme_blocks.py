"""README's "Run it unattended" blocks, as the tests that run them read them: the slurm.conf lines, the
Prometheus lines, and the node-problem-detector config UNATTENDED.md holds (so what README shows is what the tests run)."""
from __future__ import annotations

import json
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
UNATTENDED = README.parent / "ddpdoctor" / "unattended" / "UNATTENDED.md"
SECTION = "## 6. Run it unattended"


def blocks() -> list[str]:
    """The fenced code blocks of the section, in order."""
    text = README.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [part.split("\n", 1)[1] for part in text.split("```")[1::2]]


def slurm_conf() -> str:
    return next(b for b in blocks() if "HealthCheckProgram=" in b)


def site_config() -> str:
    """The site config README puts beside the slurm.conf lines (/etc/ddpdoctor/ddpdoctor.toml on every node)."""
    return next(b for b in blocks() if b.startswith("[node-check]"))


def npd_config() -> dict:
    """node-problem-detector's custom plugin config, in UNATTENDED.md's "Exit codes for other monitors"."""
    text = UNATTENDED.read_text().split("## Exit codes for other monitors", 1)[1].split("\n## ", 1)[0]
    return json.loads(next(b.split("\n", 1)[1] for b in text.split("```")[1::2] if '"plugin": "custom"' in b))


def prometheus_lines() -> list[list[str]]:
    """Each command line of the Prometheus block, as argv (the comment after # dropped)."""
    block = next(b for b in blocks() if "--prometheus-textfile" in b)
    return [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]
