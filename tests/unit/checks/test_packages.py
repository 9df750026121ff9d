"""Unit tests of checks/packages.py."""
from __future__ import annotations

from ddpdoctor_checks import (
    packages,
)

from ddpdoctor.api import Level
from tests.unit.helpers import ctx, levels, only


# ---------------------------------------------------------------- packages
def test_packages_gather_lists_pins_with_fingerprint():
    facts = packages.PackagesCheck().gather(ctx())
    assert any(p.startswith("torch==") for p in facts["packages"])
    assert any(p.startswith("click==") for p in facts["packages"])
    assert facts["fingerprint"] == packages.fingerprint(facts["packages"])
    assert facts["count"] == len(facts["packages"])


def test_dist_info_names_agree_with_metadata():
    from importlib import metadata

    for item in packages.installed():
        assert metadata.version(item["name"]) == item["version"], item


def test_packages_missing_required_and_shadowed_copy():
    facts = {"packages": ["click==8.1.7", "torch==2.13.0"], "count": 2, "fingerprint": "x",
             "shadowed": [{"name": "numpy", "used": "2.1.0", "shadowed": "1.26.4", "location": "/home/u/.local"}]}
    res = packages.PackagesCheck().compare({"n1": facts}, packages.PackagesCheck().with_defaults({"required": "torch, NumPy_x"}))
    assert only(res, Level.FAIL)[0].fix == "pip install numpy-x"
    (w,) = only(res, Level.WARN)
    assert "numpy" in w.summary and "1.26.4" in w.summary
    ok = packages.PackagesCheck().compare({"n1": dict(facts, shadowed=[])}, packages.PackagesCheck().with_defaults({"required": "torch"}))
    assert levels(ok) == [Level.PASS]
