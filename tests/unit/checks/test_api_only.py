"""The plugin API is the only door: every built-in check (and its support modules) imports nothing of ddpdoctor
but ``ddpdoctor.api``, and the engine's cluster view is what ``ddpdoctor.api.ClusterContext`` promises."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from ddpdoctor import api

CHECKS = Path(__file__).resolve().parents[3] / "checks"


def ddpdoctor_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every ddpdoctor module or name an import statement anywhere in the tree takes
    (inside functions too): ``import ddpdoctor.x`` -> ddpdoctor.x, ``from ddpdoctor import x`` -> ddpdoctor.x."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ddpdoctor"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "ddpdoctor":
                found += [(node.lineno, f"ddpdoctor.{a.name}") for a in node.names]
            elif node.module.split(".")[0] == "ddpdoctor":
                found.append((node.lineno, node.module))
    return found


def test_the_scanner_sees_every_form_of_import():
    src = ("import ddpdoctor.cluster.probe\nfrom ddpdoctor import __version__\nfrom ddpdoctor.api import Check\n"
           "def f():\n    from ddpdoctor.nccl_log import x\n    import ddpdoctor\n"
           "from .support import nvml\nimport os\n")
    assert ddpdoctor_imports(ast.parse(src)) == [
        (1, "ddpdoctor.cluster.probe"), (2, "ddpdoctor.__version__"), (3, "ddpdoctor.api"),
        (5, "ddpdoctor.nccl_log"), (6, "ddpdoctor")]


def test_checks_import_only_the_plugin_api():
    modules = sorted(CHECKS.rglob("*.py"))
    assert len(modules) > 20 and any(m.parent.name == "support" for m in modules)
    bad = {f"{m.relative_to(CHECKS)}:{line}": name for m in modules
           for line, name in ddpdoctor_imports(ast.parse(m.read_text(), str(m))) if name != "ddpdoctor.api"}
    assert not bad, f"checks reach past ddpdoctor.api (make what they need public there): {bad}"


def test_engine_cluster_view_is_a_cluster_context():
    from ddpdoctor.cluster.view import ClusterView

    node = {"name": "node0", "rank": 0, "host": "h", "addr": "127.0.0.1", "probe_port": 1}
    view = ClusterView(me=node, nodes=[node], master=node, endpoint="127.0.0.1:29500")
    assert isinstance(view, api.ClusterContext)
    # Every attribute the protocol declares is a field of the engine's view (a renamed field fails here).
    fields = {f.name for f in dataclasses.fields(ClusterView)}
    declared = set(api.ClusterContext.__annotations__)
    assert declared <= fields, declared - fields
    assert view.world_size == 1 and view.peers_to_probe() == []
    assert set(api.RosterNode.__annotations__) >= {"name", "rank", "host", "addr", "probe_port"}


@pytest.mark.timeout(30)
def test_network_helpers_against_a_real_probe_listener():
    from ddpdoctor.cluster.probe import ProbeServer

    with ProbeServer("127.0.0.1") as probe:
        res = api.connect_probe("127.0.0.1", probe.port, 2.0, source="127.0.0.1")
        assert res.ok and res.rtt_ms is not None and res.error_class is None
        samples = api.time_exchange("127.0.0.1", probe.port, 3, timeout=2.0)
        assert len(samples) == 3
        best = api.best_sample(samples)
        assert best.rtt_ms == min(s.rtt_ms for s in samples) and abs(best.offset_ms) < 1000
    closed = api.connect_probe("127.0.0.1", probe.port, 1.0)
    assert not closed.ok and closed.error_class == "refused"
    assert "start the master" in api.connect_fix("refused") and api.connect_fix("nonsense") == ""
    assert api.best_sample([]) is None


@pytest.mark.timeout(30)
def test_lookup_route_and_small_helpers():
    res = api.lookup("forward", "localhost", cap_s=5.0)
    assert set(res) == {"kind", "query", "answer", "error", "seconds"} and res["kind"] == "forward"
    assert res["error"] or any(api.is_loopback(a) for a in res["answer"])
    assert api.is_loopback("127.0.0.2") and api.is_loopback("::1") and not api.is_loopback("198.18.0.1")
    assert not api.is_loopback("not-an-address")
    assert api.route_source_addr("127.0.0.1") == "127.0.0.1"
    from ddpdoctor.cluster import endpoint

    assert endpoint.LOOKUP_CAP_S == api.LOOKUP_CAP_S  # one value
    assert api.redact_env({"HF_TOKEN": "hf_abc", "NCCL_DEBUG": "INFO"}) == {"HF_TOKEN": api.REDACTED,
                                                                           "NCCL_DEBUG": "INFO"}
    assert api.nnodes_from_world({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}) == 2
    assert api.nnodes_from_world({}) is None
    import ddpdoctor

    assert api.TOOL_VERSION == ddpdoctor.__version__


@pytest.mark.timeout(60)
def test_measure_collective_in_a_one_process_gloo_group(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        row = api.measure_collective("all_reduce", 1 << 12, torch.device("cpu"), backend="gloo", timeout_s=20)
    finally:
        dist.destroy_process_group()
    assert row["op"] == "all_reduce" and row["size"] == 1 << 12
    figures = row["in_place"]
    assert figures["wrong"] == 0 and figures["time_us"] > 0 and figures["busbw_gbs"] >= 0
