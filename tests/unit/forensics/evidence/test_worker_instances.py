"""Unit tests of which flight-recorder instances the worker-server clients ask (evidence/worker_client.py, the
live watchdog's; attach/job_access.py, attach's): a stand-in for torch's worker server on a unix socket that
answers as torch's does: ``GET /handler/`` the handler names (WorkerServer.cpp), ``POST /handler/fr_trace_json``
gloo's record (any ``?backend=`` ignored where the torch has no per-backend instances, as 2.13.0 answers),
``POST /handler/dump_nccl_trace_json`` ProcessGroupNCCL's record and 400 for a parameter other than
includecollectives / onlyactive (FlightRecorderCuda.cpp lines 64-107), 404 for a handler it does not have."""
from __future__ import annotations

import json
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest

from ddpdoctor.forensics.evidence import fr_backends, worker_client

from .test_fr_backends import EMPTY, nccl_record, nccl2_record

CPU_213 = ["dump_traceback", "pyspy_dump", "wait_counter_values", "fr_trace_json", "ping"]
CUDA_214 = CPU_213 + ["dump_nccl_trace_json", "dump_nccl_trace_pickle"]
CUDA_215 = CUDA_214 + ["fr_dump_file", "c10d_health_check"]


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(path, handlers, records):
    """A worker server with these handler names; ``records``: instance name -> record. Returns (server, log)."""
    log = []

    class Handler(BaseHTTPRequestHandler):
        def address_string(self):
            return "unix"

        def log_message(self, *args):
            pass

        def answer(self, status, body):
            raw = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            log.append(("GET", self.path))
            if self.path == "/handler/":
                return self.answer(200, json.dumps(handlers))
            return self.answer(404, "not found")

        def do_POST(self):
            log.append(("POST", self.path))
            url = urlsplit(self.path)
            name = url.path.removeprefix("/handler/")
            params = parse_qs(url.query)
            if name not in handlers:
                return self.answer(404, f"Handler {name} not found")
            if name == "dump_nccl_trace_json":
                if set(params) - {"includecollectives", "onlyactive"}:
                    return self.answer(400, "Invalid parameters - unexpected param passed in")
                return self.answer(200, json.dumps(records.get("nccl", EMPTY)))
            if name == "fr_trace_json":
                backend = params.get("backend", ["gloo"])[0] if "fr_dump_file" in handlers else "gloo"
                return self.answer(200, json.dumps(records.get(backend, EMPTY)))
            return self.answer(200, "")

    srv = Server(str(path), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, log


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(worker_client, "_INSTANCES", None)
    from ddpdoctor.forensics.attach import job_access
    monkeypatch.setattr(job_access, "_INSTANCES", None)


def posts(log):
    return [p for m, p in log if m == "POST"]


def test_an_nccl_job_on_a_213_or_214_cuda_build_is_read_live(tmp_path, fresh_memo):
    srv, log = serve(tmp_path / "0.sock", CUDA_214, {"nccl": nccl_record()})
    try:
        got = worker_client.flight_record(tmp_path / "0.sock", timeout=3)
        assert got["entries"] and all(e["profiling_name"].startswith("nccl:") for e in got["entries"])
        assert posts(log) == ["/handler/fr_trace_json", "/handler/dump_nccl_trace_json"]
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_213_cpu_rank_is_asked_one_instance_a_poll_and_its_names_once(tmp_path, fresh_memo):
    srv, log = serve(tmp_path / "0.sock", CPU_213, {"gloo": nccl2_record()})
    try:
        for _ in range(3):
            assert worker_client.flight_record(tmp_path / "0.sock", timeout=3)["entries"]
        assert log.count(("GET", "/handler/")) == 1
        assert posts(log) == ["/handler/fr_trace_json"] * 3  # not 5 identical answers a poll
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_215_cuda_rank_is_asked_every_backend_and_nccl_legacys_instance(tmp_path, fresh_memo):
    srv, log = serve(tmp_path / "0.sock", CUDA_215, {"nccl2": nccl2_record(), "nccl": nccl_record(pg=2)})
    try:
        got = worker_client.flight_record(tmp_path / "0.sock", timeout=3)
        assert {e["profiling_name"].split(":")[0] for e in got["entries"]} == {"nccl", "nccl2"}
        assert "/handler/fr_trace_json?backend=nccl2" in posts(log)
        assert "/handler/dump_nccl_trace_json" in posts(log)  # without ?backend=: it would answer 400
    finally:
        srv.shutdown()
        srv.server_close()


def test_attach_reads_the_nccl_instance_with_the_jobs_rights(tmp_path, fresh_memo):
    from ddpdoctor.forensics.attach import discover as disc
    from ddpdoctor.forensics.attach import job_access

    srv, log = serve(tmp_path / "0.sock", CUDA_214, {"nccl": nccl_record()})
    try:
        rp = disc.RankProcess(os.getpid(), 0, 0, 1, 0, "p", "u", uid=os.getuid(), gid=os.getgid(),
                              worker_socket=str(tmp_path / "0.sock"))
        got = job_access.worker_record(rp, timeout=5)
        got_again = job_access.worker_record(rp, timeout=5)
        assert got and got == got_again and all(e["profiling_name"].startswith("nccl:") for e in got["entries"])
        assert log.count(("GET", "/handler/")) == 1
        assert fr_backends.NCCL_HANDLER in posts(log)[1]
    finally:
        srv.shutdown()
        srv.server_close()
