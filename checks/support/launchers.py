"""Launcher variables: what each launcher sets differently on every node (or every process) by nature, taken
from the launcher's own documentation, so a node's identity is never reported as configuration drift.

The names live with each launcher in ddpdoctor's launcher table (ddpdoctor/launchers/, one module per launcher,
reached through ``ddpdoctor.api.launcher_variables``): one family per launcher, its per-node variable names and
whole documented families (a per-server URI, a per-node list). Everything a launcher sets the same on every node
(job id, node count, node list, master address...) is NOT there: a difference there means the nodes are not in
the same job, which is worth saying. Variables a person sets (NCCL_*, OMP_NUM_THREADS, OMPI_MCA_btl_*...) must
agree and are never listed. ``per_node(name)`` says which launcher owns a name; ``env-vars`` leaves those out of
its comparables.
"""
from __future__ import annotations

from ddpdoctor.api import launcher_variables

LAUNCHERS = launcher_variables()  # each: name, source, names, prefixes, owns(var)


def per_node(var: str) -> str | None:
    """The launcher that sets ``var`` per node or per process (None: the variable must agree across nodes)."""
    for launcher in LAUNCHERS:
        if launcher.owns(var):
            return launcher.name
    return None
