"""--hosts: the host list a user's ssh loop or pdsh uses; this node's rank is its place in the list."""
from __future__ import annotations

from typing import Mapping

from .base import Context, Launcher, LauncherInfo


def present(env: Mapping[str, str]) -> bool:
    return False  # chosen by the --hosts flag, never by the environment


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    return LauncherInfo("hosts")


def from_hosts(hosts: list[str], hostname: str, master: str | None) -> LauncherInfo:
    from .base import rank_in_hosts

    return LauncherInfo("hosts", rank_in_hosts(hosts, hostname), len(hosts), master or hosts[0], hosts=hosts)


def fix(command: str) -> str:
    return f"start it on each missing host, e.g. `ssh HOST {command}`"


LAUNCHER = Launcher("hosts", present, read, fix, host_list="--hosts")
