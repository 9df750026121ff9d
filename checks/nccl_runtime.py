"""nccl-runtime: the libnccl this process really loads, against the one torch was built with, and the fabric
NCCL should use (issue #7 item 3; failure catalog B4, B5, C1).

gather: after ``import torch`` the libnccl mapped into the process (/proc/self/maps) or, when none is mapped
yet, nvidia/nccl/lib/libnccl.so.2 in site-packages; its ``ncclGetVersion`` through ctypes; and
``torch.cuda.nccl.version()``. Also the InfiniBand/RoCE and EFA devices in /sys/class/infiniband, whether
/dev/infiniband exists (containers often lack it) and NCCL net plugins (libnccl-net*.so) on the library path.
compare: loaded != built on a node warns (LD_LIBRARY_PATH/LD_PRELOAD picked another NCCL); a loaded version
that differs across nodes fails (mixed NCCL versions hang or corrupt); EFA without a net plugin warns; and,
when the collective check ran NCCL with NCCL_DEBUG=INFO, sockets chosen while IB/EFA exist warns
(support/nccl_log.py). A CPU build of torch is a Skip.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from shlex import quote
from typing import Any

from ddpdoctor.api import Check, Option, Skip, import_error_words, odd_ones, passed_if_quiet, per_node

from .support.nccl_log import judge_transport

SYS_IB = "/sys/class/infiniband"
PLUGIN_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib",
               "/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64")
ENV_KEYS = ("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA", "NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "LD_PRELOAD")


def decode_nccl_version(code: int) -> str:
    """ncclGetVersion's integer: 22809 -> "2.28.9" (NCCL >= 2.9: major*10000 + minor*100 + patch; before: *1000)."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def torch_nccl_version(v: Any) -> str | None:
    """torch.cuda.nccl.version(): a tuple (2, 21, 5) in torch 2.x, an int (2708 / 21805) in older ones."""
    if v is None:
        return None
    if isinstance(v, (tuple, list)):
        return ".".join(str(x) for x in v[:3])
    if isinstance(v, int):
        return decode_nccl_version(v)
    return str(v)


def nccl_wheel(facts: dict) -> str:
    """The NCCL wheel for the node's torch: its CUDA major names it (torch 2.15 is built for CUDA 13:
    nvidia-nccl-cu13; cu12 builds: nvidia-nccl-cu12); cu12 where the CUDA version is unknown."""
    major = str(facts.get("torch_cuda") or "").split(".")[0]
    return f"nvidia-nccl-cu{major}" if major.isdigit() and int(major) >= 11 else "nvidia-nccl-cu12"


def mapped_libnccl(maps_path: str = "/proc/self/maps") -> str | None:
    """The libnccl.so mapped into this process, if any."""
    try:
        with open(maps_path) as fh:
            for line in fh:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if os.path.basename(path).startswith("libnccl.so"):
                    return path
    except OSError:
        pass
    return None


def site_libnccl() -> str | None:
    """nvidia/nccl/lib/libnccl.so.2 of the nvidia-nccl-cu* wheel torch depends on."""
    for base in sys.path:
        p = os.path.join(base or ".", "nvidia", "nccl", "lib", "libnccl.so.2")
        if os.path.isfile(p):
            return p
    return None


def nccl_get_version(path: str) -> tuple[str | None, str | None]:
    """(version, error) from ncclGetVersion of the library at ``path`` (the loaded one: dlopen returns it)."""
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        rc = lib.ncclGetVersion(ctypes.byref(code))
        if rc != 0:
            return None, f"ncclGetVersion returned {rc}"
        return decode_nccl_version(code.value), None
    except (OSError, AttributeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def rdma_devices(root: str = SYS_IB) -> list[dict]:
    """InfiniBand/RoCE/EFA devices: [{"name", "driver", "efa", "ports": [{"port", "state", "link_layer", "rate"}]}]."""
    out = []
    for dev in sorted(glob.glob(os.path.join(root, "*"))):
        name = os.path.basename(dev)
        driver_link = os.path.join(dev, "device", "driver")
        driver = os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else None
        ports = []
        for port in sorted(glob.glob(os.path.join(dev, "ports", "*"))):
            ports.append({"port": os.path.basename(port), "state": _read(os.path.join(port, "state")),
                          "link_layer": _read(os.path.join(port, "link_layer")), "rate": _read(os.path.join(port, "rate"))})
        out.append({"name": name, "driver": driver, "efa": driver == "efa" or name.startswith("efa"), "ports": ports})
    return out


def net_plugins(extra_dirs=PLUGIN_DIRS) -> list[str]:
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(extra_dirs)
    found = []
    for d in dict.fromkeys(dirs):
        found += sorted(glob.glob(os.path.join(d, "libnccl-net*.so*")))
    plugin = os.environ.get("NCCL_NET_PLUGIN")
    if plugin and os.path.isabs(plugin) and os.path.isfile(plugin):
        found.append(plugin)
    return list(dict.fromkeys(found))


class NcclRuntimeCheck(Check):
    name = "nccl-runtime"
    description = "The libnccl really loaded vs torch's build; InfiniBand/EFA present; NCCL's transport (sockets while IB/EFA exist)"
    phase = "local"
    imports = ("torch",)
    timeout_s = 60.0
    uses = ("collective",)  # the collective smoke test's NCCL transport, when it ran
    options = {
        "require_same_version": Option(True, "a loaded NCCL version that differs across nodes fails"),
    }

    def gather(self, ctx) -> dict:
        try:
            import torch
        except Exception as exc:  # noqa: BLE001
            raise Skip(f"torch cannot be imported: {import_error_words('torch', exc)} (the torch-build check "
                       "judges it)") from None
        if not torch.version.cuda:
            raise Skip(f"torch {torch.__version__} is a CPU build: it has no NCCL")
        facts: dict[str, Any] = {"torch_version": torch.__version__, "torch_nccl_version": None, "torch_error": None,
                                 "torch_cuda": torch.version.cuda}
        try:
            facts["torch_nccl_version"] = torch_nccl_version(torch.cuda.nccl.version())
        except Exception as exc:  # noqa: BLE001 - a build without NCCL
            facts["torch_error"] = f"{type(exc).__name__}: {exc}"
        path = mapped_libnccl()
        facts["loaded"] = path is not None
        path = path or site_libnccl()
        facts["libnccl_path"] = path
        facts["loaded_version"], facts["version_error"] = nccl_get_version(path) if path else (None, None)
        facts.update(self.fabric())
        return facts

    @staticmethod
    def fabric(root: str = SYS_IB) -> dict:
        devs = rdma_devices(root)
        return {"rdma_devices": devs, "ib_devices": [d["name"] for d in devs if not d["efa"]],
                "efa": any(d["efa"] for d in devs), "dev_infiniband": os.path.isdir("/dev/infiniband"),
                "net_plugins": net_plugins(), "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ}}

    def compare(self, facts_by_node, opts):
        out = per_node(facts_by_node, lambda node, f: list(self._judge(node, f)))
        versions = {n: f.get("loaded_version") or f.get("torch_nccl_version") for n, f in facts_by_node.items()}
        versions = {n: v for n, v in versions.items() if v}
        if opts["require_same_version"]:
            out += odd_ones(versions, lambda n, v, common: self.fail(
                f"{n} runs NCCL {v} ({facts_by_node[n].get('libnccl_path') or 'built into torch'}) while "
                f"the other nodes run {common}: mixed NCCL versions hang or fail in the first collective", [n],
                actual=v, expected=common,
                fix=f"on {n}: install the same torch/NCCL as the other nodes (pip install {quote(nccl_wheel(facts_by_node[n]) + '==' + str(common))}"
                    " or the same container image), and remove other libnccl from LD_LIBRARY_PATH/LD_PRELOAD"),
                tie=lambda s: [self.fail(
                    f"the nodes run different NCCL versions with no majority: {s.sides_text(str)}: mixed NCCL "
                    f"versions hang or fail in the first collective", list(s.odd),
                    actual={n: s.value_of(n) for n in s.odd}, expected="one NCCL version on every node",
                    fix="install the same torch/NCCL on every node (one container image, or pip install "
                        f"{nccl_wheel(next(iter(facts_by_node.values()), {}))}==<the version you want> everywhere): no version is on more nodes than "
                        "another, so nothing here says which is right; remove other libnccl from "
                        "LD_LIBRARY_PATH/LD_PRELOAD")])
        return out

    def _judge(self, node: str, f: dict):
        found = []
        built, loaded, path = f.get("torch_nccl_version"), f.get("loaded_version"), f.get("libnccl_path")
        if f.get("version_error"):
            found.append(self.warn(f"cannot ask {path} on {node} for its version: {f['version_error']}", [node],
                                   actual=f["version_error"], expected="ncclGetVersion works",
                                   fix="check the library: ldd $(python -c 'import torch;print(torch._C.__file__)') | grep nccl"))
        elif built and loaded and built != loaded:
            found.append(self.warn(
                f"{node} loads NCCL {loaded} from {path} but torch was built with {built}", [node], actual=loaded,
                expected=built,
                fix=f"remove the other libnccl from LD_LIBRARY_PATH/LD_PRELOAD, or pin it: pip install "
                    f"{quote(nccl_wheel(f) + '==' + str(built))}"))
        devs = f.get("rdma_devices") or []
        if devs and not f.get("dev_infiniband"):
            found.append(self.warn(
                f"{node} has RDMA devices ({', '.join(d['name'] for d in devs[:4])}) but no /dev/infiniband: NCCL "
                "cannot use them from here and falls back to TCP", [node], actual="no /dev/infiniband",
                expected="/dev/infiniband/uverbs*",
                fix="pass the devices into the container: --device /dev/infiniband (docker) or the RDMA device plugin "
                    "(Kubernetes), with --ulimit memlock=-1"))
        down = [d["name"] for d in devs if d.get("ports") and not any((p.get("state") or "").endswith("ACTIVE")
                                                                      for p in d["ports"])]
        if down:
            found.append(self.warn(f"RDMA device(s) on {node} with no ACTIVE port: {', '.join(down)}", [node],
                                   actual=down, expected="at least one port ACTIVE",
                                   fix="check cabling and the subnet manager (ibstat / ibv_devinfo); exclude these "
                                       f"with NCCL_IB_HCA=^{','.join(down)}"))
        if f.get("efa") and not f.get("net_plugins"):
            found.append(self.warn(
                f"{node} has EFA devices but no NCCL net plugin (libnccl-net*.so) on the library path: NCCL will use "
                "TCP sockets", [node], actual="no aws-ofi-nccl", expected="libnccl-net*.so on LD_LIBRARY_PATH",
                fix="install aws-ofi-nccl (the EFA installer ships it) and export "
                    "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:$LD_LIBRARY_PATH"))
        transport = _collective_transport(f)
        if transport is not None:
            verdict = judge_transport(transport, f.get("ib_devices"), bool(f.get("efa")), f.get("env"))
            if verdict["level"] == "warn":
                found.append(self.warn(f"{node}: {verdict['summary']}", [node], actual=transport,
                                       expected="NET/IB or NET/OFI", fix=verdict["fix"]))
        fabric = (f"{len(f.get('ib_devices') or [])} IB/RoCE device(s)" + (", EFA" if f.get("efa") else "")
                  if devs else "no IB/EFA devices")
        yield from passed_if_quiet(found, self, [node], f"{node}: NCCL {loaded or built} "
                                   + (f"loaded from {path}" if f.get("loaded") else "(as torch was built)")
                                   + f"; {fabric}" + (f"; transport {transport}" if transport else ""),
                                   actual=loaded or built, expected=built)


def _collective_transport(f: dict) -> str | None:
    """The transport the collective check's NCCL run chose (its 'transport' field), if it ran here."""
    coll = (f.get("uses") or {}).get("collective") or {}
    for run in coll.get("runs") or []:
        if run.get("backend") == "nccl" and run.get("transport"):
            return run["transport"]
    return None
