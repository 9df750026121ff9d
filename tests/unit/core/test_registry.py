"""Unit tests of ddpdoctor/registry.py."""
from __future__ import annotations

import pytest

from ddpdoctor import registry
from ddpdoctor.errors import UsageError


# ---------------------------------------------------------------- config
def checks():
    return registry.discover()


# ---------------------------------------------------------------- registry
def test_builtins_register_through_entry_points():
    loaded = {lc.name: lc for lc in checks()}
    for name in ("torch-build", "packages", "env-vars", "gpu", "network", "resources", "clock-sync",
                 "mesh", "clock-skew", "names", "parity", "collective"):
        assert name in loaded, name
        assert loaded[name].source.startswith("ddpdoctor "), loaded[name].source
        assert loaded[name].check.description


def test_select_only_skip_and_unknown_names():
    loaded = checks()
    assert [lc.name for lc in registry.select(loaded, ["packages"], [])] == ["packages"]
    assert "packages" not in [lc.name for lc in registry.select(loaded, [], ["packages"])]
    with pytest.raises(UsageError, match="nosuch"):
        registry.select(loaded, ["nosuch"], [])
    with pytest.raises(UsageError, match="nosuch"):
        registry.select(loaded, [], ["nosuch"])
