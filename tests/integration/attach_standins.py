"""Stand-in processes for tests/integration/test_attach_trust.py: a launcher (run through a link named torchrun, the
program torchrun's agent runs) and ranks that do what a job may do to ``ddpdoctor attach`` run by root beside it:
name another user's pipe, file or socket in their environment, swap a link in after a dump request, serve a
socket from another process. Torch is not imported: the ranks sleep in their own code, or in a function
``all_reduce`` of a file whose path ends in torch/distributed/distributed_c10d.py (what py-spy shows of a rank
inside a collective). Each rank keeps secrets in its locals (attach must never send them to the master).

Run as ``python attach_standins.py launcher torchrun-stand-in SPECS_JSON`` (every spec: the environment of one
rank) or ``python attach_standins.py rank``."""
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time

# under a folder named site-packages, as torch is installed: attach's one library-frame rule (evidence.model.LIBRARY)
# then reads a rank inside it as a rank inside torch's collective, called from the stand-in's own code
FAKE_C10D = os.path.join(os.path.dirname(os.path.realpath(__file__)), "fake_torch", "site-packages", "torch",
                         "distributed", "distributed_c10d.py")


def record(marker: str, enqueued: int = 9) -> dict:
    """A flight record (torch's dump fields) whose group and call carry ``marker``."""
    entry = {"record_id": enqueued, "pg_id": 0, "process_group": ["0", marker], "collective_seq_id": enqueued,
             "p2p_seq_id": 0, "op_id": enqueued, "profiling_name": f"nccl:all_reduce {marker}", "time_created_ns": 1,
             "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
             "state": "started", "timeout_ms": 1800000, "is_p2p": False,
             "frames": [{"name": marker, "filename": f"/{marker}.py", "line": 1}]}
    return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": marker, "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": enqueued, "last_completed_collective": enqueued - 1}},
            "entries": [entry]}


def write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.part"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def answer_dump_requests(fd: int, respond) -> None:
    """torch's monitor thread: poll the pipe without blocking; each request gets ``respond()``."""
    while True:
        try:
            got = os.read(fd, 128)
        except BlockingIOError:
            got = b""
        if got:
            respond()
        time.sleep(0.1)


def serve_http(path: str, body: bytes, log: str | None = None) -> None:
    """A worker server's answer (HTTP 200 and ``body``) on a unix socket; each connection noted in ``log``."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    while True:
        conn, _ = srv.accept()
        if log:
            with open(log, "a") as fh:
                fh.write("connected\n")
        conn.settimeout(5)
        try:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        except OSError:
            pass
        conn.close()


def own_compute() -> None:
    while True:
        time.sleep(0.5)


def rank_main() -> None:
    rank = int(os.environ["RANK"])
    role = os.environ.get("ROLE", "")
    home = os.environ.get("JOB_HOME", "")
    # secrets a script keeps in its locals (py-spy --locals shows them on this node; they never travel)
    api_token = "ghp_" + "Q7x9" * 9
    password = "hunter2-" + "s3cr3t" * 3
    db_url = "postgres://trainer:pw-" + "Zk4" * 6 + "@db.internal:5432/runs"
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if stem and role != "foreign_pipe":  # torch's own dump pipe, held open by this process
        pipe = f"{stem}{rank}.pipe"
        os.mkfifo(pipe, 0o600)
        fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        dump = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank)

        def respond():
            open(os.path.join(home, f"asked{rank}"), "a").close()
            if role == "dir_swap":  # the dump's folder becomes a link to root's folder after the request
                os.rename(os.path.join(home, "d1"), os.path.join(home, "d1.old"))
                os.symlink(os.environ["ROOT_DIR"], os.path.join(home, "d1"))
            elif role == "link_swap":  # the dump file becomes a link to root's file after the request
                tmp = dump + ".link"
                os.symlink(os.path.join(os.environ["ROOT_DIR"], "secret_2"), tmp)
                os.replace(tmp, dump)
            elif role == "honest":
                write_atomically(dump, json.dumps(record(f"HONEST{rank}")).encode())

        threading.Thread(target=answer_dump_requests, args=(fd, respond), daemon=True).start()
    if role == "honest_server":
        sock = os.environ["DDPDOCTOR_WORKER_SOCKET"].replace("{rank}", str(rank))
        threading.Thread(target=serve_http, args=(sock, json.dumps(record(f"SERVED{rank}")).encode()),
                         daemon=True).start()
    open(os.path.join(home, f"ready{rank}"), "w").close()
    if os.environ.get("WAITS") == "1":
        spec = importlib.util.spec_from_file_location("fake_c10d", FAKE_C10D)
        c10d = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(c10d)
        c10d.all_reduce([api_token, password, db_url])
    own_compute()


def launcher_main(specs: list[dict]) -> None:
    # /proc/self/exe: the interpreter that runs this launcher, even where the path to it (a venv in a folder
    # only root may search) is closed to the job's user
    procs = [subprocess.Popen([sys.executable, os.path.realpath(__file__), "rank"], executable="/proc/self/exe",
                              env={**os.environ, **spec}) for spec in specs]
    served = os.environ.get("LAUNCHER_SERVES")  # a socket a rank names that the launcher, not the rank, serves
    if served:
        threading.Thread(target=serve_http, args=(served, b"{}", served + ".log"), daemon=True).start()
    for p in procs:
        p.wait()


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        rank_main()
    else:
        launcher_main(json.loads(sys.argv[3]))
