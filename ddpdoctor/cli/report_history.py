"""`ddpdoctor report --history`: every node's history under --results-dir (the unattended node check's records,
preflight and nccl-bench results): one line per finding here, the page with each node's trend beside the results."""
from __future__ import annotations

import sys
from pathlib import Path

from ..exitcodes import ExitCode
from ..text import safe_text
from . import common


def history_report(results_dir: str, output: str | None) -> int:
    from ..history import collect
    from ..report.html import write_history_html
    from ..report.views.history import console_lines, history_view

    root = Path(results_dir)
    if output is None:
        _refuse_others_folder(root)
    target = common.ensure_writable_file(output or str(root / "history.html"), "-o/--output")
    data = collect(root, progress=None if common.STATE.quiet else _progress)
    write_history_html(data, target)
    if not common.STATE.quiet:
        from rich.text import Text

        for line in console_lines(history_view(data)):  # node names, run ids, summaries: what files say
            common.console().print(Text(safe_text(line)), soft_wrap=True)
        common.console().print(Text(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB)"), soft_wrap=True)
    return ExitCode.OK


def _refuse_others_folder(root: Path) -> None:
    """As root, the page is not written into a folder another user can write (a link there would take it
    elsewhere): -o names where."""
    from ..errors import UsageError
    from ..trust import guard_dir

    try:
        guard_dir(root, "--results-dir")
    except UsageError as exc:
        raise UsageError(f"{exc}; or write the page elsewhere with -o FILE") from None


def _progress(done: int, total: int) -> None:
    """Reading result files not yet in the index (a first run over many): a line now and then on stderr."""
    if total >= 1000:
        print(f"indexing result files: {done}/{total}", file=sys.stderr, flush=True)
