"""parse_nccl_transport / judge_transport over NCCL_DEBUG=INFO lines as NCCL really prints them."""
from __future__ import annotations

import pytest

from ddpdoctor_checks.support.nccl_log import judge_transport, parse_nccl_transport

# One rank on the H100 baseline machine (gpu-baseline-h100.md): IB probed, no device, sockets chosen.
BASELINE_SOCKET = """\
h100:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>
h100:4242:4242 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
h100:4242:4250 [0] NCCL INFO NET/IB : No device found.
h100:4242:4250 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>
h100:4242:4250 [0] NCCL INFO Using network Socket
"""
# RoCE on DGX H100 (NCCL 2.19 style).
ROCE = """\
dgxh100-4:460770:460770 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation
dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0
dgxh100-4:460770:460842 [0] NCCL INFO Using network IB
"""
# NCCL 2.4 era: no "Using network" line; the socket transport initialises first, then IB.
OLD_IB = """\
master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>
master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).
master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>
NCCL version 2.4.7+cuda10.0
"""
EFA = """\
8h200-3:6310:6318 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)
8h200-3:6310:6318 [0] NCCL INFO NET/OFI NIC group 0 device #0 0000:56:00.0
8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric
"""
EFA_RING_ONLY = "[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0\n"
EFA_FALLBACK = """\
ip-10-0-0-1:1929:1937 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available
ip-10-0-0-1:1929:1937 [0] NCCL INFO NET/IB : No device found.
ip-10-0-0-1:1929:1937 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
ip-10-0-0-1:1929:1937 [0] NCCL INFO Using network Socket
ip-10-0-0-1:1929:1940 [0] misc/socket.cc:50 NCCL WARN Net : Connect to 10.0.0.2<43712> failed : No route to host
"""
SHARP_PLUGIN = "node:1:2 [5] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so\nnode:1:2 [5] NCCL INFO Using network IBext\n"


@pytest.mark.parametrize("log,transport", [
    (BASELINE_SOCKET, "NET/Socket"), (ROCE, "NET/IB"), (OLD_IB, "NET/IB"), (EFA, "NET/OFI"),
    (EFA_RING_ONLY, "NET/OFI"), (EFA_FALLBACK, "NET/Socket"), (SHARP_PLUGIN, "NET/IB"), ("", None),
    ("NCCL INFO NET/IB : No device found.\n", None),
])
def test_transport(log, transport):
    assert parse_nccl_transport(log)["transport"] == transport


def test_first_warn_is_the_first_warn_line():
    out = parse_nccl_transport(EFA_FALLBACK)
    assert out == {"transport": "NET/Socket", "first_warn": "ip-10-0-0-1:1929:1937 [0] nccl_net_ofi_rdma_init:7978 "
                   "NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available"}
    assert parse_nccl_transport(ROCE)["first_warn"] is None
    assert parse_nccl_transport(None) == {"transport": None, "first_warn": None}


def test_sockets_with_efa_warns_with_plugin_fix():
    v = judge_transport("NET/Socket", [], efa=True)
    assert v["level"] == "warn" and "aws-ofi-nccl" in v["summary"] and "LD_LIBRARY_PATH" in v["fix"]


def test_sockets_with_ib_warns_with_hca_fix():
    v = judge_transport("NET/Socket", ["mlx5_0", "mlx5_1"])
    assert v["level"] == "warn" and "mlx5_0, mlx5_1" in v["summary"] and "NCCL_IB_HCA=mlx5_0,mlx5_1" in v["fix"]


def test_sockets_because_ib_disabled_names_the_variable():
    v = judge_transport("NET/Socket", ["mlx5_0"], env={"NCCL_IB_DISABLE": "1"})
    assert v["level"] == "warn" and "NCCL_IB_DISABLE=1" in v["summary"] and "unset NCCL_IB_DISABLE" in v["fix"]


@pytest.mark.parametrize("transport,ib,efa", [("NET/Socket", [], False), ("NET/IB", ["mlx5_0"], False),
                                               ("NET/OFI", [], True)])
def test_right_transport_passes(transport, ib, efa):
    assert judge_transport(transport, ib, efa)["level"] == "pass"


def test_unknown_transport_is_a_skip():
    assert judge_transport(None, ["mlx5_0"])["level"] == "skip"
