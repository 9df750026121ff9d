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
    assert merged["fr_backends"] == ["gloo", "nccl2"]
    # both configure the default group (one group, two backends): nccl2's half is kept apart, its pg_id moved
    assert set(merged["pg_status"]) == {"0", str(1 + fr_backends.PG_ID_APART)}
    assert {e["process_group"][0] for e in merged["entries"]} == {"0", "0@nccl2"}


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


# ---------------------------------------------------------------- ProcessGroupNCCL's own instance (CUDA builds)
# An NCCL record as torch's writer lays it out: FlightRecorderDetail.hpp's dump_json (torch 2.13.0 wheel's
# torch/include/torch/csrc/distributed/c10d/, lines 507-596) writes the same fields for every instance:
# version (514), comm_lib_version (515: ProcessGroupNCCL records its NCCL version there), pg_config (516),
# pg_status (517), each entry's fields (527-584), nccl_comm_state (594: the communicators' dump map,
# ProcessGroupNCCL.cpp's getNCCLCommDumpMap). Entries are the real gloo dump's, renamed "nccl:" as
# ProcessGroupNCCL names them (torch/distributed/flight_recorder/components/types.py reads "nccl:<op>").
NCCL_VERSION = "2.27.5"


def nccl_record(pg: int = 0):
    fr = json.loads(json.dumps(GLOO))
    for e in fr["entries"]:
        e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")
        e["pg_id"] = pg
        e["time_created_ns"] += 7
    fr["pg_status"] = {str(pg): fr["pg_status"]["0"]}
    fr["comm_lib_version"] = NCCL_VERSION
    fr["nccl_comm_state"] = {"a1b2c3": {"nccl_comm_state": "ncclSuccess"}}
    return fr


class FakeC10dCuda213:
    """A CUDA build of 2.13/2.14: gloo's instance without backend= and ProcessGroupNCCL's own dump (init.cpp's
    ``_dump_nccl_trace_json(includeCollectives=None, onlyActive=None)``); an NCCL job's entries are there only."""
    def __init__(self, gloo=EMPTY):
        self.gloo = gloo

    def _dump_fr_trace_json(self, includeCollectives=None, onlyActive=None):
        return json.dumps(self.gloo).encode()

    def _dump_nccl_trace_json(self, includeCollectives=None, onlyActive=None):
        return json.dumps(nccl_record()).encode()


class FakeC10dCuda215(FakeC10d215):
    """The 2.15 CUDA wheel: per-backend instances and ProcessGroupNCCL's (nccl-legacy records there)."""
    def _dump_nccl_trace_json(self, includeCollectives=None, onlyActive=None):
        return json.dumps(nccl_record(pg=2)).encode()


def names(got):
    return [e["profiling_name"] for e in got["entries"]]


def test_the_exit_record_of_an_nccl_job_on_a_cuda_213_build_holds_its_nccl_collectives():
    got = json.loads(fr_backends.dump_every_instance(FakeC10dCuda213()))
    assert names(got) and all(n.startswith("nccl:") for n in names(got))  # gloo's instance alone: nothing
    assert got["comm_lib_version"] == NCCL_VERSION


def test_gloo_and_nccl_groups_of_one_rank_are_merged_nccls_version_kept():
    got = json.loads(fr_backends.dump_every_instance(FakeC10dCuda213(gloo=GLOO)))
    assert len(got["entries"]) == 2 * len(GLOO["entries"])
    assert {n.split(":")[0] for n in names(got)} == {"gloo", "nccl"}
    assert got["fr_backends"] == ["gloo", fr_backends.NCCL_INSTANCE]
    assert got["comm_lib_version"] == NCCL_VERSION and got["nccl_comm_state"]  # gloo's own are empty


def test_the_215_cuda_build_is_asked_every_instance_and_nccl_legacys():
    got = json.loads(fr_backends.dump_every_instance(FakeC10dCuda215()))
    assert {n.split(":")[0] for n in names(got)} == {"nccl", "nccl2"}


def test_which_instances_come_from_the_handler_names():
    """The handler names as the wheels answer ``GET /handler/`` (2.13.0 CPU, 2.15.0 CUDA, read here)."""
    cpu_213 = ["dump_traceback", "pyspy_dump", "wait_counter_values", "fr_trace_json", "ping"]
    cuda_214 = cpu_213 + ["dump_nccl_trace_json", "dump_nccl_trace_pickle"]
    cuda_215 = ["dump_nccl_trace_json", "dump_nccl_trace_pickle", "dump_traceback", "pyspy_dump",
                "wait_counter_values", "fr_dump_file", "fr_trace_json", "ping", "c10d_health_check"]
    assert fr_backends.asks(fr_backends.instances_of(cpu_213)) == [("gloo", "fr_trace_json")]
    assert fr_backends.asks(fr_backends.instances_of(cuda_214)) == [("gloo", "fr_trace_json"),
                                                                    ("ProcessGroupNCCL", "dump_nccl_trace_json")]
    paths = [p for _, p in fr_backends.asks(fr_backends.instances_of(cuda_215))]
    assert paths[0] == "fr_trace_json" and "fr_trace_json?backend=nccl2" in paths and paths[-1] == "dump_nccl_trace_json"
    assert fr_backends.instances_of(None) is None and fr_backends.instances_of({"a": 1}) is None


def test_a_ranks_instances_are_asked_once_and_an_unanswered_listing_again():
    memo, calls = fr_backends.Memo(), []

    def listing(answer):
        def names():
            calls.append(answer)
            return answer
        return names

    assert memo.of("r0", listing(None)) == fr_backends.UNKNOWN  # no answer: every instance, asked again later
    assert memo.of("r0", listing(["fr_trace_json"])) == fr_backends.Instances(per_backend=False, nccl=False)
    assert memo.of("r0", listing(["fr_dump_file"])) == fr_backends.Instances(per_backend=False, nccl=False)
    assert calls == [None, ["fr_trace_json"]]


# ---------------------------------------------------------------- one group, two backends ("cpu:gloo,cuda:nccl")
# init_process_group("cpu:gloo,cuda:nccl") makes the default group "0" with a gloo and an NCCL backend, each
# recording into its own instance with its own sequence count and pg_status, under the same name and pg_id.
def gloo_and_nccl_of_one_group(nccl_done: int):
    nccl = nccl_record(pg=0)
    for e in nccl["entries"]:
        e["state"] = "started" if e["collective_seq_id"] > nccl_done else "completed"
    nccl["pg_status"]["0"] = {"last_completed_collective": str(nccl_done), "last_enqueued_collective": "4",
                              "last_started_collective": "4"}
    return fr_backends.merge({"gloo": GLOO, fr_backends.NCCL_INSTANCE: nccl})


def test_one_group_with_two_backends_keeps_each_backends_collectives_and_status_apart():
    """Before: one pg_status "0" (NCCL's, for the group its entries hold) and one group "0", so gloo's completed
    all_reduce #1..#4 read as NCCL's counter said (2 done), and gloo's #3 and NCCL's #3 were one collective."""
    from ddpdoctor.forensics.evidence.flight_recorder import calls_of

    merged = gloo_and_nccl_of_one_group(nccl_done=2)
    calls = calls_of(merged)
    gloo = [c for c in calls if c.group.name == "0"]
    nccl = [c for c in calls if c.group.name == f"0@{fr_backends.NCCL_INSTANCE}"]
    assert [c.seq for c in gloo] == [c.seq for c in nccl] == [1, 2, 3, 4]
    assert all(c.completed for c in gloo)  # gloo's own counter: all 4 done (its status says op_id 7)
    assert [c.completed for c in nccl] == [True, True, False, False]
    assert len(merged["pg_status"]) == 2 and merged["pg_status"]["0"] == GLOO["pg_status"]["0"]
    assert all(g.ranks == (0, 1) for g in {c.group for c in calls})  # each group's members from its own config


def test_the_renaming_is_the_same_on_every_rank_whatever_each_recorded():
    """A rank whose gloo backend recorded nothing yet (only its config, written when the group was made) names
    NCCL's half of the group as the rank that recorded both does: groups are matched across ranks by name."""
    from ddpdoctor.forensics.evidence.flight_recorder import calls_of

    quiet_gloo = {**GLOO, "entries": [], "pg_status": {}}
    merged = fr_backends.merge({"gloo": quiet_gloo, fr_backends.NCCL_INSTANCE: nccl_record(pg=0)})
    assert {c.group.name for c in calls_of(merged)} == {f"0@{fr_backends.NCCL_INSTANCE}"}
    busy = {c.group.name for c in calls_of(gloo_and_nccl_of_one_group(nccl_done=4))}
    assert busy == {"0", f"0@{fr_backends.NCCL_INSTANCE}"}


def test_an_nccl_only_job_keeps_its_record_as_torch_wrote_it():
    """gloo's instance empty (no gloo group at all): nothing renamed, pg_ids as they came."""
    fr = nccl_record(pg=0)
    assert fr_backends.merge({"gloo": EMPTY, fr_backends.NCCL_INSTANCE: fr}) == fr
