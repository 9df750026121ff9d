"""fold.py: a rank's traceback relayed with its last frames and its exception line; the frames before are one
line naming the logs; other ranks' lines interleaved pass through; a short traceback and the stream's end stay
whole."""
from __future__ import annotations

from ddpdoctor.launch.fold import Folder


def tb(prefix: str, frames: int, exc: str = "ValueError: bad") -> list[str]:
    lines = [f"{prefix}Traceback (most recent call last):\n"]
    for i in range(frames):
        lines += [f'{prefix}  File "/u/t.py", line {10 + i}, in f{i}\n', f"{prefix}    f{i + 1}()\n"]
    return lines + [f"{prefix}{exc}\n"]


def fed(folder: Folder, lines: list[str]) -> list[str]:
    return [out for line in lines for out in folder.feed(line)] + folder.flush()


def test_a_long_traceback_shows_its_last_frames_and_says_where_the_rest_is():
    out = fed(Folder("results/r/logs/n0"), tb("[rank1]:", 6))
    text = "".join(out)
    assert out[0] == "[rank1]:Traceback (most recent call last):\n" and out[-1] == "[rank1]:ValueError: bad\n"
    assert "4 earlier frame(s) folded" in text and "results/r/logs/n0" in text and "-v" in text
    assert "line 14, in f4" in text and "line 15, in f5" in text and "line 13, in f3" not in text


def test_other_ranks_lines_pass_through_and_short_tracebacks_stay_whole():
    folder = Folder("logs")
    lines = tb("[rank1]:", 5)
    mixed = lines[:3] + ["[rank0]:step 4 loss 2.1\n"] + lines[3:]
    out = fed(folder, mixed)
    assert out[0] == "[rank0]:step 4 loss 2.1\n" and "3 earlier frame(s) folded" in "".join(out)
    assert fed(folder, tb("", 2)) == tb("", 2)  # two frames: nothing to fold
    cut = tb("[rank2]:", 5)[:-1]  # the stream ended inside a traceback: relayed as it was
    assert fed(folder, cut) == cut


def test_torchruns_double_rank_prefix_is_one_stream():
    out = fed(Folder("logs"), tb("[default1]:[rank1]: ", 5))
    assert "[default1]:[rank1]:   ... 3 earlier frame(s) folded" in "".join(out), out
    assert out[-1] == "[default1]:[rank1]: ValueError: bad\n"


def test_the_tracebacks_in_torchruns_failure_table_are_folded_too():
    table = ["  error_file: /r/error.json\n", "  traceback : Traceback (most recent call last):\n"]
    for i in range(5):
        table += [f'    File "/u/t.py", line {i}, in f\n', "      f()\n"]
    table += ["  ValueError: bad\n", "  \n", "====\n"]
    out = fed(Folder("logs"), table)
    assert "    ... 3 earlier frame(s) folded" in "".join(out), out
    assert out[-3:] == ["  ValueError: bad\n", "  \n", "====\n"] and out[0] == table[0]
