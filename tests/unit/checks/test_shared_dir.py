"""Unit tests of checks/shared_dir.py."""
from __future__ import annotations

from ddpdoctor_checks.shared_dir import SharedDirCheck

from ddpdoctor.api import Level


def fails(results):
    return [r for r in results if r.level is Level.FAIL]


def test_shared_dir_names_the_node_that_cannot_see_the_file():
    facts = {"m": {"path": "/ckpt", "fstype": "nfs4", "mountpoint": "/ckpt", "seen": True, "seconds": 0.0},
             "w": {"path": "/ckpt", "fstype": "ext4", "mountpoint": "/", "seen": False}}
    res = SharedDirCheck().compare(facts, SharedDirCheck().with_defaults({"visible_within_s": 10.0}))
    (f,) = fails(res)
    assert f.nodes == ["w"] and "ext4" in f.summary and "mount shared storage" in f.fix


def test_shared_dir_unwritable_on_the_master():
    facts = {"m": {"path": "/ckpt", "fstype": "nfs4", "mountpoint": "/ckpt", "seen": False,
                   "error": "the master could not write there: unwritable PermissionError"}}
    (f,) = SharedDirCheck().compare(facts, SharedDirCheck().with_defaults({}))
    assert f.level is Level.FAIL and "could not write" in f.summary and "writable" in f.fix
