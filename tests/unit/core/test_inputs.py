"""The input policy for result files: size cap, nesting depth, encodings, schema_version, document shapes.

In-process tests of inputs.py / shapes.py / documents.load, a fuzz of every key of realistic documents through
the whole report, and of `ddpdoctor report` (one line on stderr, exit 2, no traceback); a subprocess only where
the process's own peak memory is measured.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from ddpdoctor import documents, inputs
from ddpdoctor.errors import UsageError
from ddpdoctor.report.html import build_html
from tests import report_fixtures as fx
from tests.unit.helpers import assert_usage_error, run_cli


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


# -- reading ------------------------------------------------------------------------------------------

def test_read_bounded_reads_at_most_cap_plus_one(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b"x" * 101)
    with pytest.raises(UsageError, match="larger than 100 B"):
        inputs.read_bounded(f, 100)
    assert inputs.read_bounded(f, 101) == b"x" * 101


def test_read_bounded_unreadable_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        inputs.read_bounded(tmp_path / "absent.json", 10)
    with pytest.raises(UsageError, match="cannot read"):
        inputs.read_bounded(tmp_path, 10)  # a directory


@pytest.mark.parametrize("raw, needle", [
    ('{"a": 1}'.encode("utf-16"), "UTF-16"),
    ('{"a": 1}'.encode("utf-16-be"), "binary data"),  # no BOM: the NUL bytes give it away
    ('{"a": 1}'.encode("utf-32"), "UTF-32"),
    (bytes(range(256)), "binary data"),
    (b'{"a": "\xff\xfe"}', "not UTF-8"),
])
def test_undecodable_text_is_named(raw, needle):
    with pytest.raises(UsageError, match=needle):
        inputs.decode_utf8(raw, "f.json")


def test_utf8_bom_is_tolerated():
    assert inputs.decode_utf8(b"\xef\xbb\xbf{}", "f.json") == "{}"


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deep_nesting_is_a_usage_error(depth):
    with pytest.raises(UsageError, match="nested deeper than 64"):
        inputs.parse_json("[" * depth + "]" * depth, "deep.json")
    with pytest.raises(UsageError, match="nested deeper than 64"):
        inputs.parse_json('{"a":' * depth + "1" + "}" * depth, "deep.json")


def test_nesting_at_the_limit_parses():
    assert inputs.nesting_depth(inputs.parse_json("[" * 64 + "]" * 64, "ok.json"), 64) == 64
    assert inputs.nesting_depth(5, 64) == 0


def test_invalid_json_is_named():
    with pytest.raises(UsageError, match="not valid JSON"):
        inputs.parse_json('{"a": ', "t.json")


# -- validation -----------------------------------------------------------------------------------------

def test_schema_version_true_is_rejected():
    doc = fx.bench(world=2, suspects=False)
    doc["schema_version"] = True
    with pytest.raises(UsageError, match="unsupported schema_version True"):
        documents.validate(doc, "b.json")
    doc["schema_version"] = 1.0
    with pytest.raises(UsageError, match="schema_version"):
        documents.validate(doc, "b.json")


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(nodes=5), "nodes should be an object"),
    (lambda d: d.update(results="x"), "results should be a list"),
    (lambda d: d.update(verdict=3), "verdict should be pass / skip / warn / fail"),
    (lambda d: d["results"][0].update(level="bad"), "results[0].level"),
    (lambda d: d["results"][0].pop("check"), "results[0].check is missing"),
    (lambda d: next(iter(d["nodes"].values()))["facts"].update({"mesh": {"probes": 7}}), ".facts.mesh.probes"),
    (lambda d: next(iter(d["nodes"].values()))["facts"].update({"clock-skew": {"offset_ms": "3"}}), "offset_ms"),
])
def test_wrong_preflight_shapes_name_the_key(mutate, needle):
    doc = fx.preflight(n=3, evil=False)
    mutate(doc)
    with pytest.raises(UsageError, match="bad document shape") as err:
        documents.validate(doc, "p.json")
    assert needle in str(err.value) and str(err.value).startswith("p.json: ")


def test_realistic_documents_pass_validation():
    for doc in (fx.preflight(n=8), fx.bench(), fx.trainer()):
        documents.validate(json.loads(json.dumps(doc)), "ok.json")


def _paths(obj, prefix=()):
    """Every key path of a document (lists: their first two items), leaves and subtrees alike."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value):
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


JUNK = [None, True, 7, -1.5, float("nan"), float("inf"), "x", [], {}, [1, "a"], {"k": 1}]


@pytest.mark.slow  # thousands of whole-report builds: tens of seconds on a loaded 2-core box
@pytest.mark.timeout(300)
@pytest.mark.parametrize("make", [lambda: fx.preflight(n=3, evil=True), lambda: fx.bench(world=4),
                                  lambda: fx.trainer(ranks=2, steps=20)], ids=["preflight", "bench", "trainer"])
def test_any_junk_anywhere_is_a_report_or_a_usage_error(make):
    """The report builds, or validation names the file: never a TypeError/KeyError/ValueError (exit 4)."""
    raw = json.dumps(make())
    base = json.loads(raw)
    crashes = []
    paths = [p for p in _paths(base) if p[0] not in ("schema", "kind")]
    for path in paths:
        for junk in JUNK:
            doc = json.loads(raw)  # a fresh copy: several times cheaper than copy.deepcopy for plain JSON
            _set(doc, path, junk)
            try:
                documents.validate(doc, "f.json")
            except UsageError:
                continue
            try:
                build_html([doc])
            except Exception as exc:  # noqa: BLE001 - the point of the test
                crashes.append(f"{'.'.join(map(str, path))} = {junk!r}: {type(exc).__name__}: {exc}")
    assert not crashes, f"{len(crashes)} crash(es), e.g.:\n" + "\n".join(crashes[:15])


def test_nan_loss_is_a_result_not_a_crash():
    doc = json.loads(json.dumps(fx.trainer(ranks=2, steps=20)))
    for rows in doc["metrics"].values():
        rows[-1]["loss"] = math.nan
    documents.validate(doc, "t.json")
    assert "<svg" in build_html([doc])


# -- the command ----------------------------------------------------------------------------------------

@pytest.mark.timeout(180)
@pytest.mark.parametrize("name, content, needle", [
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    ("bool.json", json.dumps({"schema": "ddpdoctor", "schema_version": True, "kind": "nccl-bench"}).encode(),
     "schema_version True"),
    ("u16.json", json.dumps({"schema": "ddpdoctor"}).encode("utf-16"), "UTF-16"),
    ("bin.json", bytes(range(256)) * 4, "binary data"),
    ("shape.json", json.dumps({"schema": "ddpdoctor", "schema_version": 1, "kind": "nccl-bench", "rows": 5}).encode(),
     "rows should be a list"),
    ("list.json", b"[1, 2]", "not a ddpdoctor result file"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_report_bad_inputs_exit_2_with_one_line(tmp_path, name, content, needle):
    f = tmp_path / name
    f.write_bytes(content)
    proc = run_cli("report", str(f), "-o", str(tmp_path / "r.html"))
    assert_usage_error(proc, name, needle)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.timeout(120)
def test_report_oversized_input_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "huge.json"
    with open(big, "wb") as fh:  # 1 GiB, sparse: costs no disk, and reading it all would cost 1 GiB of memory
        fh.truncate(1 << 30)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c",
                           "import resource, sys\n"
                           "from ddpdoctor.cli import run\n"
                           "rc = run(['report', sys.argv[1], '-o', sys.argv[2]])\n"
                           # VmHWM: ru_maxrss is carried across fork+exec from a big pytest parent
                           "print(int(next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')).split()[1]) // 1024)\n"
                           "sys.exit(rc)", str(big), str(tmp_path / "r.html")],
                          capture_output=True, text=True, timeout=100)
    assert_usage_error(proc, "huge.json", "larger than 64 MiB")
    assert int(proc.stdout.strip()) < 400, f"peak RSS {proc.stdout.strip()} MiB"
    assert time.monotonic() - started < 0 + 60  # refused without reading; 60 s: an interpreter's start-up, loaded


def test_facts_are_checked_against_the_shape_their_check_declares():
    """shapes knows no check: the installed checks declare their facts' shape (Check.facts_shape), a plugin
    the same way; a malformed declaration leaves that check's facts unchecked rather than refusing the file."""
    from ddpdoctor import shapes

    doc = fx.preflight(n=3, evil=False)
    node = next(iter(doc["nodes"]))
    doc["nodes"][node]["facts"]["my-plugin"] = {"temps": [41, None]}
    shapes.check_document(doc, "p.json", {"my-plugin": {"temps": ["number?"]}})  # null allowed, a string not:
    doc["nodes"][node]["facts"]["my-plugin"]["temps"] = [41, "hot"]
    with pytest.raises(UsageError, match=r"facts\.my-plugin\.temps\[1\] should be a number"):
        shapes.check_document(doc, "p.json", {"my-plugin": {"temps": ["number"]}})
    shapes.check_document(doc, "p.json", {"my-plugin": {"temps": ["no such type"]}})  # ignored, not a crash
    assert "KNOWN_FACTS" not in vars(shapes)
    declared = documents.facts_shapes()
    assert {"clock-skew", "mesh"} <= set(declared) and all(shapes.from_spec(s) for s in declared.values())

