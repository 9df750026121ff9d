"""Every store key has words a person can read (issue 20 item 6: no protocol names in messages)."""
from __future__ import annotations

import re

from ddpdoctor.cluster.messages import ABOUT, COUNTERS, KINDS, Slot, about, key_of

# The protocol's own names as a person would see them in a message (not words like "identity").
INTERNAL = re.compile(r"\b(cfacts|ident(?![a-z])|collective-go|shared-nonce|claim/\d|beat/|done/|facts/\d)")


def test_every_key_has_words_and_a_strangers_key_is_named_as_such():
    for kind in KINDS:
        text = about(key_of(kind, Slot(2, 1)))
        assert "does not write" not in text and not INTERNAL.search(text), (kind, text)
    for template in COUNTERS.values():
        text = about(template.format(rank=3, slot=Slot(3, 1)))
        assert "does not write" not in text and not INTERNAL.search(text), (template, text)
    assert about("cfacts/2.1") == "node rank 2's collective test results"
    assert about("ident/7/2") == "node rank 7's identity"
    assert about("../../etc") == about("x" * 1000) == "a message ddpdoctor does not write"
    assert set(ABOUT) >= {key_of(k, Slot(0, 1)).split("/")[0] for k in KINDS}


def test_refusals_and_findings_name_messages_in_words_not_store_keys():
    """What a refused message was, and where it was found, reads as words: a copied message, a worker's
    message where only the master writes, another claimant's slot; the findings built from them too."""
    import pytest

    from ddpdoctor.cluster import verdict
    from ddpdoctor.cluster.envelope import open_envelope, seal
    from ddpdoctor.cluster.messages import Finding, Invalid

    run = "a" * 32
    refusals = []
    for sealed_as, stored, sender, from_master in [("cfacts/2.1", "facts/2.1", Slot(2, 1), False),
                                                   ("verdict", "verdict", Slot(1, 1), True),
                                                   ("facts/2.1", "facts/2.1", Slot(2, 1), False)]:
        frame = seal({"x": 1}, token="t", run=run, key=sealed_as, sender=sender)
        expect = Slot(2, 2) if stored == sealed_as and not from_master else sender
        with pytest.raises(Invalid) as exc:
            open_envelope(frame, token="t", run=run, key=stored, sender=expect, from_master=from_master)
        refusals.append(str(exc.value))
    assert refusals[0] == ("a copy of node rank 2's collective test results, stored under the name of node rank 2's "
                           "check results")
    assert refusals[1] == "sent by node rank 1, and only the master (node rank 0) sends the verdict"
    assert refusals[2] == "sent by node rank 2 (claimant 1), the key belongs to node rank 2 (claimant 2)"
    results = verdict.finding_results([Finding("ident/2/1", "signature does not match this node's token"),
                                       Finding("cfacts/2.1", refusals[0])], "the master")
    for r in results:
        assert not INTERNAL.search(r.summary), r.summary
    assert "node rank 2's identity failed" in results[0].summary
    assert "in place of node rank 2's collective test results:" in results[1].summary
    assert results[1].details["key"] == "cfacts/2.1"  # the store key stays in the details, for forensics
