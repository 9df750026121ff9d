"""Round 7 of the hostile local user (issue 55): POSIX ACLs, links a service user plants on the way to a folder
root writes, folders on the way to the results and to the site config. Run as root with the real `nobody`
(tests/as_nobody.py) and setfacl (apt package acl); each test fails on the code before the round."""
from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from ddpdoctor import trust
from ddpdoctor.errors import UsageError
from ddpdoctor.report import prometheus
from ddpdoctor.unattended import site
from tests.as_nobody import NOBODY, why_not
from tests.unit.helpers import run_cli

NOBODY_UID = 65534
PRE = {"kind": "preflight", "verdict": "pass", "created": "2026-11-28T10:00:00+00:00", "nodes": {"h": {}},
       "results": [{"check": "resources", "level": "pass", "summary": "ok", "nodes": ["h"]}]}


def _need_nobody():
    why = why_not()
    if why:
        pytest.skip(why)


def _need_acl():
    _need_nobody()
    if not shutil.which("setfacl"):
        pytest.skip("no setfacl (apt package acl)")


def _setfacl(spec: str, path: Path) -> None:
    subprocess.run(["setfacl", "-m", spec, str(path)], check=True, timeout=30)


def _nobody_sh(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, "/bin/sh", "-c", script], cwd="/", timeout=30, capture_output=True, text=True)


@pytest.fixture
def shared_dir():
    """A root-owned 0755 directory nobody can reach (pytest's tmp_path is 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="ddpd-r7-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# --- 2. POSIX ACLs -----------------------------------------------------------------------------------------------

def _acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


OWNER, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF


def test_2_the_acl_format_is_read_as_the_kernel_writes_it():
    base = [(OWNER, 7, NO_ID), (GROUP_OBJ, 5, NO_ID), (OTHER, 5, NO_ID)]
    assert trust.acl_writers(_acl(*base)) == []
    assert trust.acl_writers(_acl(*base[:2], (USER, 7, 65534), (MASK, 7, NO_ID), base[2])) == \
        [f"user {trust._who(65534)}"]
    assert trust.acl_writers(_acl(*base[:2], (GROUP, 6, 1234), (MASK, 7, NO_ID), base[2])) == ["group 1234"]
    # the mask bounds every named entry: write granted and masked is no write
    assert trust.acl_writers(_acl(*base[:2], (USER, 7, 65534), (MASK, 5, NO_ID), base[2])) == []
    assert trust.acl_writers(_acl(*base[:2], (USER, 7, 0), (GROUP, 7, 0), (MASK, 7, NO_ID), base[2])) == []
    assert trust.acl_writers(b"\x01\x00") == ["an ACL ddpdoctor cannot read"]
    assert trust.acl_writers(struct.pack("<I", 3)) == ["an ACL ddpdoctor cannot read"]


def _marker_scontrol(path: Path, marker: Path) -> None:
    path.write_text(f"#!/bin/sh\nid -u > {marker}\necho 'NodeName=n1 State=IDLE Reason=(null)'\n")
    path.chmod(0o755)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["scontrol", "its-folder"])
def test_2_an_acl_that_lets_nobody_write_scontrol_is_refused(shared_dir, where):
    """A root 0755 scontrol (or its folder) with `user:nobody:rwx`: nobody rewrites it, root never runs it."""
    _need_acl()
    marker, folder = shared_dir / "ran-as", shared_dir / "bin"
    folder.mkdir(mode=0o755)
    script = folder / "scontrol"
    _marker_scontrol(script, marker)
    _setfacl("u:nobody:rwx", script if where == "scontrol" else folder)
    if where == "scontrol":
        done = _nobody_sh(f"printf '#!/bin/sh\\nid -u > {marker}\\n' > {script}")
    else:
        done = _nobody_sh(f"mv {script} {folder}/old && printf '#!/bin/sh\\nid -u > {marker}\\n' > {script} && "
                          f"chmod 755 {script}")
    assert done.returncode == 0, f"the ACL did not let nobody write: {done.stderr}"
    cfg = shared_dir / "ddpdoctor.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{shared_dir / "results"}"\nscontrol = "{script}"\n'
                   'only = ["env-vars"]\n')
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1",
                                   "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "7"})
    assert not marker.exists(), f"root ran what nobody wrote (as uid {marker.read_text().strip()})"
    assert p.returncode == 2 and "through its ACL" in p.stderr and "nobody" in p.stderr, p.stdout + p.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("spec", ["u:nobody:rw-", "g:nogroup:rw-"])
def test_2_a_site_config_an_acl_lets_nobody_write_is_refused(shared_dir, spec):
    """A root 0644 config with an ACL entry for nobody (or nobody's group): nobody's drain_on and only would
    drain every node; the config is refused before anything runs."""
    _need_acl()
    cfg = shared_dir / "ddpdoctor.toml"
    cfg.write_text("[node-check]\n")
    cfg.chmod(0o644)
    _setfacl(spec, cfg)
    done = _nobody_sh(f"printf '[node-check]\\ndrain_on = \"warn\"\\n' > {cfg}")
    assert done.returncode == 0, done.stderr
    with pytest.raises(UsageError, match="through its ACL"):
        site.load(str(cfg))


@pytest.mark.timeout(60)
def test_2_an_acl_that_grants_only_reading_or_is_masked_is_accepted(shared_dir):
    _need_acl()
    cfg = shared_dir / "ddpdoctor.toml"
    cfg.write_text('[node-check]\ndrain_on = "never"\n')
    _setfacl("u:nobody:r--", cfg)
    assert site.load(str(cfg)).drain_on == "never"
    _setfacl("u:nobody:rw-,m::r--", cfg)  # the mask takes the write away
    assert site.load(str(cfg)).drain_on == "never"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_2_an_acl_on_the_results_dir_keeps_no_record_there(shared_dir):
    _need_acl()
    results = shared_dir / "results"
    results.mkdir(mode=0o755)
    _setfacl("u:nobody:rwx", results)
    cfg = shared_dir / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{results}"\nonly = ["env-vars"]\n')
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "record not kept" in p.stderr and "through its ACL" in p.stderr, p.stderr
    assert list(results.iterdir()) == []


# --- 5. the site config under a folder a user owns ---------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(120)
def test_5_a_config_under_a_folder_nobody_owns_is_never_the_users(shared_dir):
    """/x/users (nobody's)/conf (root's)/ddpdoctor.toml (root's): nobody swaps conf for a link to a folder of
    their own while root loads it, 300 times. Before: each load checked the path, then opened it again (69 of
    3,000 loads were nobody's config); now every load is refused for the folder on the way."""
    _need_nobody()
    users = shared_dir / "users"
    users.mkdir()
    os.chown(users, NOBODY_UID, NOBODY_UID)
    done = _nobody_sh(f"mkdir {users}/mine && printf '[node-check]\\ndrain_on = \"warn\"\\n' > {users}/mine/c.toml")
    assert done.returncode == 0, done.stderr
    conf = users / "conf"
    conf.mkdir()
    (conf / "c.toml").write_text('[node-check]\ndrain_on = "never"\n')
    flipper = subprocess.Popen([*NOBODY, "/bin/sh", "-c", f"cd {users}; while :; do mv conf real; ln -s mine conf; "
                                "rm conf; mv real conf; done"], cwd="/", stderr=subprocess.DEVNULL)
    try:
        loaded, refused = [], 0
        for _ in range(300):
            try:
                loaded.append(site.load(str(conf / "c.toml")).drain_on)
            except UsageError as exc:
                refused += 1
                assert any(w in str(exc) for w in ("owned by nobody", "cannot read", "no such file")), exc
        assert "warn" not in loaded, f"{loaded.count('warn')} of 300 loads were nobody's config"
        assert refused == 300
    finally:
        flipper.kill()
        flipper.wait()


def test_5_a_config_read_once_through_a_link_root_owns(tmp_path):
    """A root link to a root file in a root folder: still read (the walk follows links root owns)."""
    real = tmp_path / "etc"
    real.mkdir()
    (real / "c.toml").write_text('[node-check]\ndrain_on = "never"\n')
    (tmp_path / "c.toml").symlink_to(real / "c.toml")
    assert site.load(str(tmp_path / "c.toml")).drain_on == "never"


# --- 4. links on the way to the results ----------------------------------------------------------------------------

def _precious(folder: Path, n: int) -> Path:
    folder.mkdir(mode=0o700, parents=True)
    for i in range(n):
        (folder / f"2020010{i:02d}-x.json").write_text("{}")
    return folder


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_4_a_users_parent_of_results_dir_never_leads_root_to_its_files(shared_dir):
    """results_dir is root's, its parent nobody's: nobody swaps results_dir for a link to a root-only folder.
    Before: root wrote its record there and pruned root's files; now the link is refused, one warning."""
    _need_nobody()
    precious = _precious(shared_dir / "root-only" / "n1", 20)
    users = shared_dir / "users"
    users.mkdir()
    os.chown(users, NOBODY_UID, NOBODY_UID)
    (users / "results").mkdir(mode=0o755)
    done = _nobody_sh(f"mv {users}/results {users}/old && ln -s {precious.parent} {users}/results")
    assert done.returncode == 0, done.stderr
    cfg = shared_dir / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{users / "results"}"\nkeep = 2\nonly = ["env-vars"]\n')
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(x.name for x in precious.iterdir()) == [f"2020010{i:02d}-x.json" for i in range(20)]
    assert "record not kept" in p.stderr and "a link owned by nobody" in p.stderr, p.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_4_a_node_folder_nobody_owns_keeps_no_record_nor_facts(shared_dir):
    """results/n1 chowned to nobody, who makes n1/.kept a link to a root-only folder: before, the kept facts were
    written there and their pruning removed root's files; now neither the facts nor the record are kept."""
    _need_nobody()
    from ddpdoctor.unattended import kept
    from ddpdoctor.unattended import node_check as nc

    precious = _precious(shared_dir / "root-only", 8)
    results = shared_dir / "results"
    (results / "n1").mkdir(parents=True)
    os.chown(results / "n1", NOBODY_UID, NOBODY_UID)
    done = _nobody_sh(f"ln -s {precious} {results}/n1/.kept")
    assert done.returncode == 0, done.stderr
    with pytest.raises(UsageError, match="owned by nobody"):
        kept.save(str(results), "n1", "fp", {"torch-build": {"torch": "2.13"}}, "t")
    with pytest.raises(UsageError, match="owned by nobody"):
        nc.keep({"schema": "ddpdoctor"}, results / "n1" / "20990101-x.json", keep_n=2)
    assert sorted(x.name for x in precious.iterdir()) == [f"2020010{i:02d}-x.json" for i in range(8)]
    assert kept.load(str(results), "n1", "fp")[0] is None


def test_4_a_kept_folder_that_is_roots_own_link_is_not_followed(tmp_path):
    from ddpdoctor.unattended import kept

    precious = _precious(tmp_path / "precious", 8)
    (tmp_path / "results" / "n1").mkdir(parents=True)
    (tmp_path / "results" / "n1" / ".kept").symlink_to(precious)
    with pytest.raises(OSError):
        kept.save(str(tmp_path / "results"), "n1", "fp", {"c": {}}, "t")
    assert len(list(precious.iterdir())) == 8


# --- 3. a service user's link in place of the textfile directory ---------------------------------------------------

@pytest.fixture
def debian_layout(shared_dir):
    """Debian's: /var/lib/prometheus belongs to the service user (here nobody), node-exporter/ in it to root."""
    service = shared_dir / "prometheus"
    service.mkdir()
    os.chown(service, NOBODY_UID, NOBODY_UID)
    (service / "node-exporter").mkdir(mode=0o755)
    return service / "node-exporter"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_3_the_debian_layout_itself_is_written(debian_layout):
    _need_nobody()
    samples = prometheus.samples(PRE, command="preflight", hostname="h")
    prometheus.write(debian_layout, samples, "preflight")
    assert "ddpdoctor_run_status" in (debian_layout / prometheus.FILE).read_text()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("target", ["etc-ddpdoctor", "root-only"])
def test_3_a_link_the_service_user_puts_in_its_place_is_never_followed(shared_dir, debian_layout, target):
    """nobody swaps node-exporter/ for a link to /etc/ddpdoctor (before: root created ddpdoctor.prom and its lock
    there) or to a root-only folder (before: root's 0600 ddpdoctor.prom became a 0644 one)."""
    _need_nobody()
    elsewhere = shared_dir / target
    elsewhere.mkdir(mode=0o755 if target == "etc-ddpdoctor" else 0o700)
    if target == "root-only":
        (elsewhere / prometheus.FILE).write_text("secret 1\n")
        (elsewhere / prometheus.FILE).chmod(0o600)
    done = _nobody_sh(f"cd {debian_layout.parent} && mv node-exporter old && ln -s {elsewhere} node-exporter")
    assert done.returncode == 0, done.stderr
    samples = prometheus.samples(PRE, command="preflight", hostname="h")
    with pytest.raises(UsageError, match="a link owned by nobody"):
        prometheus.write(debian_layout, samples, "preflight")
    p = run_cli("preflight", "--only", "env-vars", "--no-save", "-q", "--prometheus-textfile", str(debian_layout))
    assert p.returncode == 2 and "a link owned by nobody" in p.stderr, p.stdout + p.stderr
    if target == "root-only":
        st = os.stat(elsewhere / prometheus.FILE)
        assert stat.S_IMODE(st.st_mode) == 0o600 and (elsewhere / prometheus.FILE).read_text() == "secret 1\n"
        assert sorted(os.listdir(elsewhere)) == [prometheus.FILE]
    else:
        assert os.listdir(elsewhere) == []
