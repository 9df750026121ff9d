"""packages: the installed Python distributions and their versions, with a fingerprint to compare nodes by
(the parity check diffs them across nodes); on one node, the same distribution installed twice."""
from __future__ import annotations

import hashlib
import re
from shlex import quote

from ddpdoctor.api import Check, Option, passed_if_quiet, per_node


def normalise(name: str) -> str:
    """PEP 503 name normalisation, so `Foo_Bar` and `foo-bar` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> list[dict]:
    """Every distribution importlib.metadata finds on sys.path, in path order (first one wins at import)."""
    from importlib import metadata

    out = []
    for dist in metadata.distributions():
        name, version = _from_dist_info_name(dist)
        if name is None:
            # Parsing METADATA costs ~3 ms a distribution, which is why the folder name is tried first.
            name = dist.metadata["Name"] if dist.metadata else None
            version = dist.version
        if not name:
            continue
        location = str(getattr(dist, "_path", "") or "")
        out.append({"name": normalise(name), "version": version, "location": location})
    return out


def _from_dist_info_name(dist) -> tuple[str | None, str | None]:
    """`{name}-{version}.dist-info` (the wheel spec escapes '-' in both parts), without reading METADATA."""
    path = getattr(dist, "_path", None)
    folder = getattr(path, "name", "") or ""
    if not folder.endswith(".dist-info"):
        return None, None
    name, sep, version = folder[: -len(".dist-info")].partition("-")
    if not sep or not name or not version or "-" in version:
        return None, None
    return name, version


def fingerprint(pins: list[str]) -> str:
    return hashlib.sha256("\n".join(pins).encode()).hexdigest()[:16]


class PackagesCheck(Check):
    name = "packages"
    cross_node = True  # in the prologs' meeting: its comparables (each distribution's version) are parity's there
    facts_shape = {"packages": ["scalar"]}
    description = "Installed distributions and versions, with a fingerprint; duplicates and required packages"
    options = {"required": Option("", "comma-separated distributions that must be installed (e.g. 'torch,numpy')")}

    def gather(self, ctx) -> dict:
        dists = installed()
        seen: dict[str, str] = {}
        shadowed = []
        for d in dists:
            if d["name"] in seen:
                # A second copy later on sys.path: import uses the first, pip may report the other.
                shadowed.append({"name": d["name"], "used": seen[d["name"]], "shadowed": d["version"],
                                 "location": d["location"]})
                continue
            seen[d["name"]] = d["version"]
        pins = sorted(f"{n}=={v}" for n, v in seen.items())
        return {"packages": pins, "count": len(pins), "fingerprint": fingerprint(pins), "shadowed": shadowed}

    def comparable(self, facts: dict) -> dict:
        """Each distribution's version, by normalised name (the pins, without the fingerprint that sums them)."""
        out = {}
        for pin in facts.get("packages") or []:
            name, _, version = str(pin).partition("==")
            out[name.lower()] = version
        return out

    def compare(self, facts_by_node, opts):
        required = [normalise(x.strip()) for x in opts["required"].split(",") if x.strip()]
        return per_node(facts_by_node, lambda node, f: self.judge(node, f, required))

    def judge(self, node: str, f: dict, required: list[str]) -> list:
        out = []
        names = {p.partition("==")[0] for p in f.get("packages", [])}
        missing = [r for r in required if r not in names]
        if missing:
            out.append(self.fail(f"required packages missing: {', '.join(missing)}", [node], actual=sorted(missing),
                                 expected="installed", fix="pip install " + " ".join(quote(m) for m in missing)))
        for s in f.get("shadowed", []):
            if s["used"] != s["shadowed"]:
                out.append(self.warn(
                    f"{s['name']} is installed twice: {s['used']} is imported, {s['shadowed']} in {s['location']} "
                    "is shadowed", [node], actual=[s["used"], s["shadowed"]], expected="one copy",
                    fix=f"pip uninstall {quote(str(s['name']))} until none is left, then pip install "
                        f"{quote(str(s['name']) + '==' + str(s['used']))}"))
        return passed_if_quiet(out, self, [node], f"{f.get('count', 0)} distributions, fingerprint "
                               f"{f.get('fingerprint')}", actual=f.get("fingerprint"))
