"""constraints.txt: the exact versions of specgate's build and runtime dependencies (with the
`engines` extra) and everything they pull in, on Linux and CPython 3.11, as installed here.

    python -m tests.deploy.lock > constraints.txt
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = ("engines",)
HEADER = """\
# Exact versions of specgate's build and runtime dependencies (extra `engines` included)
# and of everything they pull in, for Linux and CPython 3.11. The Dockerfile installs with
# them (PIP_CONSTRAINT, which also reaches the isolated build of the package itself), and so
# does any CI job that installs specgate: `pip install -c constraints.txt .`
# Regenerate from a virtualenv that has them installed: python -m tests.deploy.lock
"""


def direct_requirements() -> list[Requirement]:
    """The build requirements, the dependencies and the shipped extras of pyproject.toml."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    lines = list(pyproject["build-system"]["requires"]) + list(project["dependencies"])
    for extra in EXTRAS:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": e}) for e in extras or {""})


def installed_closure() -> dict[str, str]:
    """Every distribution the direct requirements pull in here, with its installed version."""
    versions: dict[str, str] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    pending = [(r, frozenset(r.extras)) for r in direct_requirements()]
    while pending:
        requirement, extras = pending.pop()
        key = (canonicalize_name(requirement.name), extras)
        if key in done:
            continue
        done.add(key)
        dist = metadata.distribution(requirement.name)
        versions[key[0]] = dist.version
        for line in dist.requires or []:
            sub = Requirement(line)
            if _applies(sub, extras):
                pending.append((sub, frozenset(sub.extras)))
    return versions


def render() -> str:
    """The constraints file for what is installed here."""
    pins = installed_closure()
    return HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def pinned(text: str) -> dict[str, str]:
    """Read a constraints file: name -> exact version."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", f"not an exact pin: {line}"
            out[canonicalize_name(requirement.name)] = spec.version
    return out


if __name__ == "__main__":
    sys.stdout.write(render())
