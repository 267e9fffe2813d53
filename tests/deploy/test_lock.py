"""constraints.txt: every build and runtime dependency (and what it pulls in) pinned to the
version installed and tested here, inside pyproject's ranges; the image installs with it,
and the CI examples run that image and install nothing unpinned."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.compose import ROOT
from tests.deploy.lock import CONSTRAINTS, direct_requirements, installed_closure, pinned
from tests.deploy.test_ci_files import GITHUB, GITLAB
from tests.deploy.test_dockerfile import stages

REGENERATE = "regenerate it: python -m tests.deploy.lock > constraints.txt"


def test_every_dependency_is_pinned_to_what_is_installed_here():
    pins = pinned(CONSTRAINTS.read_text())
    closure = installed_closure()
    assert len(closure) > 50
    missing = sorted(set(closure) - set(pins))
    assert not missing, f"not in constraints.txt: {missing}; {REGENERATE}"
    drift = {n: (pins[n], v) for n, v in closure.items() if pins[n] != v}
    assert not drift, f"pinned != installed: {drift}; {REGENERATE}"


def test_the_pins_lie_inside_pyproject_s_ranges():
    pins = pinned(CONSTRAINTS.read_text())
    for requirement in direct_requirements():
        version = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)


def test_the_build_floor_accepts_an_spdx_license_string():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)  # PEP 639: setuptools >= 77
    (setuptools,) = [
        Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")
    ]
    floor = min(Version(s.version) for s in setuptools.specifier if s.operator == ">=")
    assert floor >= Version("77")


def test_the_image_installs_with_the_constraints():
    build = stages()[0]
    copied = [a for i, a in build if i == "COPY" and "constraints.txt" in a.split()]
    env = [a for i, a in build if i == "ENV" and a.startswith("PIP_CONSTRAINT=")]
    assert copied and env == ["PIP_CONSTRAINT=/src/constraints.txt"]
    workdir = next(a for i, a in build if i == "WORKDIR")
    assert f"{workdir}/constraints.txt" == env[0].split("=", 1)[1]
    # Set before the first install, so it reaches every one (and the isolated build).
    order = [i for i, a in build if i in ("ENV", "RUN") and ("PIP_CONSTRAINT" in a or "pip " in a)]
    assert order[0] == "ENV"


def test_the_ci_examples_install_nothing_unpinned():
    for path in (GITHUB, GITLAB):
        text = path.read_text()
        assert "SPECGATE_IMAGE" in text, f"{path.name} runs the image built with the lock"
        for install in re.findall(r"pip install[^\n]*", text):
            assert "-c constraints.txt" in install or "--constraint" in install, install
