"""Issue 53 item 5: the user's code is the job's entry script and its package, wherever installed. After a plain
`pip install .` the reference trainer lives in site-packages, and so does any user package started with
`-m mypkg.train`: their frames were taken for library frames and no file:line was printed."""
from __future__ import annotations

import pytest

from ddpdoctor.forensics.evidence import user_code
from ddpdoctor.forensics.evidence.model import Frame, is_library, user_frame
from ddpdoctor.forensics.judge.classify import user_frame as traceback_frame

SITE = "/venv/lib/python3.11/site-packages"


@pytest.fixture(autouse=True)
def nothing_declared():
    user_code.declare()
    yield
    user_code.declare()


def test_an_installed_package_is_a_library_until_the_job_runs_it():
    frame = f"{SITE}/mypkg/train.py"
    assert is_library(frame)
    user_code.declare(module="mypkg.train")
    assert not is_library(frame) and not is_library(f"{SITE}/mypkg/data/loader.py")
    assert is_library(f"{SITE}/torch/distributed/distributed_c10d.py") and is_library(f"{SITE}/mypkg_other/x.py")
    assert is_library("/usr/lib/x86_64-linux-gnu/libc.so.6")  # native stays native


def test_the_reference_trainer_installed_by_pip_is_the_user_s_code_under_run_trainer():
    user_code.declare(module="ddpdoctor_trainer.train")
    frames = (Frame("/usr/lib/python3.11/threading.py", 320, "wait"),
              Frame(f"{SITE}/ddpdoctor_trainer/faults.py", 42, "hang_forever"),
              Frame(f"{SITE}/ddpdoctor_trainer/train.py", 197, "main"))
    assert user_frame(frames).where == f"{SITE}/ddpdoctor_trainer/faults.py:42"
    tb = (f'  File "{SITE}/ddpdoctor_trainer/train.py", line 197, in main\n'
          f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 3252, in all_reduce\n')
    assert traceback_frame(tb) == f"{SITE}/ddpdoctor_trainer/train.py:197"


@pytest.mark.parametrize("argv,entry", [
    (["python", "-u", "train.py", "--lr", "3"], ("train.py", None)),
    (["python", "-m", "mypkg.train", "--x"], (None, "mypkg.train")),
    (["python", "-X", "faulthandler", "-m", "ddpdoctor.launch.bootstrap", "-m", "mypkg.train"], (None, "mypkg.train")),
    (["python", "-m", "ddpdoctor.launch.bootstrap", f"{SITE}/mypkg/train.py"], (f"{SITE}/mypkg/train.py", None)),
    (["python", "-c", "import x"], (None, None)),
])
def test_the_entry_a_rank_s_command_line_runs(argv, entry):
    assert user_code.entry_of(argv) == entry


def test_a_script_installed_in_site_packages_declares_its_package():
    user_code.declare(script=f"{SITE}/mypkg/train.py")
    assert not is_library(f"{SITE}/mypkg/model.py")


def test_postmortem_reads_the_entry_point_from_torchrun_s_table():
    from ddpdoctor.forensics.postmortem.analysis import entry_point

    assert entry_point("====\nmypkg.train FAILED\n----") == (None, "mypkg.train")
    assert entry_point("====\ncrash.py FAILED\n----") == ("crash.py", None)
    assert entry_point("nothing") == (None, None)
