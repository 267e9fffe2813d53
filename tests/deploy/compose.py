"""Read deploy/compose/compose.yaml the way Docker Compose does (interpolation, merge keys,
profiles), and turn its specgate services into commands for processes on 127.0.0.1."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
# Compose's interpolation: $$, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}.
_VARIABLE = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
)


class MissingVariable(Exception):
    """A `${VAR:?message}` whose variable is unset or empty."""


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Apply Compose's variable interpolation to every string inside `value`."""
    if isinstance(value, str):

        def one(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, op, arg = match.group("name"), match.group("op"), match.group("arg")
            current = variables.get(name)
            unset_or_empty = not current
            if op in (":-", "-"):
                missing = unset_or_empty if op == ":-" else current is None
                return arg if missing else str(current)
            if op in (":?", "?"):
                missing = unset_or_empty if op == ":?" else current is None
                if missing:
                    raise MissingVariable(f"{name}: {arg}")
            return current or ""

        return _VARIABLE.sub(one, value)
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    return value


def load_raw() -> dict[str, Any]:
    """The compose file as YAML (merge keys resolved), before interpolation."""
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def load(variables: dict[str, str]) -> dict[str, Any]:
    """The compose file after interpolation with `variables` (what `.env` would hold)."""
    data = load_raw()
    return {
        key: interpolate(value, variables) if key == "services" else value
        for key, value in data.items()
    }


def in_profile(service: dict[str, Any], profile: str | None) -> bool:
    """Whether `docker compose --profile <profile> up` starts this service."""
    profiles = service.get("profiles") or []
    return not profiles or (profile is not None and profile in profiles)


def is_specgate(service: dict[str, Any]) -> bool:
    """Whether the service runs the specgate image built from this repository."""
    build = service.get("build")
    return isinstance(build, dict) and build.get("context") == "../.."


def specgate_executable() -> str:
    """The `specgate` console script of this environment (the image's ENTRYPOINT)."""
    found = shutil.which("specgate", path=str(Path(sys.executable).parent))
    assert found, "the specgate console script is not installed beside this Python"
    return found


def listen_port(command: list[str]) -> int | None:
    """The port a service command binds (`--port N`), if any."""
    if "--port" in command:
        return int(command[command.index("--port") + 1])
    return None


def network_names(name: str, service: dict[str, Any]) -> list[str]:
    """The host names a service answers to on the Compose network."""
    names = [name]
    for network in (service.get("networks") or {}).values():
        names += list((network or {}).get("aliases") or [])
    return names


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """A service's dependencies with their conditions."""
    value = service.get("depends_on") or {}
    if isinstance(value, list):
        return dict.fromkeys(value, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in value.items()}


def start_order(services: dict[str, dict[str, Any]]) -> list[str]:
    """Services in an order that honours depends_on (ignoring services not in `services`)."""
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        assert name not in visiting, f"depends_on cycle through {name}"
        visiting.add(name)
        for dependency in depends_on(services[name]):
            if dependency in services:
                visit(dependency)
        visiting.discard(name)
        ordered.append(name)

    for name in sorted(services):
        visit(name)
    return ordered


@dataclass
class Translation:
    """Where Compose's names land on this machine."""

    hosts: dict[str, str] = field(default_factory=dict)  # "name:port" -> "127.0.0.1:free"
    paths: dict[str, str] = field(default_factory=dict)  # container path -> local path

    def text(self, value: str) -> str:
        """Rewrite Compose host names, ports and mounted paths inside a string."""
        for source, target in self.hosts.items():
            # Whole host names only: "collector:4318" must not match "otel-collector:4318".
            value = re.sub(rf"(?<![\w.-]){re.escape(source)}(?!\d)", target, value)
        for source, target in self.paths.items():
            value = value.replace(source, target)
        return value

    def command(self, command: list[str], port: int | None) -> list[str]:
        """Bind to 127.0.0.1 on the port given here; rewrite names and paths."""
        out = [self.text(arg) for arg in command]
        for index, arg in enumerate(out[:-1]):
            if arg == "--host":
                out[index + 1] = "127.0.0.1"
            if arg == "--port" and port is not None:
                out[index + 1] = str(port)
        return out
