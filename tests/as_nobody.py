"""Running a command as another user (nobody, through setpriv) in tests: the argv prefix, or why it cannot run
here. The interpreter and the checkout must be reachable by that user (CI's venv lives in a mktemp folder,
which .ci/run opens to others); where they are not, the test says so and skips instead of failing on it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def why_not() -> str | None:
    """None when ``NOBODY + [sys.executable, ...]`` can import this checkout's ddpdoctor."""
    if os.geteuid() != 0:
        return "needs root to run a command as another user"
    if not shutil.which("setpriv"):
        return "root without setpriv: cannot run as another user"
    import ddpdoctor

    env = {**os.environ, "PYTHONPATH": str(Path(ddpdoctor.__file__).parents[1])}
    p = subprocess.run([*NOBODY, sys.executable, "-c", "import ddpdoctor"], capture_output=True, text=True,
                       timeout=60, env=env, cwd="/")
    if p.returncode != 0:
        return f"nobody cannot run {sys.executable} with this checkout: {p.stderr.strip()[-300:]}"
    return None
