"""Who sent a message of the wrong size (issue 45, item 7): the kept-calls file (evidence/call_sizes), the rule
that pairs sends with receives and all-to-all splits with what each receiver expects (judge/sizes), and its
adoption as the root cause of a job gloo aborted on the receiver."""
from __future__ import annotations

import os
import sys

import pytest

from ddpdoctor.forensics.evidence import call_sizes
from ddpdoctor.forensics.evidence.call_sizes import Call
from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge import sizes
from ddpdoctor.forensics.judge.attribution import DETECTOR
from ddpdoctor.forensics.judge.verdict import Findings


def _p2p(rank, op, peer, k, nbytes, t, where=None, shape="(4, 16) float32"):
    return Call(rank=rank, n=k, op=op, k=k, group=None, peer=peer, sizes=(nbytes,), expects=(), shape=shape,
                where=where, t=t)


def _a2a(rank, k, sends, expects, t, where=None):
    return Call(rank=rank, n=k, op="all_to_all", k=k, group=None, peer=None, sizes=tuple(sends),
                expects=tuple(expects), shape="", where=where, t=t)


def _pipeline(sender_bytes_at_fault: int, receiver_bytes_at_fault: int) -> dict[int, list[Call]]:
    """Rank 2 sends rank 3 an activation every step; step 3 is the fault's."""
    sends = [_p2p(2, "send", 3, k, 256 if k < 3 else sender_bytes_at_fault, t=k, where="pipe.py:41") for k in range(4)]
    recvs = [_p2p(3, "recv", 2, k, 256 if k < 3 else receiver_bytes_at_fault, t=k + 0.1, where="pipe.py:30")
             for k in range(4)]
    return {2: sends, 3: recvs}


def test_the_sender_whose_size_changed_is_named():
    m = sizes.find(_pipeline(512, 256))
    assert m is not None and m.culprits == (2,) and m.named
    assert (m.sender, m.receiver, m.sent, m.expected) == (2, 3, 512, 256)
    assert m.culprit_call.where == "pipe.py:41"
    text = sizes.describe(m)
    assert "rank 2 sent rank 3 512 B" in text and "expected 256 B" in text and "rank 2's size changed" in text


def test_the_receiver_whose_buffer_changed_is_named():
    m = sizes.find(_pipeline(256, 128))
    assert m is not None and m.culprits == (3,) and m.culprit_call.where == "pipe.py:30"


def test_both_changed_names_neither():
    calls = _pipeline(512, 128)
    m = sizes.find(calls)
    assert m is not None and not m.named and set(m.culprits) == {2, 3}
    assert "either may be wrong" in sizes.describe(m)


def test_matching_sizes_find_nothing():
    assert sizes.find(_pipeline(256, 256)) is None
    assert sizes.find({}) is None


def test_all_to_all_odd_split_names_the_rank_whose_split_changed():
    even = [8, 8, 8]
    calls = {r: [_a2a(r, k, even, even, t=k) for k in range(3)] for r in range(3)}
    calls[1].append(_a2a(1, 3, [12, 8, 8], even, t=3, where="moe.py:42"))  # one token too many to rank 0
    calls[0].append(_a2a(0, 3, even, even, t=3))
    calls[2].append(_a2a(2, 3, even, even, t=3))
    m = sizes.find(calls)
    assert m is not None and m.op == "all_to_all" and m.culprits == (1,)
    assert (m.sender, m.receiver, m.sent, m.expected) == (1, 0, 12, 8) and m.culprit_call.where == "moe.py:42"


def test_all_to_all_uneven_but_agreed_splits_find_nothing():
    """A router's uneven splits, exchanged first: every rank's sends match what each receiver expects."""
    calls = {0: [_a2a(0, 0, [4, 12], [4, 8], t=0)], 1: [_a2a(1, 0, [8, 20], [12, 20], t=0)]}
    assert sizes.find(calls) is None


def test_the_earliest_mismatch_is_the_one():
    calls = _pipeline(512, 256)
    calls[0] = [_p2p(0, "send", 1, 0, 64, t=9.0)]
    calls[1] = [_p2p(1, "recv", 0, 0, 32, t=9.1)]
    m = sizes.find(calls)
    assert m.sender == 2


def _aborted_receiver() -> Findings:
    root = RankFailure(rank=3, local_rank=3, host="n1", exit_code=-6, signal="SIGABRT", category="desync",
                       error_type="EnforceNotMet", message="op.preamble.length <= op.nbytes. 512 vs 256",
                       reason=DETECTOR, named=False)
    sender = RankFailure(rank=2, local_rank=2, host="n1", exit_code=1, category="peer_lost", victim=True)
    return Findings(root_cause=root, consequences=[sender])


def test_adopt_makes_the_sender_the_root_cause_and_the_receiver_a_consequence():
    verdict = _aborted_receiver()
    sizes.adopt(verdict, sizes.find(_pipeline(512, 256)))
    root = verdict.root_cause
    assert root.rank == 2 and root.named is True and root.location == "pipe.py:41" and root.exit_code == 1
    assert root.error_type == "size_mismatch" and root.fix == sizes.FIX
    [receiver] = verdict.consequences
    assert receiver.rank == 3 and receiver.victim and "it detected the mismatch, it did not cause it" in receiver.reason


def test_adopt_without_a_single_culprit_names_nobody():
    verdict = _aborted_receiver()
    sizes.adopt(verdict, sizes.find(_pipeline(512, 128)))
    assert verdict.root_cause.rank is None and verdict.root_cause.named is False
    assert "either may be wrong" in verdict.root_cause.message


def test_adopt_leaves_other_verdicts_alone():
    verdict = _aborted_receiver()
    verdict.root_cause.named = None  # another rule already named it
    before = verdict.root_cause
    sizes.adopt(verdict, sizes.find(_pipeline(512, 256)))
    assert verdict.root_cause is before
    untouched = _aborted_receiver()
    root = untouched.root_cause
    sizes.adopt(untouched, None)  # no kept sizes (Python < 3.12, plain torchrun): the first failure stays, unnamed
    assert untouched.root_cause is root and root.named is False and root.reason == DETECTOR


def _write(path, records):
    raw = bytearray(call_sizes.SLOTS * call_sizes.SLOT)
    for i, rec in enumerate(records):
        data = call_sizes.encode(rec)
        raw[i * call_sizes.SLOT:i * call_sizes.SLOT + len(data)] = data
    path.write_bytes(bytes(raw))


def test_the_file_round_trips_and_torn_or_foreign_slots_are_skipped(tmp_path):
    folder = tmp_path / call_sizes.FOLDER
    folder.mkdir()
    good = {"n": 1, "op": "send", "group": None, "peer": 3, "k": 0, "bytes": [512], "shape": [[4, 32]],
            "dtype": "float32", "where": "pipe.py:41", "t": 1.5}
    a2a = {"n": 0, "op": "all_to_all", "group": [0, 2], "k": 0, "bytes": [8, 12], "expects": [8, 8],
           "shape": [[5], [4]], "splits": [[2, 3], None], "dtype": "float32", "where": None, "t": 1.0}
    _write(folder / "rank2.calls", [good, a2a, {"n": 2, "op": "rm -rf", "k": 0, "bytes": [1]}])
    torn = bytearray((folder / "rank2.calls").read_bytes())
    torn[2 * call_sizes.SLOT:2 * call_sizes.SLOT + 5] = b'{"n":'  # a slot cut by a crash mid-write
    (folder / "rank3.calls").write_bytes(bytes(torn))
    (folder / "notes.txt").write_text("not a rank's")
    got = call_sizes.read_dir(folder)
    assert sorted(got) == [2, 3]
    first, second = got[2]
    assert (first.op, first.group, first.sizes, first.expects) == ("all_to_all", (0, 2), (8, 12), (8, 8))
    assert first.shape == "in (5,) splits [2, 3], out (4,) splits even float32"
    assert (second.peer, second.sizes, second.shape, second.where, second.t) == (3, (512,), "(4, 32) float32",
                                                                                  "pipe.py:41", 1.5)


def test_a_link_or_an_oversized_file_is_not_read(tmp_path):
    folder = tmp_path / "calls"
    folder.mkdir()
    target = tmp_path / "elsewhere"
    _write(target, [{"n": 0, "op": "send", "peer": 1, "k": 0, "bytes": [4], "t": 0}])
    os.symlink(target, folder / "rank0.calls")
    (folder / "rank1.calls").write_bytes(b"\0" * (call_sizes.SLOTS * call_sizes.SLOT + 1))
    from ddpdoctor.forensics.evidence import job_files

    with job_files.reading(folder):
        assert call_sizes.read_dir(folder) == {}


def test_a_call_too_large_for_its_slot_is_not_kept():
    assert call_sizes.encode({"op": "all_to_all", "bytes": list(range(4000))}) is None


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="sys.monitoring exists from Python 3.12")
def test_before_python_3_12_nothing_is_watched(tmp_path):
    from ddpdoctor.launch import size_watch

    assert size_watch.start(str(tmp_path / "calls"), "0") is False
    assert not (tmp_path / "calls").exists()


class _FakeC10d:
    """What the watch asks torch.distributed: the world's size, a group's ranks, a group rank's global rank."""

    class GroupMember:
        WORLD = type("World", (), {"size": staticmethod(lambda: 3)})()

    @staticmethod
    def get_process_group_ranks(group):
        return [0, 2]

    @staticmethod
    def get_global_rank(group, group_rank):
        return [0, 2][group_rank]


def _frame(args: dict, caller):
    """A watched function's frame as sys.monitoring hands it over: its arguments, called from the script."""
    return type("Frame", (), {"f_locals": args, "f_back": caller})()


def test_the_watch_writes_what_the_reader_reads(tmp_path):
    """The writer that runs inside a rank (size_watch.Watch; only its trigger needs Python 3.12) and the reader:
    a send to a group rank, a receive from any source (not kept: no peer to pair), an all_to_all_single with
    splits and one without, in a file that wraps around."""
    torch = pytest.importorskip("torch")
    from ddpdoctor.launch import size_watch

    folder = tmp_path / call_sizes.FOLDER
    watch = size_watch.Watch(_FakeC10d(), size_watch._mapped(str(folder), "2"), "/nonexistent/torch/")
    caller = sys._getframe(0)
    line = caller.f_lineno
    watch.p2p("send", _frame({"tensor": torch.ones(4, 32), "dst": None, "group_dst": 1, "group": object()}, caller))
    watch.p2p("recv", _frame({"tensor": torch.ones(4, 16), "src": None, "group": None}, caller))
    watch.a2a_single(_frame({"output": torch.ones(6), "input": torch.ones(7), "input_split_sizes": [3, 2, 2],
                              "output_split_sizes": [2, 2, 2], "group": None}, caller))
    for _ in range(call_sizes.SLOTS):  # wraps: the oldest slots are overwritten, the newest kept
        watch.a2a_single(_frame({"output": torch.ones(6), "input": torch.ones(6), "group": None}, caller))
    kept = call_sizes.read_dir(folder)[2]
    assert len(kept) == call_sizes.SLOTS and kept[-1].n == call_sizes.SLOTS + 1
    assert all(c.sizes == (8, 8, 8) and c.expects == (8, 8, 8) for c in kept)
    # the script's line that called (the live caller frame's line at the call: the loop's)
    assert kept[-1].where.startswith(f"{__file__}:") and int(kept[-1].where.rsplit(":", 1)[1]) > line
    assert kept[-1].k == call_sizes.SLOTS
    fresh = size_watch.Watch(_FakeC10d(), size_watch._mapped(str(folder), "2"), "/nonexistent/torch/")
    fresh.p2p("send", _frame({"tensor": torch.ones(4, 32), "dst": None, "group_dst": 1, "group": object()}, caller))
    fresh.a2a_single(_frame({"output": torch.ones(6), "input": torch.ones(7), "input_split_sizes": [3, 2, 2],
                             "output_split_sizes": [2, 2, 2], "group": None}, caller))
    send, a2a = call_sizes.read_dir(folder)[2]  # a new attempt's file starts empty
    assert (send.op, send.peer, send.group, send.sizes, send.shape) == ("send", 2, (0, 2), (512,), "(4, 32) float32")
    assert (a2a.sizes, a2a.expects, a2a.group) == ((12, 8, 8), (8, 8, 8), None)
    assert a2a.shape == "in (7,) splits [3, 2, 2], out (6,) splits [2, 2, 2] float32"


def test_a_normal_end_is_warned_of_an_all_to_all_split_its_receiver_did_not_expect():
    """gloo accepts a shorter message: rank 1 sends rank 0 one token fewer, the job ends with exit 0. Only an
    all_to_all's split is warned of on a normal end (a send into a larger receive buffer may be meant)."""
    even = [8, 8, 8]
    calls = {r: [_a2a(r, k, even, even, t=k) for k in range(3)] for r in range(3)}
    calls[1].append(_a2a(1, 3, [4, 8, 8], even, t=3, where="moe.py:42"))
    calls[0].append(_a2a(0, 3, even, even, t=3))
    calls[2].append(_a2a(2, 3, even, even, t=3))
    m = sizes.unnoticed(calls)
    assert m is not None and m.culprits == (1,)
    w = sizes.warning(m)
    assert w["rank"] == 1 and w["location"] == "moe.py:42" and w["fix"] == sizes.FIX
    assert "ended normally" in w["message"] and "rank 1 sent rank 0 4 B" in w["message"]
    assert sizes.unnoticed(_pipeline(128, 256)) is None  # a shorter send into a larger buffer: no warning


def test_the_warning_is_shown_beside_the_pass(tmp_path):
    from rich.console import Console

    from ddpdoctor.report import console_trainer
    from ddpdoctor.report.views.trainer import trainer_view

    w = {"rank": 1, "location": "/job/moe.py:42", "message": "the job ended normally, but its data is not what it "
         "sent: rank 1 sent rank 0 4 B", "fix": sizes.FIX}
    line = console_trainer.warning_line(w)
    assert line.startswith("warning: rank 1 at ") and "moe.py:42" in line and "fix: make the sizes agree" in line
    assert trainer_view({"verdict": "pass", "warnings": [w, "not a dict"]})["warnings"] == [w]
    console = Console(record=True, width=200)
    console_trainer.render({"kind": "run-trainer", "verdict": "pass", "metrics_summary": {}, "warnings": [w]},
                           console)
    assert "warning: rank 1" in console.export_text()
