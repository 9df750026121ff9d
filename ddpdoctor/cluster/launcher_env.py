"""The cluster engine's view of the launcher table (ddpdoctor/launchers/): node rank, node count, master
endpoint, the job's host list and each launcher's fix for a node that never came, as the launchers give them.

The launchers themselves are data, one module each under ddpdoctor/launchers/; this module only names what the
cluster protocol uses from them, so cluster/ code and its tests keep one import.
"""
from __future__ import annotations

from ..launchers import (MAX_LIST_CHARS, MAX_NODE_FILE_BYTES, LauncherInfo, expand_slurm_nodelist, from_env,
                         from_hosts, hosts_of_node_file, missing_hosts, nnodes_from_world, rank_in_hosts,
                         start_everywhere_fix)
from ..launchers import read_node_file as _read_node_file

__all__ = ["MAX_LIST_CHARS", "MAX_NODE_FILE_BYTES", "LauncherInfo", "detect", "expand_slurm_nodelist", "from_env",
           "from_hosts", "host_list_name", "hosts_of_node_file", "missing_hosts", "nnodes_from_world",
           "rank_in_hosts", "read_node_file", "start_everywhere_fix"]


def host_list_name(source: str | None) -> str:
    """Where the launcher lists the job's hosts (SLURM_JOB_NODELIST, PBS_NODEFILE, --hosts), else "the job"."""
    from ..launchers import by_name

    launcher = by_name(source)
    return (launcher.host_list if launcher is not None else None) or "the job"


def read_node_file(path: str) -> str:
    """A host file, at most MAX_NODE_FILE_BYTES (this module's, so a test can lower it) read."""
    return _read_node_file(path, MAX_NODE_FILE_BYTES)


def detect(env=None, *, hosts: list[str] | None = None, master: str | None = None,
           hostname: str | None = None) -> LauncherInfo:
    """This node's launcher (launchers.detect), read through this module's from_env."""
    from ..launchers import detect as detect_launcher

    return detect_launcher(env, hosts=hosts, master=master, hostname=hostname,
                           reader=lambda *a, **k: from_env(*a, **k))
