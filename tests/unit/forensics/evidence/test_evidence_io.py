"""The post-mortem's inputs under attack (issue 25, item 4): every read capped and regular files only, no
super-linear regex, crafted pickles and JSON of the wrong shape refused with a note, never an exception."""
from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddpdoctor.forensics.evidence import job_files, fr_dumps
from ddpdoctor.forensics.judge import dumps as dumps_judge
from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge import classify as rules
from ddpdoctor.forensics.postmortem import analysis


def log_dir(tmp_path: Path, ranks=(0, 1)) -> tuple[Path, Path]:
    """<logs>/<run>_x/attempt_0/<r>/ as torchrun writes it: (logs, attempt dir)."""
    attempt = tmp_path / "job" / "logs" / "rid_abc" / "attempt_0"
    for r in ranks:
        (attempt / str(r)).mkdir(parents=True)
    return tmp_path / "job" / "logs", attempt


def summary(error_file: str, rank: int = 1, code: int = 1) -> str:
    return textwrap.dedent(f"""\
        Root Cause (first observed failure):
        [0]:
          time      : 2026-11-22_23:27:34
          host      : node7
          rank      : {rank} (local_rank: {rank})
          exitcode  : {code} (pid: 7773)
          error_file: {error_file}
          traceback : see above
        """)


def analyse(logs: Path, agent: str = ""):
    """postmortem's collector, then the attribution decide() runs first on what it read."""
    from ddpdoctor.forensics.judge import attribution

    with job_files.reading(logs.parent) as notes:
        verdict = analysis.analyse(logs, agent, "node7")
    attribution.attribute(verdict, verdict.stopped_by)
    return verdict, notes


# ---------------------------------------------------------------- no super-linear regex
@pytest.mark.parametrize("size", [100_000, 10_000_000])
def test_one_huge_word_as_the_error_message_is_linear(tmp_path, size):
    """The attack: an error message that is one 100,000-character word took 79 s; 10 MB never finished."""
    logs, attempt = log_dir(tmp_path)
    word = "A" * size
    (attempt / "1" / "error.json").write_text(json.dumps({"message": word}))
    t0 = time.process_time()
    assert rules.exception_line(word, "") == (None, word)
    assert job_files.exception_line(word + ": x", "")[0] == word
    verdict, _ = analyse(logs)
    elapsed = time.process_time() - t0  # CPU time: another job's load does not inflate it (wall clock did)
    assert elapsed < 3.0, elapsed
    assert verdict.root_cause is not None and verdict.root_cause.rank is None or verdict.root_cause.local_rank == 1


def test_exception_line_still_reads_the_usual_forms():
    assert job_files.exception_line("ValueError: bad shape", "") == ("ValueError", "bad shape")
    assert job_files.exception_line("torch.distributed.DistBackendError: x", "") == ("DistBackendError", "x")
    assert job_files.exception_line("KeyboardInterrupt", "") == ("KeyboardInterrupt", "")
    assert job_files.exception_line("", 'Traceback\n  File "a.py", line 1\nKeyError: \'labels\'') == \
        ("KeyError", "'labels'")
    assert job_files.exception_line("Error", "") == (None, "Error")  # as the old pattern: a name before the suffix


@pytest.mark.parametrize("text", [
    "[0]:" + " \n" * 500_000,  # the summary's line breaks were \s*\n\s*: quadratic on blank lines
    "terminate called after throwing an instance of 'x'" + " \n" * 500_000,  # ABORT, the same
    "ProcessGroupGloo" * 60_000,  # PEER_LOST's `.*` from every occurrence
    "DistBackendError" * 60_000,  # the timeout rule's `.*`
    "[1]:\n time : t\n host : h\n rank : " + "9" * 1_000_000,  # int() of a 1 MB number
])
def test_summary_and_classification_regexes_are_linear(text):
    """1 MB inputs: a quadratic pattern takes hours here, a linear one about a second. The classification
    gets what the reading layer lets through at most: a clipped message, a tail of at most 512 KiB."""
    t0 = time.process_time()  # CPU time: another job's load does not inflate it
    analysis.parse_agent_summary(text)
    f = RankFailure(rank=0, local_rank=0, host="h", exit_code=-6,
                               message=job_files.clip(text, job_files.MESSAGE_CHARS),
                               log_tail=text[-job_files.STDERR_TAIL_BYTES:])
    rules.classify(f)
    assert time.process_time() - t0 < 3.0


# ---------------------------------------------------------------- regular files only, capped
def test_fifo_error_files_and_logs_are_skipped_without_blocking(tmp_path):
    logs, attempt = log_dir(tmp_path)
    os.mkfifo(attempt / "1" / "error.json")
    os.mkfifo(attempt / "1" / "stderr.log")
    os.mkfifo(attempt / "0" / "stderr.log")
    t0 = time.monotonic()
    verdict, notes = analyse(logs, summary(str(attempt / "1" / "error.json")))
    assert time.monotonic() - t0 < 15  # a FIFO read would block forever
    assert verdict.root_cause is not None and verdict.root_cause.rank == 1
    assert any("FIFO" in n and "error.json" in n for n in notes), notes
    assert any("FIFO" in n and "stderr.log" in n for n in notes), notes


def test_error_file_dev_zero_and_outside_the_log_dir_are_skipped(tmp_path):
    logs, attempt = log_dir(tmp_path)
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"message": "secret from elsewhere"}))
    for target, needle in (("/dev/zero", "outside"), (str(outside), "outside")):
        verdict, notes = analyse(logs, summary(target))
        assert verdict.root_cause is not None and "secret from elsewhere" not in str(verdict.root_cause.message)
        assert any(needle in n for n in notes), notes
    # /dev/zero even when reads are not confined to a root: a character device, not read
    with job_files.reading(None) as notes:
        assert job_files.read_error_file(Path("/dev/zero")) is None
    assert any("character device" in n for n in notes), notes


def test_a_link_that_leaves_the_log_dir_is_skipped(tmp_path):
    logs, attempt = log_dir(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("Traceback (most recent call last):\nValueError: do not show this\n")
    (attempt / "1" / "stderr.log").symlink_to(secret)
    verdict, notes = analyse(logs)
    assert not verdict.root_cause or "do not show this" not in (verdict.root_cause.log_tail or "")
    assert any("outside the log dir" in n for n in notes), notes


def test_a_1_gib_stderr_log_is_read_by_its_tail_in_small_memory(tmp_path):
    logs, attempt = log_dir(tmp_path)
    big = attempt / "1" / "stderr.log"
    with open(big, "wb") as fh:  # sparse: 1 GiB of zeros costs no disk, then a real traceback at the end
        fh.truncate(1 << 30)
        fh.seek(1 << 30)
        fh.write(b"[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/u/train.py\", line 3, in <module>\n"
                 b"[rank1]: ValueError: the end\n")
    code = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from ddpdoctor.forensics.judge import attribution
        from ddpdoctor.forensics.postmortem import analysis
        v = analysis.analyse(Path({str(logs)!r}), "", "h")
        attribution.attribute(v, v.stopped_by)
        assert v.root_cause.error_type == "ValueError", v.root_cause
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec, so a big pytest parent would show
        print(next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")).split()[1])  # KiB
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.split()[-1]) < 200 * 1024, p.stdout  # KiB: far below the 2 GB a whole read took


@pytest.mark.parametrize("content", [
    "[1, 2]", '"just a string"', "[" * 1_000_000 + "]" * 1_000_000, "{" * 10, "", "\x00\x01binary",
    json.dumps({"message": ["a", "list"]}), json.dumps({"message": {"message": 5, "extraInfo": "no"}}),
    json.dumps({"message": {"message": "x", "extraInfo": {"timestamp": "nan"}}}),
])
def test_error_json_of_any_shape_is_a_note_or_a_message_never_an_exception(tmp_path, content):
    logs, attempt = log_dir(tmp_path)
    (attempt / "1" / "error.json").write_text(content)
    verdict, notes = analyse(logs, summary(str(attempt / "1" / "error.json")))
    assert verdict.root_cause is not None and verdict.root_cause.rank == 1


def test_non_numeric_rank_folder_and_attempt_final_are_skipped_with_a_note(tmp_path):
    logs, attempt = log_dir(tmp_path)
    (attempt / "x").mkdir()
    (attempt.parent / "attempt_final").mkdir()
    (attempt / "1" / "stderr.log").write_text("Traceback (most recent call last):\nValueError: real\n")
    verdict, notes = analyse(logs)
    assert verdict.root_cause.error_type == "ValueError"
    assert any("attempt_final" in n for n in notes) and any(n.endswith("<local rank> folder") for n in notes), notes


def test_a_huge_directory_is_looked_at_in_bounded_entries(tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    for i in range(50):
        (d / str(i)).mkdir()
    with job_files.reading(None) as notes:
        assert len(job_files.subdirs(d, limit=10)) == 10
    assert any("more than 10 entries" in n for n in notes)


# ---------------------------------------------------------------- flight-recorder dumps
def test_a_13_byte_pickle_announcing_2_62_bytes_is_refused(tmp_path):
    for op in (b"\x8e", b"\x8d", b"\x96", b"\x95"):  # BINBYTES8, BINUNICODE8, BYTEARRAY8, FRAME
        bomb = tmp_path / "nccl_trace_rank_0"
        bomb.write_bytes(b"\x80\x04" + op + struct.pack("<Q", 1 << 62) + b".")
        assert len(bomb.read_bytes()) == 12  # (13 with one payload byte; either way)
        with job_files.reading(None) as notes:
            assert fr_dumps.read_dump(bomb) is None
        assert notes


def memo_bomb(levels: int = 250, fan: int = 32, first: int = 0) -> bytes:
    """Each list holds 32 references to the one before (memo gets): 16 KB of pickle, 32^250 values once
    walked (json.dumps of it would never end; the red team's smaller one was 2.9 GB). Memo slots from
    ``first`` (to embed it after other memoized objects)."""
    out = [b"\x80\x04]\x940"]  # L0, memoized, popped (the memo keeps it)
    for i in range(levels):
        out.append(b"(" + (b"h" + bytes([first + i])) * fan + b"l\x940")
    return b"".join(out) + b"h" + bytes([first + levels]) + b"."


def test_a_memo_reference_bomb_is_refused_in_bounded_time_and_memory(tmp_path):
    bomb = tmp_path / "nccl_trace_rank_0"
    bomb.write_bytes(b"\x80\x04}\x94(\x8c\x07entries\x94" + memo_bomb(levels=250, first=2)[2:-1] + b"u.")
    assert len(bomb.read_bytes()) < 17_500  # ~16 KB
    t0 = time.monotonic()
    with job_files.reading(None) as notes:
        assert fr_dumps.read_dump(bomb) is None
    assert time.monotonic() - t0 < 15  # a bomb takes hours
    assert any("deeper" in n or "expands" in n for n in notes), notes
    # A flat one (one list referenced a million times) is refused by the number of values it expands to.
    flat = tmp_path / "rank1.json.pkl"
    flat.write_bytes(b"\x80\x04}\x94(\x8c\x07entries\x94(](K\x01K\x02e\x94" + b"h\x02" * 3_000_000 + b"lu.")
    with job_files.reading(None) as notes:
        assert fr_dumps.read_dump(flat) is None
    assert notes


def test_a_pickle_of_many_objects_is_refused_by_its_operation_count(tmp_path):
    many = tmp_path / "nccl_trace_rank_0"
    many.write_bytes(b"\x80\x04(" + b"]" * (job_files.PICKLE_OPS + 10) + b"l.")
    with job_files.reading(None) as notes:
        assert fr_dumps.read_dump(many) is None
    assert any("operations" in n for n in notes), notes


@pytest.mark.parametrize("dump", [
    {"entries": "not a list"}, {"entries": [1, 2, 3]}, {"pg_status": []}, {"pg_status": {"0": 5}},
    {"entries": [{"collective_seq_id": "x", "frames": "no", "process_group": 7, "profiling_name": ["a"]}]},
    {"entries": [{"frames": [{"line": "NaN", "filename": "a"}, 3]}], "pg_status": {"0": {"last_enqueued_collective": "y"}}},
    {"entries": [{"pg_id": {"a": 1}, "collective_seq_id": 3, "process_group": []}]},
])
def test_json_dumps_of_the_wrong_shape_never_crash_the_judge(tmp_path, dump):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(dump))
    other = tmp_path / "rank1.json"
    other.write_text(json.dumps({"entries": [], "pg_status": {"0": {"last_enqueued_collective": 1,
                                                                   "last_completed_collective": 1}}}))
    with job_files.reading(None):
        dumps = fr_dumps.find_dumps([tmp_path])
        dumps_judge.judge_dumps(dumps)  # a verdict or None; never an exception


def test_plain_pickles_still_load(tmp_path):
    d = {"entries": [{"a": 1, "b": [1, 2, (3, 4)], "c": "x", "t": True, "n": None, "f": 1.5}], "pg_status": {"0": {}}}
    for proto in range(2, 6):
        assert job_files.load_plain_pickle(pickle.dumps(d, protocol=proto), "ok") == d


def test_too_many_json_containers_are_refused_before_parsing():
    with job_files.reading(None) as notes:
        assert job_files.loads_bounded(b"[" + b"[]," * 2_000_000 + b"[]]", "x") is None
    assert any("more than" in n for n in notes)
