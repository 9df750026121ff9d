"""The job comments a prolog writes (launchers/slurm_node.py): one line within squeue's width, cut in the finding,
never in what the user is told to do."""
from __future__ import annotations

from ddpdoctor import shared_libs
from ddpdoctor.cluster.join import NO_TORCH
from ddpdoctor.launchers.slurm_node import MAX_COMMENT, MAX_REASON, drain_reason, link_comment


def test_a_failing_links_comment_names_the_link_and_how_to_keep_off_it():
    text = link_comment("mesh", "link node1 -> node3 timed out (TCP to 198.18.4.3:41234)", ["node1", "node3"])
    assert text.startswith("ddpdoctor: the meeting of the job nodes found mesh: link node1 -> node3 timed out "
                           "(TCP to 198.18.4.3:41234); no node drained"), text
    assert text.endswith("resubmit with --exclude=node3 (or node1)") and len(text) <= MAX_COMMENT, text


def test_a_long_finding_is_cut_and_the_advice_kept():
    finding = "link node1 -> node3 refused: " + "x" * 400 + "\nsecond line"
    text = link_comment("mesh", finding, ["node1", "node3"])
    assert len(text) <= MAX_COMMENT and "\n" not in text, text
    assert "link node1 -> node3 refused" in text and "xxx..." in text
    assert text.endswith("not requeued (same nodes, same link): resubmit with --exclude=node3 (or node1)"), text


def test_a_drain_for_a_truncated_library_names_it_under_a_long_venv_path(tmp_path):
    """CI's venv (/tmp/ddpdoctor-ci.XXXXXX/venv/lib/python3.11/site-packages/torch/lib) cut the drain reason in the
    middle of the path, before the library's name: the name comes first, the path last."""
    lib = tmp_path / "ddpdoctor-ci.KRtFv0" / "venv" / "lib" / "python3.11" / "site-packages" / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_cpu.so").write_bytes(b"\x7fELF")  # shorter than an ELF header
    (line,) = shared_libs.truncated(str(lib))
    reason = drain_reason("cross-node", f"{NO_TORCH} (not imported: {line})", "meeting", "node3")
    assert len(reason) <= MAX_REASON, reason
    assert "not imported: libtorch_cpu.so is truncated" in reason, reason
    assert reason.endswith("once fixed: scontrol update NodeName=node3 State=RESUME"), reason
