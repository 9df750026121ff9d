"""The worker's log of the calls gloo's flight recorder does not record (torch 2.13 records no send/recv for
gloo, and no all_to_all splits for any backend): each dist.send/recv/isend/irecv and all_to_all_single a rank
makes, one JSON line in DDPDOCTOR_CALLS_DIR/rank<R>.jsonl, written as the call is made (a rank gloo aborts in
C++ writes nothing at its end): op, peer (global rank), tensor shape and dtype, splits, the user's call site.

Installed by the bootstrap before the script runs; the wrappers pass every argument through unchanged and
never raise on their own (a log that cannot be written is given up). Bounded: MAX_LINES per rank. Read back
by ``launch.evidence.calls``.
"""
from __future__ import annotations

import functools
import json
import os
import sys

MAX_LINES = 20_000
OPS = {"send": ("dst", 1), "recv": ("src", 1), "isend": ("dst", 1), "irecv": ("src", 1),
       "all_to_all_single": (None, None)}
_state = {"fh": None, "lines": 0, "broken": False}


def install() -> None:
    """Wrap torch.distributed's point-to-point calls and all_to_all_single (the module the user imports)."""
    folder = os.environ.get("DDPDOCTOR_CALLS_DIR")
    if not folder:
        return
    try:
        import torch.distributed as dist

        for name in OPS:
            original = getattr(dist, name, None)
            if original is not None and not getattr(original, "_ddpdoctor_logged", False):
                setattr(dist, name, _wrap(name, original))
    except Exception:  # noqa: BLE001 - forensics must never stop the job
        pass


def _wrap(name: str, original):
    @functools.wraps(original)
    def logged(*args, **kwargs):
        try:
            _log(name, args, kwargs)
        except Exception:  # noqa: BLE001
            _state["broken"] = True
        return original(*args, **kwargs)

    logged._ddpdoctor_logged = True
    return logged


def _shape(t) -> list | None:
    try:
        return [int(x) for x in t.shape]
    except (AttributeError, TypeError, ValueError):
        return None


def _log(name: str, args: tuple, kwargs: dict) -> None:
    if _state["broken"] or _state["lines"] >= MAX_LINES:
        return
    peer_name, peer_pos = OPS[name]
    rec = {"op": name.lstrip("i") if name in ("isend", "irecv") else name, "where": _site()}
    if peer_name is not None:
        tensor = args[0] if args else kwargs.get("tensor")
        peer = kwargs.get(peer_name, args[peer_pos] if len(args) > peer_pos else None)
        rec.update(peer=peer if isinstance(peer, int) else None, sizes=[_shape(tensor)], dtype=str(tensor.dtype))
    else:
        out = args[0] if args else kwargs.get("output")
        inp = args[1] if len(args) > 1 else kwargs.get("input")
        outs = args[2] if len(args) > 2 else kwargs.get("output_split_sizes")
        ins = args[3] if len(args) > 3 else kwargs.get("input_split_sizes")
        rec.update(sizes=[_shape(inp)], out_sizes=[_shape(out)], dtype=str(getattr(inp, "dtype", "?")),
                   in_splits=[int(x) for x in ins] if ins is not None else None,
                   out_splits=[int(x) for x in outs] if outs is not None else None)
    fh = _state["fh"]
    if fh is None:
        folder = os.environ["DDPDOCTOR_CALLS_DIR"]
        os.makedirs(folder, exist_ok=True)
        rank = os.environ.get("RANK", "0")
        fh = _state["fh"] = open(os.path.join(folder, f"rank{rank}.jsonl"), "a", buffering=1)  # noqa: SIM115
    fh.write(json.dumps(rec) + "\n")  # line-buffered: on disk before the call that may abort the process
    _state["lines"] += 1


def _site() -> str | None:
    """file:line of the innermost frame of the user's code that made the call."""
    from .evidence.model import is_library

    frame = sys._getframe(3)
    while frame is not None and (is_library(frame.f_code.co_filename) or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None
