"""nccl-bench's bad input: one line and exit 2 before any rank starts (in-process; moved from the integration
tests, where each case cost an interpreter's start-up)."""
from __future__ import annotations

import pytest

from tests.unit.helpers import run_cli


@pytest.mark.parametrize("args,needle", [
    (["-b", "1M", "-e", "64K"], "above"),
    (["-b", "0"], "positive"),
    (["-e", "-5M"], "positive"),
    (["--op", "all_gatherz"], "unknown collective"),
    (["-d", "complex128"], "unknown"),
    (["--graph", "--backend", "gloo"], "CUDA graph"),
    (["--backend", "nccl"], "CUDA"),
    (["--nnodes", "2"], "--master"),
    # a sweep that measures nothing: an empty table, "0 OK" and exit 0 before
    (["-b", "3", "-e", "3"], "nothing to measure: all_reduce needs -e/--max-bytes of at least 4 B"),
    (["-b", "1", "-e", "1", "--op", "all", "-d", "float64"], "all_gather needs -e/--max-bytes of at least 16 B"),
    (["--op", "sendrecv", "--nproc", "1", "--backend", "gloo"], "sendrecv needs at least 2 ranks"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    p = run_cli("nccl-bench", *args)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and needle in lines[0], p.stderr


@pytest.mark.parametrize("env,needle", [
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": None, "MASTER_PORT": None}, "MASTER_ADDR, MASTER_PORT are missing"),
    ({"RANK": "0", "WORLD_SIZE": "x", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "WORLD_SIZE='x' is not usable"),
    ({"RANK": "", "WORLD_SIZE": "", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK='', WORLD_SIZE='' are not usable"),
    # issue 25 item 5: a 300-character host made torch retry its resolution until the rendezvous timeout
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h" * 300, "MASTER_PORT": "29500"},
     "MASTER_ADDR='" + "h" * 40 + "'... (not an IP address or host name) is not usable"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a." + "b" * 100, "MASTER_PORT": "29500"}, "not an IP address"),
])
def test_a_launchers_environment_that_torch_cannot_use_is_one_line_exit_2(env, needle):
    """RANK and WORLD_SIZE left in a shell (or a launcher that sets no MASTER_ADDR): torch's ValueError from
    init_process_group was exit 4, "internal error"."""
    p = run_cli("nccl-bench", "--backend", "gloo", env=env)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "torchrun" in lines[0], p.stderr
