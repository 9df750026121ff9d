"""clock-sync: whether the OS says this node's clock is synchronised, asking timedatectl, chronyc and the
kernel (adjtimex) in that order; a skip saying why when none of them can tell. (The clock-skew check
measures the offsets between nodes in a cluster run.)"""
from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess

from ddpdoctor.api import Check, Option, Skip, per_node

TOOL_TIMEOUT_S = 3.0
TIME_ERROR = 5  # adjtimex() return value: the clock is not synchronised (kernel's STA_UNSYNC)
STA_UNSYNC = 0x0040


def _run(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def from_timedatectl() -> dict | None:
    out = _run(["timedatectl", "show", "-p", "NTPSynchronized", "-p", "NTP", "--value"])
    if out is None:
        return None
    lines = out.split()
    if not lines or lines[0] not in ("yes", "no"):
        return None
    return {"tool": "timedatectl", "synced": lines[0] == "yes", "detail": f"NTPSynchronized={lines[0]}"}


def parse_chronyc_tracking(text: str) -> dict | None:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if "Leap status" not in fields:
        return None
    synced = fields["Leap status"] != "Not synchronised"
    detail = f"Leap status: {fields['Leap status']}"
    if fields.get("System time"):
        detail += f"; System time: {fields['System time']}"
    return {"tool": "chronyc", "synced": synced, "detail": detail, "reference": fields.get("Reference ID")}


def from_chronyc() -> dict | None:
    out = _run(["chronyc", "-n", "tracking"])
    return parse_chronyc_tracking(out) if out else None


def from_adjtimex() -> dict | None:
    """Read-only adjtimex(2) (modes = 0): the kernel's own view, which NTP daemons keep up to date."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        fn = libc.adjtimex
    except (OSError, AttributeError):
        return None
    # struct timex is ~208 bytes on 64-bit Linux; a zeroed, larger buffer has modes = 0 (read only).
    buf = ctypes.create_string_buffer(512)
    state = fn(buf)
    if state < 0:
        return None
    status = int.from_bytes(buf.raw[40:44], "little", signed=True)  # after modes(4+pad), offset, freq, maxerror, esterror
    maxerror_us = int.from_bytes(buf.raw[24:32], "little", signed=True)
    synced = state != TIME_ERROR and not (status & STA_UNSYNC)
    return {"tool": "adjtimex", "synced": synced, "detail": kernel_clock_words(state, status, maxerror_us),
            "maxerror_us": maxerror_us, "state": state}


def kernel_clock_words(state: int, status: int, maxerror_us: int) -> str:
    """What adjtimex says, as a person reads it: no NTP daemon has told the kernel its clock is right (TIME_ERROR,
    STA_UNSYNC), and the error bound the kernel keeps, in seconds (the raw values stay in the facts)."""
    bound = f"{maxerror_us / 1e6:g} s" if maxerror_us >= 1_000_000 else f"{maxerror_us / 1e3:g} ms"
    if state == TIME_ERROR or status & STA_UNSYNC:
        return f"no NTP service keeps the kernel's clock in step, error bound {bound}"
    return f"the kernel's clock is kept in step by NTP, error bound {bound}"


SOURCES = (from_timedatectl, from_chronyc, from_adjtimex)


class ClockSyncCheck(Check):
    name = "clock-sync"
    description = "The OS says the clock is synchronised (timedatectl / chronyc / adjtimex)"
    options = {"unsynced_level": Option("warn", "level of an unsynchronised clock: warn or fail")}

    def gather(self, ctx) -> dict:
        asked = []
        for source in SOURCES:
            answer = source()
            asked.append(source.__name__.replace("from_", ""))
            if answer is not None:
                return {"synced": answer["synced"], "source": answer, "asked": asked}
        raise Skip(f"cannot tell whether the clock is synchronised: none of {', '.join(asked)} answered "
                   "(no systemd, no chrony, no adjtimex)")

    def compare(self, facts_by_node, opts):
        return per_node(facts_by_node, lambda node, f: self.judge(node, f, opts))

    def judge(self, node: str, f: dict, opts) -> list:
        src = f.get("source") or {}
        if f.get("synced"):
            return [self.passed(f"clock synchronised ({src.get('tool')}: {src.get('detail')})", [node], actual=True)]
        make = self.fail if opts["unsynced_level"] == "fail" else self.warn
        return [make(f"clock not synchronised ({src.get('tool')}: {src.get('detail')}): logs and timeouts across "
                     "nodes disagree, certificates and Kerberos may fail", [node], actual=False, expected=True,
                     fix="enable NTP: timedatectl set-ntp true (or: systemctl enable --now chronyd)")]
