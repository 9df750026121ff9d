"""Xid errors: what each Xid means, the kernel log's `NVRM: Xid` lines parsed, the log read (dmesg, else
journalctl -k), the time since boot they are measured against, and how NVML and the kernel spell a PCI bus."""
from __future__ import annotations

import re
import subprocess

# Xid meanings (NVIDIA "Xid Errors" table). kind "hw": the GPU/driver needs attention; "app": usually the
# program's own fault (bad memory access, killed); anything unknown is treated as "hw" to be safe.
XIDS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception (often the application)", "app"),
    31: ("GPU memory page fault (often the application)", "app"),
    43: ("GPU stopped processing (often the application)", "app"),
    45: ("preemptive cleanup: a process was killed", "app"),
    48: ("double-bit ECC error", "hw"),
    61: ("internal micro-controller breakpoint/warning", "hw"),
    62: ("internal micro-controller halt", "hw"),
    63: ("ECC page retirement or row remap recorded", "hw"),
    64: ("ECC page retirement or row remap failed", "hw"),
    74: ("NVLink error", "hw"),
    79: ("GPU has fallen off the bus", "hw"),
    92: ("high single-bit ECC error rate", "hw"),
    94: ("contained ECC error", "hw"),
    95: ("uncontained ECC error", "hw"),
    119: ("GSP RPC timeout", "hw"),
    120: ("GSP error", "hw"),
    140: ("unrecovered ECC error", "hw"),
    154: ("GPU recovery action changed (reset or reboot required)", "hw"),
}

# "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." (dmesg, and journalctl -k
# -o short-monotonic, both print seconds since boot first).
XID_LINE = re.compile(r"\[\s*(?P<t>\d+\.\d+)\].*?NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\):\s*(?P<xid>\d+)(?P<rest>.*)$")


def xid_info(xid: int) -> tuple[str, str]:
    return XIDS.get(int(xid), ("unlisted Xid", "hw"))


def bus_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """NVML "00000000:3B:00.0" and the kernel's "0000:3b:00" name the same GPU: compare (domain, bus, device)."""
    if not bus_id:
        return None
    parts = str(bus_id).split(".")[0].split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (ValueError, IndexError):
        return None


def parse_kernel_xids(log: str, uptime_s: float | None, limit: int = 200) -> list[dict]:
    """Xid lines of a kernel log -> [{"pci", "xid", "age_s", "meaning", "kind", "line"}] (age None if unknown);
    the last ``limit`` only: a flapping GPU logs thousands and facts travel between nodes."""
    out = []
    for line in log.splitlines():
        m = XID_LINE.search(line)
        if not m:
            continue
        xid = int(m.group("xid"))
        meaning, kind = xid_info(xid)
        t = float(m.group("t"))
        out.append({"pci": m.group("pci"), "xid": xid, "meaning": meaning, "kind": kind,
                    "age_s": round(uptime_s - t, 1) if uptime_s is not None and uptime_s >= t else None,
                    "line": line.strip()[:300]})
    return out[-limit:]


def read_kernel_log(timeout_s: float = 5.0) -> dict:
    """The kernel ring buffer via dmesg, else journalctl -k; unreadable (no CAP_SYSLOG, no binary) is recorded."""
    errors = []
    for cmd in (["dmesg"], ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"]):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{cmd[0]}: {exc}")
            continue
        if p.returncode == 0 and p.stdout.strip():
            return {"readable": True, "source": cmd[0], "text": p.stdout, "error": None}
        errors.append(f"{cmd[0]}: {(p.stderr or '').strip().splitlines()[-1] if p.stderr.strip() else f'exit {p.returncode}'}")
    return {"readable": False, "source": None, "text": "", "error": "; ".join(errors)}


def uptime() -> float | None:
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
