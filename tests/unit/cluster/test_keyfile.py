"""The run's own key file (ddpdoctor/cluster/keyfile.py): private, fresh, never a link or another's file."""
from __future__ import annotations

import os
import stat
import time

import pytest

from ddpdoctor.cluster import keyfile
from ddpdoctor.cluster.envelope import key_id


@pytest.mark.timeout(30)
def test_the_master_writes_a_random_private_key_and_removes_it(tmp_path):
    home = tmp_path / "home" / ".ddpdoctor" / "keys"
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "home").mkdir()
    scope = keyfile.scope("10.0.0.1:29500", "job", 2)
    paths = keyfile.candidates(scope, str(shared), home=home)
    assert paths == [shared / f".ddpdoctor-key-{scope}", home / scope]
    made = keyfile.create(paths)
    assert made.paths == paths and not made.errors
    for p in paths:
        st = os.lstat(p)
        assert stat.S_IMODE(st.st_mode) == 0o600 and p.read_text() == made.key
    assert stat.S_IMODE(os.lstat(home).st_mode) == 0o700
    assert len(made.key) == 64 and keyfile.read(paths[0]) == made.key
    # never derived from the public scope: another run of the same scope gets another key
    again = keyfile.create(paths)
    assert again.key != made.key and keyfile.read(paths[1]) == again.key
    again.remove()
    assert not any(p.exists() for p in paths)


def test_the_scope_is_the_same_on_every_node_and_differs_per_run():
    assert keyfile.scope("h:1", "a", 2) == keyfile.scope("h:1", "a", 2)
    assert len({keyfile.scope("h:1", "a", 2), keyfile.scope("h:2", "a", 2), keyfile.scope("h:1", "b", 2),
                keyfile.scope("h:1", "a", 3)}) == 4


@pytest.mark.timeout(30)
def test_a_link_a_readable_file_or_junk_is_never_used(tmp_path):
    good = tmp_path / "good"
    made = keyfile.create([good])
    link = tmp_path / "link"
    link.symlink_to(good)
    assert keyfile.read(link) is None  # O_NOFOLLOW
    loose = tmp_path / "loose"
    loose.write_text(made.key)
    os.chmod(loose, 0o644)
    assert keyfile.read(loose) is None  # readable by others: not a secret any more
    junk = tmp_path / "junk"
    fd = os.open(junk, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"z" * 64)
    os.close(fd)
    assert keyfile.read(junk) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert keyfile.read(fifo) is None  # not a regular file: never blocks
    # a link planted where the master writes is replaced, not followed
    target = tmp_path / "victim"
    target.write_text("keep")
    planted = tmp_path / "planted"
    planted.symlink_to(target)
    made2 = keyfile.create([planted])
    assert target.read_text() == "keep" and keyfile.read(planted) == made2.key


@pytest.mark.timeout(30)
def test_a_stale_key_of_an_earlier_run_does_not_match_this_runs_hello(tmp_path):
    path = tmp_path / "k"
    stale = keyfile.create([path]).key
    fresh_nonce = "ab" * 16
    fresh = keyfile.create([path]).key
    wanted = key_id(fresh, fresh_nonce)
    assert key_id(stale, fresh_nonce) != wanted
    start = time.monotonic()
    key, found = keyfile.find([path], lambda k: key_id(k, fresh_nonce) == wanted, time.monotonic() + 1)
    assert key == fresh and found == path
    key, found = keyfile.find([tmp_path / "absent"], lambda k: True, time.monotonic() + 0.5)
    assert key is None and time.monotonic() - start < 15  # not found: bounded (1.5 s), no hang


@pytest.mark.timeout(30)
def test_a_key_left_by_a_killed_master_is_swept_a_day_later(tmp_path):
    keys = tmp_path / ".ddpdoctor" / "keys"
    keyfile.create([keys / "old"])
    keyfile.create([keys / "recent"])
    day_ago = time.time() - keyfile.STALE_S - 60
    os.utime(keys / "old", (day_ago, day_ago))
    keyfile.create([keys / "new"])
    assert sorted(p.name for p in keys.iterdir()) == ["new", "recent"]


@pytest.mark.timeout(30)
def test_why_a_key_file_is_unusable_in_a_users_words_and_when_waiting_helps(tmp_path):
    """A keyless node refused by a keyed master says why it had no key (issue 38), and waits for the file only
    where it may yet appear (absent: a network filesystem's lag), not where it can never read it."""
    made = keyfile.create([tmp_path / "k"])
    assert "another run" in keyfile.unusable(tmp_path / "k")  # ours, valid: only the hello can tell whose
    os.chmod(tmp_path / "k", 0o644)
    assert "readable by others (mode 0644" in keyfile.unusable(tmp_path / "k")
    assert "no such file" in keyfile.unusable(tmp_path / "absent")
    os.symlink(tmp_path / "k", tmp_path / "link")
    assert "symbolic link" in keyfile.unusable(tmp_path / "link")
    assert keyfile.may_appear([tmp_path / "k", tmp_path / "absent"]) and not keyfile.may_appear([tmp_path / "k"])
    if os.geteuid() == 0:
        os.chown(tmp_path / "k", 65534, 65534)
        assert "owned by uid 65534, and this node runs as uid 0" in keyfile.unusable(tmp_path / "k")
    made.remove()
