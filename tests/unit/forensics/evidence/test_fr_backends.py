"""Unit tests of ddpdoctor/forensics/evidence/fr_backends.py and its two users: torch 2.15 keeps a flight-recorder
instance per backend (``_dump_fr_trace_json(includeCollectives=None, onlyActive=None, backend="gloo")``,
torch/_C/_distributed_c10d.pyi of the 2.15.0 wheel; the worker server's ``fr_trace_json?backend=<name>``,
torch/distributed/debug/_debug_handlers.py), 2.13 one without ``backend=``. An nccl2 job's entries are in the
"nccl2"-hooked instance only: asked the default, it gives gloo's empty record."""
from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.forensics.evidence import fr_backends

DATA = Path(__file__).parents[1] / "data" / "fr_gloo_2.13"
GLOO = json.loads((DATA / "rank0.json").read_text())
EMPTY = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [], "comm_lib_version": "",
         "nccl_comm_state": {}}


def nccl2_record():
    fr = json.loads(json.dumps(GLOO))
    for e in fr["entries"]:
        e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl2:")
        e["pg_id"] = 1
        e["time_created_ns"] += 5
    fr["pg_status"] = {"1": fr["pg_status"]["0"]}
    return fr


def test_an_nccl2_jobs_record_is_found_in_its_own_instance():
    merged = fr_backends.merge({"gloo": EMPTY, "nccl": EMPTY, "nccl2": nccl2_record(), "nccl-legacy": EMPTY})
    assert [e["profiling_name"] for e in merged["entries"]][:2] == ["nccl2:all_reduce", "nccl2:all_to_all"]
    assert merged["pg_status"] == {"1": GLOO["pg_status"]["0"]}


def test_two_instances_in_use_are_merged_oldest_first_each_entry_once():
    merged = fr_backends.merge({"gloo": GLOO, "nccl": EMPTY, "nccl2": nccl2_record(), "nccl-legacy": GLOO})
    names = [e["profiling_name"] for e in merged["entries"]]
    assert len(names) == 2 * len(GLOO["entries"]) and names[:2] == ["gloo:all_reduce", "nccl2:all_reduce"]
    assert set(merged["pg_status"]) == {"0", "1"} and merged["fr_backends"] == ["gloo", "nccl2"]


def test_a_torch_that_ignores_backend_answers_its_one_record_unchanged():
    assert fr_backends.merge({b: GLOO for b in fr_backends.BACKENDS}) == GLOO
    assert fr_backends.merge({b: None for b in fr_backends.BACKENDS}) is None


class FakeC10d215:
    """torch 2.15's binding: one record per backend= (an nccl2 job's in "nccl2")."""
    def _dump_fr_trace_json(self, includeCollectives=None, onlyActive=None, backend="gloo"):
        return json.dumps(nccl2_record() if backend == "nccl2" else EMPTY)


class FakeC10d213:
    """torch 2.13's binding: no backend= at all."""
    def _dump_fr_trace_json(self, includeCollectives=None, onlyActive=None):
        return json.dumps(GLOO)


def test_the_exit_record_asks_every_instance_on_2_15_and_the_one_on_2_13():
    raw = fr_backends.dump_every_instance(FakeC10d215())
    assert isinstance(raw, bytes)  # the bootstrap writes it as it is (a str failed at the SIGTERM on 2.15)
    got = json.loads(raw)
    assert got["entries"] and all(e["profiling_name"].startswith("nccl2:") for e in got["entries"])
    assert json.loads(fr_backends.dump_every_instance(FakeC10d213())) == GLOO
    assert isinstance(fr_backends.dump_every_instance(FakeC10d213()), bytes)
