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
