"""Unit tests of ddpdoctor/documents.py."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ddpdoctor import documents
from ddpdoctor.api import Level, Result
from ddpdoctor.errors import UsageError
from tests.unit.conftest import _run, leftovers


# ---------------------------------------------------------------- model
def test_dump_and_load_roundtrip(tmp_path):
    doc = documents.preflight_doc(scope="node", nodes={}, checks=[], results=[Result("a", Level.FAIL, "x")], run={})
    path = documents.dump(doc, tmp_path / "sub" / "a.json")
    loaded = documents.load(path)
    assert loaded["verdict"] == "fail" and loaded["exit_code"] == 1 and loaded["schema_version"] == 1
    assert not list(tmp_path.glob("sub/.*tmp"))


@pytest.mark.parametrize("content,needle", [
    ('{"schema": "ddpdoctor", "schema_version": 1, "kind": "preflight", "nodes"', "not valid JSON"),
    ('{"hello": 1}', "not a ddpdoctor result file"),
    ('{"schema": "ddpdoctor", "schema_version": 99, "kind": "preflight"}', "unsupported schema_version 99"),
    ('{"schema": "ddpdoctor", "schema_version": 1, "kind": "weather"}', "unknown kind"),
    ('{"schema": "ddpdoctor", "schema_version": 1, "kind": "preflight"}', "lacks"),
])
def test_load_errors_name_the_file(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        documents.load(path)
    assert needle in str(err.value) and str(path) in str(err.value)
    with pytest.raises(UsageError, match="cannot read"):
        documents.load(tmp_path / "missing.json")


def test_write_atomic_on_a_full_disk_names_path_and_free_space(tiny_fs):
    target = tiny_fs / "out" / "doc.json"
    with pytest.raises(UsageError) as err:
        documents.write_atomic(target, "x" * 200_000)
    msg = str(err.value)
    assert str(target) in msg and "No space left on device" in msg and "free in" in msg
    assert leftovers(tiny_fs) == [] and not target.exists()


def test_write_atomic_keeps_the_old_file_whole(tmp_path, tiny_fs):
    target = tiny_fs / "filler"  # exists; a failed rewrite must not truncate it
    size = target.stat().st_size
    with pytest.raises(UsageError):
        documents.write_atomic(target, "y" * 200_000)
    assert target.stat().st_size == size and leftovers(tiny_fs) == []


def test_read_only_filesystem_is_a_usage_error(tiny_fs):
    if _run("mount", "-o", "remount,ro", str(tiny_fs)).returncode != 0:
        pytest.skip("cannot remount read-only")
    with pytest.raises(UsageError, match="Read-only file system"):
        documents.dump({"a": 1}, tiny_fs / "x.json")


def test_write_error_without_an_existing_directory():
    path = Path(f"/nonexistent-{uuid.uuid4().hex}/x.json")
    err = documents.write_error(path, OSError(28, "No space left on device"))
    assert str(path) in str(err) and "free in /" in str(err)


def test_own_results_are_what_a_worker_adds_to_the_masters_verdict():
    from ddpdoctor.documents import own_results

    results = [{"check": "mesh"}, {"check": "parity"}, {"check": "messages", "level": "warn"}]
    worker = {"role": "worker", "master": {"node": "n0", "results": 2}, "results": results}
    assert own_results(worker) == [{"check": "messages", "level": "warn"}]
    assert own_results(dict(worker, role="master")) == []  # the master's own document: all of it is its verdict
    assert own_results(dict(worker, master={"results": True})) == [] and own_results({"results": results}) == []
