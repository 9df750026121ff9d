"""fold.py: a relayed traceback is one line, its exception line saying how many frames were folded and where the
whole one is (issue 41 item 3: about 50 lines of torch output came before the verdict; it showed the last two
frames of each); other ranks' lines interleaved pass through; the stream's end stays whole."""
from __future__ import annotations

from ddpdoctor.launch.fold import Folder


def tb(prefix: str, frames: int, exc: str = "ValueError: bad") -> list[str]:
    lines = [f"{prefix}Traceback (most recent call last):\n"]
    for i in range(frames):
        lines += [f'{prefix}  File "/u/t.py", line {10 + i}, in f{i}\n', f"{prefix}    f{i + 1}()\n"]
    return lines + [f"{prefix}{exc}\n"]


def fed(folder: Folder, lines: list[str]) -> list[str]:
    return [out for line in lines for out in folder.feed(line)] + folder.flush()


def test_a_traceback_is_its_exception_line_saying_where_the_whole_one_is():
    out = fed(Folder("results/r/logs/n0"), tb("[rank1]:", 6))
    assert out == ["[rank1]:ValueError: bad  [traceback folded: 6 frames, the whole one in results/r/logs/n0; "
                   "-v shows it]\n"]
    assert fed(Folder("logs"), tb("", 1)) == ["ValueError: bad  [traceback folded: 1 frame, the whole one in logs; "
                                              "-v shows it]\n"]


def test_other_ranks_lines_pass_through_and_a_cut_traceback_stays_whole():
    folder = Folder("logs")
    lines = tb("[rank1]:", 5)
    mixed = lines[:3] + ["[rank0]:step 4 loss 2.1\n"] + lines[3:]
    out = fed(folder, mixed)
    assert out[0] == "[rank0]:step 4 loss 2.1\n" and len(out) == 2 and "5 frames" in out[1]
    cut = tb("[rank2]:", 5)[:-1]  # the stream ended inside a traceback: relayed as it was
    assert fed(folder, cut) == cut


def test_torchruns_double_rank_prefix_is_one_stream():
    out = fed(Folder("logs"), tb("[default1]:[rank1]: ", 5))
    assert out == ["[default1]:[rank1]: ValueError: bad  [traceback folded: 5 frames, the whole one in logs; "
                   "-v shows it]\n"]


def test_the_tracebacks_in_torchruns_failure_table_are_folded_too():
    table = ["  error_file: /r/error.json\n", "  traceback : Traceback (most recent call last):\n"]
    for i in range(5):
        table += [f'    File "/u/t.py", line {i}, in f\n', "      f()\n"]
    table += ["  ValueError: bad\n", "  \n", "====\n"]
    out = fed(Folder("logs"), table)
    assert out == [table[0], "  traceback : ValueError: bad  [traceback folded: 5 frames, the whole one in logs; -v shows it]\n",
                   "  \n", "====\n"], out


def test_a_traceback_under_torchruns_prefix_template_is_folded():
    """torchrun 2.14+ --log-line-prefix-template "${hostname}:${rank}: " (and any template ending in the rank):
    each rank's traceback folds under its own prefix, another rank's line passes through between."""
    f = Folder("logs")
    out = []
    for line in ("node7:3: Traceback (most recent call last):\n", 'node7:3:   File "train.py", line 3, in <module>\n',
                 "node7:3:     step()\n", "node1:0: loss 0.5\n", "node7:3: RuntimeError: boom\n"):
        out += f.feed(line)
    assert out[0] == "node1:0: loss 0.5\n"
    assert out[1].startswith("node7:3: RuntimeError: boom  [traceback folded: 1 frame") and len(out) == 2
    assert f.feed("RuntimeError: no prefix\n") == ["RuntimeError: no prefix\n"]  # an exception line is no prefix


def test_the_template_prefix_before_the_ranks_own_prefix_is_one_stream():
    """What torchrun writes with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='${hostname}:${rank}: ' (a reference-trainer
    crash, read from run-trainer's output): the template, then the rank's "[rank1]:" on every traceback line. torch
    2.15 puts the host name there, 2.13 the word as it is; each traceback was relayed whole (15 lines a rank)."""
    for prefix in ("vm:1: [rank1]: ", "${hostname}:1: [rank1]: ", "node-7.cluster:default:12: [rank12]: "):
        f = Folder("logs")
        out = fed(f, tb(prefix, 4, "InjectedFailure: injected failure at step 5 on rank 1"))
        assert out == [f"{prefix}InjectedFailure: injected failure at step 5 on rank 1  [traceback folded: 4 frames, "
                       "the whole one in logs; -v shows it]\n"], (prefix, out)
    f = Folder("logs")
    mixed = tb("vm:1: [rank1]: ", 3)
    mixed.insert(2, "vm:0: training 0.11M parameters on 2 rank(s)\n")  # another rank's line between
    out = fed(f, mixed)
    assert out[0] == "vm:0: training 0.11M parameters on 2 rank(s)\n" and len(out) == 2 and "3 frames" in out[1]
