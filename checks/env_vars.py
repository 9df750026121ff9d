"""env-vars: the launcher and communication environment (NCCL_*, GLOO_*, TORCH_*, CUDA_*, MASTER_*, RANK...,
FI_*, SLURM_*, PBS_*), redacted, with local sanity: interface names that exist, GLOO's one-name syntax, RANK
without WORLD_SIZE, MASTER_ADDR=localhost for a multi-node job, debug settings left on."""
from __future__ import annotations

import os
from shlex import quote

from ddpdoctor.api import REDACTED, Check, nnodes_from_world, parse_int, passed_if_quiet, per_node, redact_env

from .support.ifnames import gloo_ifname_problem, nccl_ifname_matches
from .support.launchers import per_node as launcher_per_node
from .support.loopback import loopback_scope, sharing_loopback

PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "TORCHELASTIC_", "CUDA_", "FI_", "SLURM_", "PBS_", "OMPI_", "PMI_",
            "UCX_", "MASTER_", "NVIDIA_", "PYTORCH_")
NAMES = ("OMP_NUM_THREADS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "NODE_RANK", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "CONDA_PREFIX", "VIRTUAL_ENV")
# What legitimately differs per node is decided by the launchers' table (support/launchers.py: identities,
# hostnames, per-node device lists, from each launcher's documentation) and, for interface names, by the names
# check (the *_SOCKET_IFNAME suffixes): those are not comparable across nodes; every other variable must agree.
PER_NODE_SUFFIXES = ("_SOCKET_IFNAME",)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "ip6-localhost")
# Settings that make a job slow but still working: fine for a debugging session, wrong for a real run.
SLOW_SETTINGS = {
    "NCCL_P2P_DISABLE": ("1", "GPU peer-to-peer copies are off: intra-node bandwidth drops several-fold"),
    "NCCL_IB_DISABLE": ("1", "InfiniBand/RoCE is off: NCCL falls back to TCP sockets"),
    "NCCL_SHM_DISABLE": ("1", "shared-memory transport is off"),
    "TORCH_DISTRIBUTED_DEBUG": ("DETAIL", "DETAIL checks every collective's shapes: much slower"),
    "CUDA_LAUNCH_BLOCKING": ("1", "every kernel launch is synchronous: much slower"),
}


def wanted(name: str) -> bool:
    return name.startswith(PREFIXES) or name in NAMES


def interface_names() -> list[str]:
    import psutil

    return sorted(psutil.net_if_addrs())


class EnvVarsCheck(Check):
    name = "env-vars"
    facts_shape = {"vars": "object"}
    description = "Launcher/NCCL/GLOO/TORCH/CUDA env vars (secrets redacted): ifnames exist, RANK/WORLD_SIZE, MASTER_ADDR"
    # the launcher's variables of one job (ids, node lists, sizes, the master's address) agree across its nodes
    # but change from job to job: never compared with a --baseline from another run
    per_run_keys = ("SLURM_*", "SLURMD_*", "PBS_*", "OMPI_*", "PMI_*", "PMIX_*", "MASTER_*", "TORCHELASTIC_*",
                    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE")

    def gather(self, ctx) -> dict:
        raw = {k: v for k, v in os.environ.items() if wanted(k)}
        safe = redact_env(raw)
        return {
            "vars": dict(sorted(safe.items())),
            "redacted": sorted(k for k, v in safe.items() if v == REDACTED or REDACTED in v),
            "ifaces": interface_names(),
            "loopback_scope": loopback_scope(),
        }

    def comparable(self, facts: dict) -> dict:
        env = facts.get("vars") or {}
        # torchrun sets OMP_NUM_THREADS=1 itself on a node with --nproc-per-node > 1 (and only there, when unset):
        # nodes starting different process counts legitimately differ in it (torch/distributed/run.py)
        torchrun_default = "TORCHELASTIC_RUN_ID" in env and env.get("OMP_NUM_THREADS") == "1"
        return {k: v for k, v in env.items() if launcher_per_node(k) is None and not k.endswith(PER_NODE_SUFFIXES)
                and not (k == "OMP_NUM_THREADS" and torchrun_default)}

    def compare(self, facts_by_node, opts):
        # every node on one machine and network namespace (torchrun's nodes on 127.x, --local-nodes): they share
        # one loopback, so a loopback MASTER_ADDR reaches the master from each of them
        sharing = sharing_loopback(facts_by_node)
        return per_node(facts_by_node, lambda node, f: judge_env(self, node, f.get("vars") or {},
                                                               f.get("ifaces") or [], opts, sharing))


def expected_nodes(env: dict, opts) -> int:
    """How many nodes this job spans, from the run settings or the launcher's variables."""
    # Not launcher_env.from_env: it counts MPI processes as nodes (one preflight per node), a job does not.
    candidates = [opts.get("nnodes"), nnodes_from_world(env)]
    for var in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES", "PBS_NUM_NODES"):
        candidates.append(env.get(var))
    best = 1
    for c in candidates:
        try:
            best = max(best, int(c))
        except (TypeError, ValueError):
            continue
    return best


def judge_env(check: Check, node: str, env: dict, ifaces: list[str], opts, sharing: int = 1) -> list:
    """One node's variables; ``sharing``: how many of the run's nodes share this node's loopback."""
    out = []
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        spec = env.get(var)
        if not spec or spec == REDACTED:
            continue
        if var == "GLOO_SOCKET_IFNAME":
            problem = gloo_ifname_problem(spec)
            if problem:
                out.append(check.fail(f"{var}={spec!r}: {problem}", [node], actual=spec, expected="one interface name",
                                      fix=f"export {var}=<one of: {', '.join(quote(i) for i in ifaces)}>"))
                continue
            matched = spec in ifaces
        else:
            matched = any(nccl_ifname_matches(spec, i) for i in ifaces)
        if not matched:
            out.append(check.fail(f"{var}={spec!r} matches no interface on this node", [node], actual=spec,
                                  expected=f"one of {', '.join(ifaces)}",
                                  fix=f"export {var}=<the interface that reaches the other nodes: "
                                      f"{', '.join(quote(i) for i in ifaces if i != 'lo') or 'none found'}>"))
    if "RANK" in env and "WORLD_SIZE" not in env:
        out.append(check.fail("RANK is set but WORLD_SIZE is not: init_process_group will fail or wait forever",
                              [node], actual=f"RANK={env['RANK']}", expected="RANK and WORLD_SIZE together",
                              fix="launch with torchrun (it sets both), or export WORLD_SIZE=<total processes>"))
    master = (env.get("MASTER_ADDR") or "").strip()
    nnodes = expected_nodes(env, opts)
    if master and nnodes > sharing and (master.lower() in LOOPBACK_NAMES or master.startswith("127.")):
        out.append(check.fail(f"MASTER_ADDR={master} on a {nnodes}-node job: other nodes would dial themselves",
                              [node], actual=master, expected="the master node's routable address",
                              fix="export MASTER_ADDR=<hostname or IP of node 0 that the other nodes can reach>"))
    port = env.get("MASTER_PORT")
    if port is not None and parse_int(port, lo=1, hi=65535, strip=False) is None:
        out.append(check.fail(f"MASTER_PORT={port!r} is not a TCP port", [node], actual=port, expected="1-65535",
                              fix="export MASTER_PORT=29500"))
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        out.append(check.warn("CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU", [node], actual="",
                              expected="unset or a list of GPUs", fix="unset CUDA_VISIBLE_DEVICES"))
    for var, (value, why) in SLOW_SETTINGS.items():
        if env.get(var, "").upper() == value:
            out.append(check.warn(f"{var}={env[var]}: {why}", [node], actual=env[var], expected="unset",
                                  fix=f"unset {var}  # unless you are debugging on purpose"))
    shown = [k for k in ("MASTER_ADDR", "MASTER_PORT", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if k in env]
    return passed_if_quiet(out, check, [node], f"{len(env)} relevant variable{'' if len(env) == 1 else 's'}, no "
                           "conflicts" + (f" ({', '.join(f'{k}={env[k]}' for k in shown)})" if shown else ""),
                           actual=len(env))
