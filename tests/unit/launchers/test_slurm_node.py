"""The job comments a prolog writes (launchers/slurm_node.py): one line within squeue's width, cut in the finding,
never in what the user is told to do."""
from __future__ import annotations

from ddpdoctor.launchers.slurm_node import MAX_COMMENT, link_comment


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
