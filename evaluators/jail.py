"""The bubblewrap jail: the command that boxes one untrusted run, and the probe for it.

Each run gets new user, PID, IPC, UTS, network, mount and cgroup namespaces; a read-only
root holding the interpreter, its standard library and the shared libraries they load
(site-packages masked); a size-limited tmpfs as work dir, HOME and /tmp; a procfs of its
own PID namespace; an unprivileged uid with no capabilities; a clean environment; no
nested user namespaces. A worker running as root first drops to `uid` (its own user
namespace makes RLIMIT_NPROC count that sandbox's processes only, and root is never
bound by it). The PID namespace's init is bubblewrap's: when the harness exits, or when
bubblewrap or the worker dies (`--die-with-parent`), every process in the box dies.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

log = logging.getLogger("specgate.sandbox")

WORKDIR = "/tmp"
# Shared libraries the interpreter and its extension modules load, wherever they exist.
_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib")
_SYSTEM_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")
_PATHS = (
    "import json, sys, sysconfig; p = sysconfig.get_paths(); print(json.dumps({"
    "'stdlib': p['stdlib'], 'platstdlib': p['platstdlib'], 'purelib': p['purelib'], "
    "'platlib': p['platlib'], 'libdir': sysconfig.get_config_var('LIBDIR') or ''}))"
)


@dataclass(frozen=True)
class Jail:
    """A bubblewrap set-up that was seen to work on this host."""

    bwrap: str
    python: str
    binds: tuple[str, ...]
    masks: tuple[str, ...]
    host_uid: int | None

    def command(self, *, work_bytes: int, argv: tuple[str, ...]) -> list[str]:
        """Return the bwrap command line that runs `argv` (the interpreter's) boxed."""
        mounts: list[str] = []
        for path in self.binds:
            target = os.readlink(path) if os.path.islink(path) else None
            mounts += ["--symlink", target, path] if target else ["--ro-bind", path, path]
        for path in self.masks:
            mounts += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
        return [
            self.bwrap,
            *("--unshare-all", "--unshare-user", "--disable-userns"),
            *("--uid", "65534", "--gid", "65534", "--hostname", "sandbox"),
            *mounts,
            # bwrap's /dev is a tmpfs of its own, unbounded: read-only, its devices still work.
            *("--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"),
            *("--size", str(work_bytes), "--tmpfs", WORKDIR, "--remount-ro", "/"),
            *("--die-with-parent", "--new-session", "--cap-drop", "ALL"),
            *("--clearenv", "--setenv", "HOME", WORKDIR, "--setenv", "TMPDIR", WORKDIR),
            *("--setenv", "LANG", "C.UTF-8", "--chdir", WORKDIR),
            "--",
            self.python,
            *argv,
        ]

    def popen_user(self) -> dict[str, object]:
        """Return the Popen arguments that drop a root worker to the sandbox uid."""
        if self.host_uid is None:
            return {}
        return {"user": self.host_uid, "group": self.host_uid, "extra_groups": []}


@dataclass(frozen=True)
class Probe:
    """The outcome of looking for a working sandbox: a jail, or why there is none."""

    jail: Jail | None
    detail: str


def interpreters() -> list[str]:
    """Return the interpreters a box may run, the worker's own base interpreter first."""
    # The harness needs only the standard library, so any Python 3 serves when the
    # worker's own lies where the sandbox uid cannot reach (a root worker's /root).
    own = getattr(sys, "_base_executable", sys.executable)
    candidates = [own, *_SYSTEM_PYTHONS]
    return list(dict.fromkeys(str(Path(c).resolve()) for c in candidates if os.path.exists(c)))


@lru_cache(maxsize=8)
def probe(bwrap: str = "bwrap", uid: int = 65534) -> Probe:
    """Find a working jail once per process: bwrap present, namespaces allowed."""
    binary = shutil.which(bwrap)
    if binary is None:
        return _none(f"bubblewrap not found ({bwrap!r})")
    host_uid = uid if os.geteuid() == 0 else None
    errors = []
    for python in interpreters():
        jail = _jail(binary, python, host_uid)
        error = _try(jail)
        if error is None:
            log.info("sandbox_ready bwrap=%s python=%s", binary, python)
            return Probe(jail, f"bubblewrap {binary}, python {python}")
        errors.append(f"{python}: {error}")
    return _none("bubblewrap does not work here: " + "; ".join(errors))


def _none(detail: str) -> Probe:
    # Said once per process (the probe is cached): code tests will not run.
    log.error("sandbox_unavailable detail=%r code_tests=not_evaluable", detail)
    return Probe(None, detail)


def _jail(bwrap: str, python: str, host_uid: int | None) -> Jail:
    paths = _python_paths(python)
    trees = [p for p in (paths.get("stdlib"), paths.get("platstdlib"), paths.get("libdir")) if p]
    binds = [d for d in _LIBRARY_DIRS if os.path.lexists(d)]
    for tree in sorted(trees, key=len):  # a parent first: what lies inside it comes along
        if not any(_inside(tree, b) for b in binds):
            binds.append(tree)
    if not any(_inside(python, b) for b in binds):
        binds.append(python)
    masks = [p for p in (paths.get("purelib"), paths.get("platlib")) if p and os.path.isdir(p)]
    masks += [d for d in ("/usr/lib/python3/dist-packages",) if os.path.isdir(d)]
    return Jail(bwrap, python, tuple(dict.fromkeys(binds)), tuple(dict.fromkeys(masks)), host_uid)


def _python_paths(python: str) -> dict[str, str]:
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", _PATHS], capture_output=True, timeout=30, check=True
        )
        paths: dict[str, str] = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return paths


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def _try(jail: Jail) -> str | None:
    argv = ("-I", "-S", "-c", "import socket; assert socket.if_nameindex() == [(1, 'lo')]")
    command = jail.command(work_bytes=1 << 20, argv=argv)
    try:
        done = subprocess.run(command, capture_output=True, timeout=30, **jail.popen_user())  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()[-300:] or f"exit {done.returncode}"
    return None
