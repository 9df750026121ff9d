"""One py-spy runner (issue 44): the watchdog's stacks of a rank that has no faulthandler hook come through
pyspy.dump like attach's, in faulthandler's layout so the one stack reader takes them (py-spy's own layout was
passed on raw, and no frame of it was ever read)."""
from __future__ import annotations

from ddpdoctor.forensics.evidence import pyspy, stacks

DUMP = '''Process 123: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 0x7F01 (idle): "Thread-1"
    wait (/usr/lib/python3.11/threading.py:320)
Thread 0x7F00 (idle): "MainThread"
    own_compute (/job/train.py:22)
        Arguments:
            seconds: 3600
    <module> (/job/train.py:70)
'''


def test_a_py_spy_dump_reads_as_the_main_thread_s_frames():
    text = pyspy.as_faulthandler_text(pyspy.parse(DUMP, 123))
    assert text.startswith("Current thread 0x7F00")
    frames = stacks.main_thread(text)
    assert [(f.file, f.line, f.function) for f in frames] == [("/job/train.py", 22, "own_compute"),
                                                               ("/job/train.py", 70, "<module>")]


def test_a_failed_dump_gives_no_text():
    assert pyspy.as_faulthandler_text(pyspy.Dump(1, failure=pyspy.DumpFailure.TIMEOUT)) == ""
