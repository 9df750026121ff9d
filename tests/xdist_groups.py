"""Which tests stay together on one xdist worker under README's `--dist loadgroup` (a plugin of conftest's:
its collection hook must run before xdist's, conftest's own runs last).

A file's tests spread over the workers, so no long file is one worker's long pole; a file where a test shares
a fixture built once (the SLURM cluster, a built wheel, a browser page) stays whole on one worker, which builds
it once, and its other tests (one that builds its own cluster on the same addresses, as test_slurm's teardown
test does) never run beside it."""
from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its worker's own modifyitems)
def pytest_collection_modifyitems(items):
    shared = {str(item.path) for item in items if _uses_a_shared_fixture(item)}
    for item in items:
        if str(item.path) in shared:
            item.add_marker(pytest.mark.xdist_group(str(Path(str(item.path)).resolve().relative_to(TESTS))))


def _uses_a_shared_fixture(item) -> bool:
    """The test uses a fixture of module, package or class scope (one built for many tests)."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        if any(str(getattr(d, "scope", "function")) in ("module", "package", "class") for d in defs):
            return True
    return False
