"""The Dockerfile: hadolint passes, it is multi-stage and runs as a non-root user with a
health check, copies every package setuptools ships, and starts a real specgate command."""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib

from tests.deploy.compose import ROOT, load_raw
from tests.deploy.tools import assert_cli_command, run, tool

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def exec_form(arguments: str) -> list[str]:
    return list(eval(arguments, {}, {}))  # a JSON array of strings


def test_hadolint_passes():
    hadolint = tool("hadolint")
    result = run(hadolint, "--no-color", str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_really_checking(tmp_path):
    hadolint = tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\n")
    result = run(hadolint, "--no-color", str(bad))
    assert result.returncode == 1 and "DL3006" in result.stdout


def test_multi_stage_non_root_with_a_health_check():
    build, runtime = stages()
    assert build[0][1].endswith("AS build") and runtime[0][1].endswith("AS runtime")
    assert any(i == "COPY" and a.startswith("--from=build ") for i, a in runtime)
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert any(i == "HEALTHCHECK" and "CMD" in a for i, a in runtime)


def test_the_image_runs_a_real_command():
    runtime = stages()[-1]
    (entrypoint,) = [exec_form(a) for i, a in runtime if i == "ENTRYPOINT"]
    (command,) = [exec_form(a) for i, a in runtime if i == "CMD"]
    assert entrypoint == ["specgate"]
    assert_cli_command(command, "Dockerfile CMD")
    port = command[command.index("--port") + 1]
    exposed = {p for i, a in runtime if i == "EXPOSE" for p in a.split()}
    assert port in exposed and "4318" in exposed  # the gateway's and the collector's
    health = next(a for i, a in runtime if i == "ENV" and "HEALTHCHECK_URL" in a)
    assert f"127.0.0.1:{port}/healthz" in health


def test_every_shipped_package_is_copied_and_not_ignored():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    includes = project["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = {pattern.rstrip("*") for pattern in includes}
    copied = set()
    for instruction, arguments in stages()[0]:
        if instruction == "COPY" and not arguments.startswith("--from"):
            copied |= set(shlex.split(arguments)[:-1])
    assert tops <= {c.rstrip("/") for c in copied}
    assert {"pyproject.toml", "README.md"} <= copied
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in copied:
        assert (ROOT / path).exists(), path
        assert not any(fnmatch.fnmatch(path, pattern) for pattern in ignored), path


def test_compose_builds_this_dockerfile_with_the_engines_extra():
    services = load_raw()["services"]
    builds = {n: s["build"] for n, s in services.items() if isinstance(s.get("build"), dict)}
    assert {b["dockerfile"] for b in builds.values()} == {"Dockerfile"}
    extras = {b.get("args", {}).get("EXTRAS") for b in builds.values()}
    assert extras == {None, "engines"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "engines" in project["project"]["optional-dependencies"]
