"""A real SLURM cluster on this machine for tests: slurmctld, munged and three slurmd, each slurmd in a network
namespace of its own, so `srun`/`sbatch` run exactly as a user types them.

The shape and its pitfalls are measured in shared/knowledge/slurm-on-one-machine.md: a bridge in the root
namespace (198.18.0.254/24: the controller and the srun client), one namespace per node (198.18.0.N, N=1..3)
wired to it by a veth pair; a UTS + mount namespace per daemon so `hostname` is nodeN and a private hosts file
is bind-mounted over /etc/hosts (entered with `nsenter --net` + `unshare --uts --mount`, never
`ip netns exec`, which remounts /sys and breaks slurmd's cgroup plugin). The filesystem stays shared: the venv
and a run directory are visible on every node.

Every daemon runs in the foreground as a child of the test (no pid file to trust for the kill), and ``down``
kills every process inside each node's namespace (slurmstepd and the job's tasks included), then the
controller and munged, deletes the namespaces and the bridge and removes the temp dir: nothing is left
behind, even when a test fails (``leftovers`` says what would be).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

SUBNET = "198.18.0"
CTL_ADDR = f"{SUBNET}.254"
CTL_PORT = 6817  # the defaults; a second cluster (another subnet and port) may run beside one on them
NNODES = 3
TOOLS = ("slurmctld", "slurmd", "munged", "mungekey", "srun", "sbatch", "sinfo", "ip", "nsenter", "unshare",
         "iptables")


def unavailable() -> str | None:
    """Why a SLURM cluster cannot be built here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, daemons)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"needs slurm-wlm, munge, iproute2 and iptables: missing {', '.join(missing)}"
    return None


def _sh(*argv: str, check: bool = True, timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=timeout, env=env)


def listening(port: int) -> list[str]:
    """Who listens on this TCP port in the root namespace (a connect could be answered by a proxy upstream)."""
    import psutil

    return [f"{c.laddr.ip}:{c.laddr.port} (pid {c.pid})" for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


SLURM_CONF = """\
ClusterName=ddpd
SlurmctldHost=ctl({ctl})
CommunicationParameters=NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
SlurmctldPort={port}
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={tmp}/munge/munge.socket{auth_extra}
CredType=cred/munge
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool/%n
SlurmctldPidFile={tmp}/run/slurmctld.pid
SlurmdPidFile={tmp}/run/slurmd-%n.pid
SlurmctldLogFile={tmp}/log/slurmctld.log
SlurmdLogFile={tmp}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
# SIGTERM to SIGKILL: 15 s (SLURM's default is 30): at 5 s a loaded CI's rank had not written its flight record
# on the time limit's SIGTERM before the SIGKILL (tests/integration/test_slurm.py, the time-limit test)
KillWait=15
MinJobAge=2
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
{extra}"""
NODES = "NodeName=node[1-{n}] NodeAddr={subnet}.[1-{n}] CPUs=1 State=UNKNOWN"


class SlurmCluster:
    """``with SlurmCluster() as c: c.run(["srun", ...])``; ``c.down()`` is idempotent.

    ``subnet`` and ``port`` place a second cluster beside one on the defaults (test modules that run at the same
    time); ``extra_conf`` adds slurm.conf lines (Prolog=, HealthCheckProgram=...), ``nodes_conf`` replaces
    the NodeName line (``{n}``, ``{subnet}`` filled in), e.g. to give nodes weights, ``auth_extra`` adds to
    AuthInfo (",cred_expire=10"), and ``node_etc`` puts files in every node's /etc ({"ddpdoctor/ddpdoctor.toml":
    text}, where "{slurm_conf}" reads as this cluster's slurm.conf: an overlay on /etc in the node's own mount
    namespace, as a site installs the file on each node; the machine's /etc is untouched)."""

    def __init__(self, nnodes: int = NNODES, *, subnet: str = SUBNET, port: int = CTL_PORT, extra_conf: str = "",
                 nodes_conf: str = NODES, auth_extra: str = "", node_etc: dict[str, str] | None = None):
        self.nnodes = nnodes
        self.subnet, self.port = subnet, port
        self.ctl_addr = f"{subnet}.254"
        self.extra_conf, self.nodes_conf, self.auth_extra = extra_conf, nodes_conf, auth_extra
        self.node_etc = dict(node_etc or {})
        self.tag = uuid.uuid4().hex[:5]
        self.bridge = f"ddpdsl{self.tag}"
        self.namespaces = [f"ddpd-sl-{self.tag}-{i}" for i in range(1, nnodes + 1)]
        self.tmp: Path | None = None
        self.procs: list[subprocess.Popen] = []
        self._made_bridge = False
        self._made_ns: list[str] = []
        self.slurmd: dict[int, subprocess.Popen] = {}  # node i -> its slurmd (nsenter, unshare and sh exec it)

    # ------------------------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "slurm.conf"

    def env(self, **extra: str) -> dict:
        """The environment a user's shell has on the login node (here: the root namespace)."""
        return dict(os.environ, SLURM_CONF=str(self.conf), PYTHONUNBUFFERED="1", **extra)

    def node_addr(self, i: int) -> str:
        return f"{self.subnet}.{i}"

    def up(self) -> "SlurmCluster":
        why = unavailable()
        if why:
            raise RuntimeError(why)
        # A stale controller on the port would silently answer for this cluster (the recipe's pitfall).
        taken = listening(self.port)
        if taken:
            raise RuntimeError(f"port {self.port} is taken by {', '.join(taken)} (a slurmctld left running?): "
                               "refusing to start")
        if _sh("ip", "-o", "addr", "show", check=False).stdout.find(f" {self.ctl_addr}/") >= 0:
            raise RuntimeError(f"{self.ctl_addr} is already on an interface here (a cluster left behind?)")
        try:
            self._files()
            self._network()
            self._daemons()
        except BaseException:
            self.down()
            raise
        return self

    def __enter__(self) -> "SlurmCluster":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    def _files(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-slurm-"))
        # munged refuses a socket directory that others cannot traverse, and slurmstepd reads the conf
        os.chmod(self.tmp, 0o755)
        for d in ("munge", "state", "run", "log", "spool", *(f"spool/node{i}" for i in range(1, self.nnodes + 1))):
            (self.tmp / d).mkdir(mode=0o755, parents=True)
        nodes = self.nodes_conf.format(n=self.nnodes, subnet=self.subnet)
        self.conf.write_text(SLURM_CONF.format(ctl=self.ctl_addr, port=self.port, tmp=self.tmp, n=self.nnodes,
                                               subnet=self.subnet, nodes=nodes, extra=self.extra_conf,
                                               auth_extra=self.auth_extra))
        for i in range(1, self.nnodes + 1) if self.node_etc else ():
            for rel, text in self.node_etc.items():
                target = self.tmp / "etc" / f"node{i}" / "upper" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text.replace("{slurm_conf}", str(self.conf)))
            (self.tmp / "etc" / f"node{i}" / "work").mkdir()
        hosts = ["127.0.0.1 localhost", f"{self.ctl_addr} ctl"]
        hosts += [f"{self.node_addr(i)} node{i}" for i in range(1, self.nnodes + 1)]
        (self.tmp / "hosts").write_text("\n".join(hosts) + "\n")
        key = self.tmp / "munge" / "munge.key"
        _sh("mungekey", "--create", f"--keyfile={key}")
        os.chmod(key, 0o600)

    def _network(self) -> None:
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._made_bridge = True
        _sh("ip", "addr", "add", f"{self.ctl_addr}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces, start=1):
            _sh("ip", "netns", "add", ns)
            self._made_ns.append(ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"v{self.tag}{i}")
            _sh("ip", "-n", ns, "link", "set", f"v{self.tag}{i}", "netns", "1")
            _sh("ip", "link", "set", f"v{self.tag}{i}", "master", self.bridge, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.node_addr(i)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        assert self.tmp is not None
        out = open(self.tmp / "log" / log, "ab")
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=self.env())
        finally:
            out.close()
        self.procs.append(proc)
        return proc

    def _in_namespaces(self, hostname: str, command: str, netns: str | None) -> list[str]:
        """A command in its own UTS + mount namespace (hostname, private /etc/hosts), in ``netns`` if given."""
        assert self.tmp is not None
        etc = self.tmp / "etc" / hostname
        overlay = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={etc}/upper,workdir={etc}/work /etc && "
                   if etc.is_dir() else "")
        script = f"hostname {hostname} && {overlay}mount --bind {self.tmp}/hosts /etc/hosts && exec {command}"
        argv = ["unshare", "--uts", "--mount", "sh", "-c", script]
        return (["nsenter", f"--net=/run/netns/{netns}"] if netns else []) + argv

    def _daemons(self) -> None:
        t = self.tmp
        self._spawn(["munged", "-F", "--force", f"--key-file={t}/munge/munge.key",
                     f"--socket={t}/munge/munge.socket", f"--pid-file={t}/munge/munged.pid",
                     f"--log-file={t}/log/munged.log", f"--seed-file={t}/munge/munged.seed"], "munged.out")
        self._wait(lambda: (t / "munge" / "munge.socket").exists(), 10, "munged's socket")
        self._spawn(self._in_namespaces("ctl", f"slurmctld -D -i -f {self.conf}", None), "slurmctld.out")
        self._wait(lambda: bool(listening(self.port)), 20, f"slurmctld on {self.ctl_addr}:{self.port}")
        for i, ns in enumerate(self.namespaces, start=1):
            self.slurmd[i] = self._spawn(self._in_namespaces(f"node{i}", f"slurmd -D -f {self.conf} -N node{i}", ns),
                                         f"slurmd-node{i}.out")
        self._wait(self.all_idle, 40, "every node idle in sinfo")

    def all_idle(self) -> bool:
        out = _sh("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10, env=self.env())
        states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
        return len(states) == self.nnodes and all(s == "idle" for s in states.values())

    def _wait(self, ready, limit: float, what: str) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a SLURM daemon exited ({dead[0].args[-1]!r}, code {dead[0].returncode}) "
                                   f"while waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {limit:.0f} s waiting for {what}:\n{self.logs()}")

    def logs(self, limit: int = 3000) -> str:
        if self.tmp is None or not (self.tmp / "log").is_dir():
            return ""
        parts = []
        for f in sorted((self.tmp / "log").iterdir()):
            text = f.read_text(errors="replace")
            parts.append(f"--- {f.name}\n{text[-limit:]}")
        return "\n".join(parts)

    # ------------------------------------------------------------------------------------------------
    def run(self, argv: list[str], timeout: float, env: dict | None = None, cwd: str | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        """A client command (srun, sbatch, ...) as typed on the login node; a timeout kills its whole session."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                env=env or self.env(), start_new_session=True)
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{' '.join(argv[:4])}... timed out after {timeout} s:\n{err[-3000:]}") from None
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def in_node(self, i: int, *argv: str) -> subprocess.CompletedProcess:
        """A command in node i's network namespace (e.g. its firewall)."""
        return _sh("nsenter", f"--net=/run/netns/{self.namespaces[i - 1]}", *argv)

    def in_node_mounts(self, i: int, *argv: str) -> subprocess.CompletedProcess:
        """A command in node i's mount namespace, the one its slurmd (and so its prolog, its health check and its
        jobs) sees: ``in_node_mounts(3, "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", "/dev/shm")``."""
        return _sh("nsenter", "-t", str(self.slurmd[i].pid), "-m", *argv)

    def rsh_agent(self) -> Path:
        """An rsh agent for Open MPI's mpiexec (``--mca plm_rsh_agent``): ``agent HOST COMMAND...`` runs the
        command (orted) on HOST, that is inside nodeN's namespaces, as ssh would on a real cluster."""
        assert self.tmp is not None
        agent = self.tmp / "rsh-agent.sh"
        cases = "\n".join(f"  node{i}) ns={ns} ;;" for i, ns in enumerate(self.namespaces, start=1))
        agent.write_text(f"""#!/bin/sh
host=$1; shift
case $host in
{cases}
  *) echo "rsh-agent: unknown host $host" >&2; exit 1 ;;
esac
exec nsenter --net=/run/netns/$ns unshare --uts --mount sh -c \\
  "hostname $host && mount --bind {self.tmp}/hosts /etc/hosts && exec sh -c \\"\\$0\\"" "$*"
""")
        agent.chmod(0o755)
        return agent

    def wait_idle(self, limit: float = 30) -> None:
        """Back-to-back jobs: the previous job's nodes may still be completing."""
        self._wait(self.all_idle, limit, "the nodes to be idle again")

    # ------------------------------------------------------------------------------------------------
    def down(self) -> None:
        # slurmd first (with every process in its namespace: slurmstepd, the job's tasks), then the rest
        for ns in self._made_ns:
            self._kill_namespace(ns)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        self.procs.clear()
        for ns in self._made_ns:
            self._kill_namespace(ns)  # anything a dying slurmd forked meanwhile
            _sh("ip", "netns", "del", ns, check=False)
        self._made_ns.clear()
        if self._made_bridge:
            _sh("ip", "link", "del", self.bridge, check=False)
            self._made_bridge = False
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _kill_namespace(self, ns: str) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [int(p) for p in _sh("ip", "netns", "pids", ns, check=False).stdout.split() if p.isdigit()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 5
            while time.monotonic() < end and any(_alive(p) for p in pids):
                time.sleep(0.1)

    def leftovers(self) -> list[str]:
        """What this cluster left on the machine: processes, namespaces, interfaces, mounts, files."""
        found = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if (self.tmp is not None and str(self.tmp) in cmd) or self.tag in cmd:
                found.append(f"process {pid}: {cmd[:200]}")
        netns = _sh("ip", "netns", "list", check=False).stdout
        found += [f"namespace {ns}" for ns in self.namespaces if ns in netns]
        if _sh("ip", "link", "show", self.bridge, check=False).returncode == 0:
            found.append(f"bridge {self.bridge}")
        if self.tmp is not None and str(self.tmp) in Path("/proc/self/mountinfo").read_text():
            found.append(f"a mount under {self.tmp}")
        if self.tmp is not None and self.tmp.exists():
            found.append(f"directory {self.tmp}")
        found += [f"a listener on {where}" for where in listening(self.port)]
        return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def running(cluster: "SlurmCluster", results: Path | None = None):
    """A module's cluster: up, yielded (``results``: the node check's results_dir, kept on it), then down with
    nothing left behind, whatever the tests did."""
    cluster.results = results
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()
        assert cluster.leftovers() == []
