"""The user's code of the job being read: its entry script and that script's or module's package, wherever it is
installed. A frame under site-packages is a library's, unless it is in this package (`pip install .` of the
user's project, `-m mypkg.train`, the reference trainer installed with ddpdoctor): its frames are where the user's
code stands. Declared once per process by the collector that knows the job (run-trainer, attach, postmortem)."""
from __future__ import annotations

import os
import re

INSTALLED = ("/site-packages/", "/dist-packages/")
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PACKAGES: set[str] = set()


def declare(script: str | None = None, module: str | None = None) -> None:
    """The job's entry: ``module`` (`-m pkg.train`: package ``pkg``) or ``script`` (a path; under site-packages,
    the package it is in). Replaces what was declared before (one job per process)."""
    _PACKAGES.clear()
    if module and MODULE.match(module):
        _PACKAGES.add(module.split(".")[0])
    if script:
        top = installed_top(script.replace(os.sep, "/"))
        if top:
            _PACKAGES.add(top)


def declare_argv(argv: list[str]) -> None:
    """The entry from a rank's command line: `python [opts] -m pkg.mod ...` or `python [opts] script.py ...`,
    through run-trainer's bootstrap (`-m ddpdoctor.launch.bootstrap (SCRIPT | -m MODULE)`)."""
    script, module = entry_of(argv)
    declare(script, module)


def entry_of(argv: list[str]) -> tuple[str | None, str | None]:
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        if arg == "-m":
            module = args.pop(0) if args else ""
            if module == "ddpdoctor.launch.bootstrap":
                return entry_of(["bootstrap", *args])
            return None, module or None
        if arg in ("-X", "-W"):
            args = args[1:]
        elif arg == "-c":
            return None, None
        elif not arg.startswith("-"):
            return arg, None
    return None, None


def installed_top(path: str) -> str | None:
    """The top-level package (or module) a path under site-packages belongs to, else None."""
    for marker in INSTALLED:
        at = path.rfind(marker)
        if at >= 0:
            top = path[at + len(marker):].split("/", 1)[0]
            return top[:-3] if top.endswith(".py") else top
    return None


def is_users(file: str) -> bool:
    """A frame's file is in the job's own installed package."""
    if not _PACKAGES or not file:
        return False
    top = installed_top(file.replace("\\", "/"))
    return top is not None and top in _PACKAGES
