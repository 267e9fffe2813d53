"""A demo stopped by SIGTERM (a service manager, a CI timeout, `kill`) stops its engines.

The engines run in their own sessions, so a terminal's signals never reach them; only the
demo's own clean-up stops them. Before, SIGTERM ended the demo without it, and each
stopped demo left two engine processes (about 1 GB each) serving on.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.waits import wait_until

READY = re.compile(r"engine \S+ \(\w+\) ready on (http://127\.0\.0\.1:(\d+)/v1)")


def _engine_pids(ports: list[str]) -> list[int]:
    """Return the pids of `specgate engine` processes serving on these ports."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in args]
        if "engine" in words and "--port" in words and words[words.index("--port") + 1] in ports:
            found.append(int(entry.name))
    return found


def _refused(url: str) -> bool:
    try:
        httpx.get(url + "/models", timeout=2)
    except httpx.ConnectError:
        return True
    except httpx.HTTPError:
        return False
    return False


def test_sigterm_stops_the_demos_engines(tmp_path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "gate", "demo", "--requests", "400"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "220"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(demo.stdout or []), daemon=True)
    reader.start()
    urls: list[tuple[str, str]] = []
    try:
        assert wait_until(lambda: any("replaying" in line for line in lines), 600), lines[-20:]
        urls = [m.groups() for line in lines if (m := READY.search(line))]
        assert len(urls) == 2, lines
        assert not any(_refused(url) for url, _ in urls)  # both serve while the demo runs
        demo.send_signal(signal.SIGTERM)
        demo.wait(120)
        assert wait_until(lambda: all(_refused(url) for url, _ in urls), 60), (
            "an engine still serves after the demo ended:\n" + "".join(lines[-20:])
        )
        ports = [port for _, port in urls]
        assert wait_until(lambda: not _engine_pids(ports), 30), _engine_pids(ports)
    finally:
        if demo.poll() is None:
            demo.kill()
        for pid in _engine_pids([p for _, p in urls]):  # never leave them behind
            os.kill(pid, signal.SIGKILL)
