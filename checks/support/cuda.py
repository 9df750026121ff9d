"""What CUDA sees on this node, for the checks: one meaning of ``has_cuda``, torch's view of the GPUs, and
CUDA_VISIBLE_DEVICES read the way CUDA reads it. torch is imported inside functions only."""
from __future__ import annotations

import os

from ddpdoctor.api import import_error_words, parse_int


def has_cuda() -> bool:
    """torch imports and sees at least one usable CUDA device; never raises (ddpdoctor.devices' one meaning)."""
    from ddpdoctor.api import cuda_available

    return cuda_available()


def torch_view() -> dict:
    """What torch sees; never raises (a broken torch is recorded, the torch-build check judges it)."""
    try:
        import torch

        return {"torch_version": torch.__version__, "torch_cuda_version": torch.version.cuda,
                "torch_device_count": int(torch.cuda.device_count()) if torch.version.cuda else 0,
                "torch_error": None}
    except Exception as exc:  # noqa: BLE001
        return {"torch_version": None, "torch_cuda_version": None, "torch_device_count": None,
                "torch_error": import_error_words("torch", exc)}


def cuda_version_str(v: int | None) -> str | None:
    """NVML's CUDA driver version 12040 -> "12.4"."""
    if not v:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def version_tuple(v: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except (TypeError, ValueError):
        return None


def resolve_visible(raw: str | None, gpus: list[dict]) -> dict:
    """What CUDA_VISIBLE_DEVICES selects, the way CUDA reads it: comma-separated indices, GPU UUIDs (a unique
    prefix suffices) or MIG ids; the first entry that matches nothing ends the list (it and all after it are
    ignored). Returns {"set", "raw", "resolved": [NVML index...], "invalid", "ignored", "duplicates", "mig"}."""
    out = {"set": raw is not None, "raw": raw, "resolved": [], "invalid": None, "ignored": [], "duplicates": [],
           "mig": []}
    if raw is None:
        out["resolved"] = [g["index"] for g in gpus]
        return out
    entries = [e.strip() for e in raw.split(",")] if raw.strip() else []
    for pos, entry in enumerate(entries):
        idx = _match_entry(entry, gpus)
        if idx is None:
            out["invalid"] = entry
            out["ignored"] = entries[pos + 1:]
            break
        if entry.upper().startswith("MIG-"):
            out["mig"].append(entry)
        if idx in out["resolved"] and not entry.upper().startswith("MIG-"):
            out["duplicates"].append(entry)
            continue
        out["resolved"].append(idx)
    return out


def _match_entry(entry: str, gpus: list[dict]) -> int | None:
    i = parse_int(entry, strip=False)
    if i is not None:
        return i if any(g["index"] == i for g in gpus) else None
    low = entry.lower()
    if low.startswith("mig-gpu-"):  # legacy MIG-GPU-<uuid>/<gi>/<ci>
        parent = low[4:].split("/")[0]
        hits = [g["index"] for g in gpus if (g.get("uuid") or "").lower() == parent]
        return hits[0] if hits else None
    if low.startswith("mig-"):
        hits = [g["index"] for g in gpus if any(m.lower() == low for m in g.get("mig_devices") or [])]
        return hits[0] if hits else None
    if low.startswith("gpu-") and len(low) > 4:
        hits = [g["index"] for g in gpus if (g.get("uuid") or "").lower().startswith(low)]
        return hits[0] if len(hits) == 1 else None
    return None


def int_env(name: str) -> int | None:
    """An integer environment variable of this process (LOCAL_RANK, LOCAL_WORLD_SIZE), or None."""
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def gpus_needed(facts: dict) -> tuple[int | None, str]:
    """How many GPUs this node's own job needs, and what says so: --gpus-per-node, else the processes it
    starts (--nproc-per-node given to the preflight, else the launcher's LOCAL_WORLD_SIZE); (None, "")."""
    exp = facts.get("expected") if isinstance(facts.get("expected"), dict) else {}
    for key, source in (("gpus_per_node", "--gpus-per-node"),
                        ("nproc_per_node", f"--nproc-per-node {exp.get('nproc_per_node')}: this node's processes"),
                        ("local_world_size", "LOCAL_WORLD_SIZE (processes per node)")):
        value = exp.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, source
    return None, ""
