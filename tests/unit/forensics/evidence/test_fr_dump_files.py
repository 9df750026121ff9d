"""Unit tests of ddpdoctor/forensics/evidence/fr_dumps.py's reading of every dump a job leaves: any name torch,
torchcomms or NVIDIA's resiliency tools give it, an unknown format version said, how long a collective was
pending from the dump's own clock, and the ranks that left no dump said as evidence (judge/dumps.py's notes).

The records are real ones: data/fr_gloo_2.13/rank<R>.json were written by torch 2.13.0's own writer
(``torch._C._distributed_c10d._dump_fr_trace_json``; make_dump.py beside them says how), and changed here only
where a case needs it."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from ddpdoctor.forensics.evidence import fr_dumps, job_files
from ddpdoctor.forensics.judge import dumps as dumps_judge

DATA = Path(__file__).parents[1] / "data" / "fr_gloo_2.13"


def real(rank: int) -> dict:
    return json.loads((DATA / f"rank{rank}.json").read_text())


@pytest.mark.parametrize("name, rank", [
    ("nccl_trace_rank_3", 3), ("rank3.json", 3), ("rank_3", 3),  # torch's NCCL default, run-trainer's, FR's
    ("comm_lib_trace_rank_12", 12),                              # torchcomms' hook (torch 2.15's nccl2)
    ("node7_rank_3", 3), ("nccl_trace_rank_3.node7", 3), ("nccl_trace_rank_3_node7.cluster", 3),  # host parts
    ("host-12_dump_3", 3),                                       # NVIDIA resiliency's <prefix>_dump_<R>
    ("fr_3", 3), ("fr_3.pkl", 3),                                # TORCH_FR_DUMP_TEMP_FILE=<dir>/fr_
])
def test_a_dump_is_found_whatever_its_name(tmp_path, name, rank):
    (tmp_path / name).write_text(json.dumps(real(0)))
    found = fr_dumps.find_dumps([tmp_path])
    assert list(found) == [rank] and found[rank][0].name == name


@pytest.mark.parametrize("name", ["train.log.3", "rank0.calls", "rank1.txt", "stderr.log", "x.json",
                                  "rank0.jsonl"])  # run-trainer's metrics/rank<R>.jsonl
def test_other_files_of_a_run_are_no_dump_candidates(name):
    assert fr_dumps.rank_of_name(name) is None


def test_run_trainers_metrics_are_read_in_silence(tmp_path):
    """postmortem of a run-trainer run's logs searches its run folder: metrics/rank<R>.jsonl (one JSON object a
    line) was read as a dump and said 'skipped ...: not valid UTF-8 JSON' in every verdict."""
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "rank0.jsonl").write_text('{"step": 1, "loss": 4.8}\n{"step": 2, "loss": 4.7}\n')
    with job_files.reading([tmp_path]) as notes:
        assert fr_dumps.find_dumps([tmp_path]) == {}
    assert notes == []


def test_an_explicit_rank_name_wins_over_trailing_digits(tmp_path):
    (tmp_path / "a_1").write_text(json.dumps(real(0)))  # sorted first, but only trailing digits
    (tmp_path / "rank1.json").write_text(json.dumps(real(1)))
    assert fr_dumps.find_dumps([tmp_path])[1][0].name == "rank1.json"


def test_an_unknown_version_is_read_and_said_in_the_verdict(tmp_path):
    for r in (0, 1):
        fr = real(r)
        fr["version"] = "3.0"
        (tmp_path / f"rank{r}.json").write_text(json.dumps(fr))
    with job_files.reading([tmp_path]) as notes:
        found = fr_dumps.find_dumps([tmp_path])
    assert sorted(found) == [0, 1] and any("'3.0'" in n for n in notes), notes
    assert any("version 3.0" in n for n in dumps_judge.dump_notes(found))
    assert dumps_judge.dump_notes(fr_dumps.find_dumps([DATA])) == []  # torch 2.13's own 2.10: nothing to say


def test_a_rank_without_a_dump_is_said(tmp_path):
    fr = real(0)
    fr["pg_config"][""]["ranks"] = "[0, 1, 2]"  # a 3-rank job: rank 2 wrote nothing (pytorch#196968)
    (tmp_path / "rank0.json").write_text(json.dumps(fr))
    (tmp_path / "rank1.json").write_text(json.dumps(real(1)))
    found = fr_dumps.find_dumps([tmp_path])
    assert fr_dumps.missing_dumps(found) == [2]
    assert "rank 2 left no flight-recorder dump" in dumps_judge.dump_notes(found)[0]


def pending(fr: dict, waited_s: float) -> dict:
    """The real record with one more collective, still pending (enqueued, above pg_status' last completed), created
    ``waited_s`` before the newest event the dump recorded (its own clock). gloo's pg_status counts op ids."""
    fr = copy.deepcopy(fr)
    last = fr["entries"][-1]
    newest = max(e["time_created_ns"] for e in fr["entries"])
    fr["entries"].append(dict(last, collective_seq_id=last["collective_seq_id"] + 1, op_id=last["op_id"] + 1,
                              record_id=last["record_id"] + 1, time_created_ns=newest - int(waited_s * 1e9)))
    fr["pg_status"]["0"]["last_enqueued_collective"] = str(last["op_id"] + 1)
    return fr


def test_pending_time_is_the_file_time_when_it_fits(tmp_path):
    fr = pending(real(0), 5.0)
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(fr))
    created = fr["entries"][-1]["time_created_ns"] / 1e9
    os.utime(path, (created + 12.0, created + 12.0))
    assert fr_dumps.stalled_s(fr_dumps.find_dumps([tmp_path])) == pytest.approx(12.0, abs=0.01)


def test_pending_time_comes_from_the_dumps_own_clock_when_the_file_time_cannot_be_it(tmp_path):
    fr = pending(real(0), 5.0)  # pending 5 s before the newest event in the dump
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(fr))
    created = fr["entries"][-1]["time_created_ns"] / 1e9
    os.utime(path, (created + 435 * 86400, created + 435 * 86400))  # copied 435 days later
    with job_files.reading([tmp_path]) as notes:
        waited = fr_dumps.stalled_s(fr_dumps.find_dumps([tmp_path]))
    assert waited == pytest.approx(5.0, abs=0.01) and any("own clock" in n for n in notes), notes
