"""ddpdoctor's redaction against detect-secrets (if installed: `pip install detect-secrets==1.5.0`) on the
texts run-trainer redacts: a rank's 40-line log tail and a 1 MB training log. Prints, for each: the time,
the ordinary lines flagged (false alarms: tracebacks, paths, loss lines, git SHAs, package fingerprints,
torch store keys, GPU UUIDs) and which of the planted secrets each catches.

    python3 tests/benchmarks/bench_redact.py
"""
from __future__ import annotations

import os
import random
import sys
import time

SECRETS = {
    "aws secret (env value)": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "db password (env value)": "Tr0ub4dor&3x",
    "github token": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "hf token": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
    "slack webhook": "https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/abcdefghijklmnopqrstuvwx",
    "openai key": "sk-proj-4f9a8b7c6d5e4f3a2b1cXyZ0",
    "--password flag": "--password hunter2x",
    "azure AccountKey": "AccountKey=" + "Zm9vYmFy" * 11 + ";",
}
ENV = {"AWS_SECRET_ACCESS_KEY": SECRETS["aws secret (env value)"], "DB_PASSWORD": SECRETS["db password (env value)"]}


def ordinary_lines(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    hexd = lambda k: "".join(rng.choice("0123456789abcdef") for _ in range(k))  # noqa: E731
    shapes = [
        lambda i: f"[rank0] step {i} loss {rng.random() * 3:.4f} lr 3.0e-04 tokens/s {rng.randint(40000, 60000)}",
        lambda i: f"saved /runs/exp/ckpt-{hexd(40)}.pt in 0.4 s",
        lambda i: f"torch 2.13.0+cpu sha256:{hexd(64)}",
        lambda i: f"  File \"/home/u/train/model_{i % 7}.py\", line {i % 400}, in forward",
        lambda i: "    return self._call_impl(*args, **kwargs)",
        lambda i: "RuntimeError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2",
        lambda i: f"GPU-{hexd(8)}-{hexd(4)}-{hexd(4)}-{hexd(4)}-{hexd(12)} on node{i % 16}",
        lambda i: f"commit {hexd(40)} checkout /data/shards/shard-{i:05d}.tar",
        lambda i: f"pip: numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.whl#sha256={hexd(64)}",
        lambda i: "Setting `pad_token_id` to `eos_token_id`:50256 for open-end generation.",
    ]
    return [shapes[i % len(shapes)](i) for i in range(n)]


def planted(lines: list[str]) -> list[str]:
    out = list(lines)
    step = max(1, len(out) // (len(SECRETS) + 1))
    for k, (what, value) in enumerate(SECRETS.items()):
        out.insert((k + 1) * step, f"RuntimeError: connect failed with {value} ({what})")
    return out


def ours(text: str) -> tuple[float, str]:
    from ddpdoctor.redaction import redact

    redact.know_job(ENV)
    t0 = time.process_time()
    out = redact.redact_text(text)
    return time.process_time() - t0, out


def detect_secrets_lines(text: str) -> tuple[float, set[int]]:
    """detect-secrets' default plugins and filters (patterns; entropy over its limits: base64 4.5, hex 3.0),
    as `detect-secrets scan` runs them on a file: the 0-based line numbers it flags."""
    import tempfile

    from detect_secrets.core.scan import scan_file
    from detect_secrets.settings import default_settings

    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(text)
    try:
        with default_settings():
            t0 = time.process_time()
            flagged = {s.line_number - 1 for s in scan_file(f.name)}
            return time.process_time() - t0, flagged
    finally:
        os.unlink(f.name)


def report(name: str, lines: list[str]) -> None:
    text = "\n".join(planted(lines))
    secret_rows = {i for i, line in enumerate(text.splitlines()) if line.startswith("RuntimeError: connect failed")}
    t, out = ours(text)
    changed = {i for i, (a, b) in enumerate(zip(text.splitlines(), out.splitlines())) if a != b}
    caught = [w for w, v in SECRETS.items() if v.split()[-1].rstrip(";").split("=", 1)[-1] not in out]
    print(f"{name} ({len(text) / 1e6:.2f} MB, {len(text.splitlines())} lines)")
    print(f"  ddpdoctor: {t * 1e3:.1f} ms, false alarms {len(changed - secret_rows)}, caught {len(caught)}/"
          f"{len(SECRETS)}: missed {sorted(set(SECRETS) - set(caught))}")
    try:
        t, flagged = detect_secrets_lines(text)
    except ImportError:
        print("  detect-secrets: not installed")
        return
    rows = text.splitlines()
    hit = [w for w, v in SECRETS.items() if any(v in rows[i] for i in flagged)]
    print(f"  detect-secrets: {t * 1e3:.1f} ms, false alarms {len(flagged - secret_rows)}, caught {len(hit)}/"
          f"{len(SECRETS)}: missed {sorted(set(SECRETS) - set(hit))}")
    if flagged - secret_rows:
        print(f"  e.g. flagged: {[rows[i][:70] for i in sorted(flagged - secret_rows)[:3]]}")

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    report("40-line tail", ordinary_lines(32))
    lines = ordinary_lines(14_000)
    report("1 MB log", lines)
