"""Escape attempts against the task sandbox, each run through the real evaluator.

Every attempt must fail safely within the evaluation's deadline and leave nothing
behind: no process (processes it starts carry a unique token in their command line, so
the test can look for them among all the host's processes) and no file on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluators.base import EvalResult, GenerationView, NotEvaluable, RequestView
from evaluators.jail import probe
from evaluators.sandbox import Limits, SandboxConfig, configure
from evaluators.task import NOT_RUN, TaskEvaluator
from tests.waits import wait_until

LIMITS = Limits(timeout_s=4, memory_mb=256, work_mb=8, max_file_mb=4, max_processes=16)
SECRET = "sk-worker-secret-" + uuid.uuid4().hex
DB_PASSWORD = "db-pw-" + uuid.uuid4().hex
# The escape is the solution; this test only reports what the solution saw.
REPORT = "assert OK, REPORT"


def processes_with(token: str) -> list[int]:
    """Return the pids of host processes whose command line holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def evaluate(solution: str, **settings: object) -> EvalResult:
    """Run `solution` (the answer's code) and the reporting test through the evaluator."""
    answer = f"```python\n{textwrap.dedent(solution)}\n```"
    request = RequestView(inputs={"tests": {"cases": [REPORT], **settings}})
    return TaskEvaluator(LIMITS).evaluate(GenerationView("candidate", output=answer), request)


def report(result: EvalResult) -> str:
    execution = result.details["execution"]
    return str(execution["solution_error"] or execution["tests"][0]["error"])


def sleeper(token: str) -> str:
    """Python source for a command line that sleeps for ever and carries `token`."""
    return f"['/proc/self/exe', '-c', 'import time; time.sleep(10**6)  # {token}']"


def running(token: str) -> str:
    """Python source: wait (in the box) until a process carrying `token` runs; set OK."""
    return f"""
import os, time
def _alive():
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if "{token}" in open(f"/proc/{{pid}}/cmdline").read():
                return True
        except OSError:
            pass
    return False
_end = time.monotonic() + 5
while not _alive() and time.monotonic() < _end:
    time.sleep(0.02)
OK, REPORT = _alive(), "the escape never ran"
"""


@pytest.fixture
def token() -> Iterator[str]:
    """A unique marker; after the test no process carrying it may be left alive."""
    value = "escape-" + uuid.uuid4().hex
    yield value
    assert wait_until(lambda: not processes_with(value)), processes_with(value)


@pytest.fixture(autouse=True)
def worker_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give this process what a worker holds: a secret key and a database password."""
    monkeypatch.setenv("SPECGATE_SECRET_KEY", SECRET)
    monkeypatch.setenv("SPECGATE_DATABASE_URL", f"postgresql://app:{DB_PASSWORD}@127.0.0.1/x")
    # Nothing is scrubbed here: what must not leak has to be kept out, not hidden.
    configure(SandboxConfig())
    assert probe("bwrap", 65534).jail is not None, probe("bwrap", 65534).detail


def bomb(token: str) -> str:
    """Python source for a command line that forks for ever and carries `token`."""
    loop = "import os\\nwhile True:\\n    try:\\n        os.fork()\\n"
    loop += f"    except OSError:\\n        pass  # {token}"
    return f"['/proc/self/exe', '-c', '{loop}']"


def test_a_fork_bomb_is_bounded_by_the_process_limit_and_dies(token):
    code = f"""
    import os, sys, time
    os.posix_spawn(sys.executable, {bomb(token)}, {{}})
    count = lambda: sum(p.isdigit() for p in os.listdir("/proc"))
    most, end = count(), time.monotonic() + 2
    while most < {LIMITS.max_processes} and time.monotonic() < end:
        most = max(most, count())
    most = max(most, count())
    OK, REPORT = most <= {LIMITS.max_processes}, most
    """
    result = evaluate(code, timeout_s=20)
    assert result.passed, report(result)


def test_a_fork_bomb_is_killed_at_the_deadline(token):
    code = f"import os, sys\nos.execv(sys.executable, {bomb(token)})"
    result = evaluate(code, timeout_s=2)
    assert result.details["execution"]["status"] == "timeout" and result.passed is False


@pytest.mark.parametrize(
    "spawn",
    [
        # Python 3.11's layout: ..., restore_signals, call_setsid, process_group, ...
        "import _posixsubprocess\n"
        "_posixsubprocess.fork_exec(ARGV, [sys.executable.encode()], False, (), None, None,"
        " -1, -1, -1, -1, -1, -1, *os.pipe(), True, True, -1, None, None, -1, -1, None, False)",
        "os.posix_spawn(sys.executable, ARGV, {}, setsid=True)",
        "if os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, ARGV)",
    ],
    ids=["fork_exec", "posix_spawn", "fork_setsid"],
)
def test_processes_started_in_a_new_session_die_with_the_evaluation(token, spawn):
    code = f"import os, sys\nARGV = {sleeper(token)}\n{spawn}\n{running(token)}"
    result = evaluate(code)
    assert result.passed, result.details
    assert processes_with(token) == [] or wait_until(lambda: not processes_with(token))


def test_a_process_that_sleeps_for_ever_after_the_evaluation_is_gone(token):
    code = f"""
    import os, sys, time
    if os.fork() == 0:
        os.execv(sys.executable, {sleeper(token)})
    """
    result = evaluate(textwrap.dedent(code) + running(token))
    # Passed, not "timeout": the box ended with its harness and did not wait for the child.
    assert result.passed, report(result)


def test_nothing_outside_the_work_dir_can_be_written_and_host_tmp_is_untouched(token):
    marker = f"/tmp/{token}"
    code = f"""
    import os
    refused = []
    for path in ("/etc/{token}", "/usr/lib/{token}", "/{token}", "/proc/{token}",
                 "/dev/{token}", "/dev/shm/{token}", "{os.getcwd()}/{token}"):
        try:
            open(path, "w").write("x")
        except OSError:
            refused.append(path)
    open("{marker}", "w").write("inside")
    open("/dev/null", "w").write("devices still work")
    OK, REPORT = len(refused) == 7, refused
    """
    result = evaluate(code)
    assert result.passed, report(result)
    assert not Path(marker).exists()


def test_the_worker_processes_files_and_secrets_are_out_of_sight():
    # The box judges what it saw (the names and prefixes, never the values, are in
    # the code), and the stored result is checked for the values too.
    code = f"""
    import glob, os
    seen = []
    for path in glob.glob("/proc/*/environ") + ["/proc/self/mountinfo", "/proc/1/cmdline"]:
        try:
            seen.append(open(path, "rb").read().decode(errors="replace"))
        except OSError as exc:
            seen.append(repr(exc))
    text = "\\n".join(seen)
    leaks = [w for w in ("SPECGATE_", "sk-worker-secret-", "db-pw-") if w in text]
    present = [p for p in ("/etc/shadow", "/etc/passwd", "{os.getcwd()}", "/root", "/work")
               if os.path.exists(p)]
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    mounts = [line.split()[4] for line in seen[-2].splitlines()]
    hostly = [m for m in mounts if m.startswith(("/work", "/root", "/etc", "/home", "/var"))]
    read_own = "HOME=/tmp" in text
    OK = read_own and not (leaks or present or hostly) and pids[0] == 1 and len(pids) <= 3
    REPORT = (read_own, leaks, present, pids, hostly)
    """
    result = evaluate(code)
    assert result.passed, report(result)
    stored = json.dumps(result.details)
    assert SECRET not in stored and DB_PASSWORD not in stored


@pytest.mark.parametrize("port", [5432, 6379])
def test_no_tcp_to_the_hosts_services_and_only_a_loopback_of_its_own(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # the control: the service is there for the worker
    code = f"""
    import socket
    interfaces = socket.if_nameindex()
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
        reached = True
    except OSError:
        reached = False
    OK, REPORT = interfaces == [(1, "lo")] and not reached, (interfaces, reached)
    """
    result = evaluate(code)
    assert result.passed, report(result)


def test_memory_exhaustion_is_a_memory_error():
    code = "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))"
    result = evaluate(code)
    assert "MemoryError" in report(result) and result.passed is False


def test_disk_exhaustion_stops_at_the_work_dirs_size():
    code = """
    import errno, os
    written = 0
    try:
        for n in range(1000):
            with open(f"fill-{n}", "wb") as out:
                for _ in range(4):
                    out.write(b"x" * 1024 * 1024)
                    written += 1024 * 1024
    except OSError as exc:
        failure = exc.errno
    OK, REPORT = failure == errno.ENOSPC and written <= 8 * 1024 * 1024, (failure, written)
    """
    result = evaluate(code)
    assert result.passed, report(result)


WORKER = """
import sys
from evaluators.base import GenerationView, RequestView
from evaluators.sandbox import Limits
from evaluators.secrets import make_non_dumpable
from evaluators.task import TaskEvaluator

make_non_dumpable()
answer = "```python\\n" + sys.stdin.read() + "\\n```"
request = RequestView(inputs={"tests": {"cases": ["pass"], "timeout_s": 60}})
TaskEvaluator(Limits(timeout_s=60)).evaluate(GenerationView("candidate", output=answer), request)
"""


def test_no_sandbox_process_survives_a_sigkilled_worker(token):
    spawn = f"os.posix_spawn(sys.executable, {sleeper(token)}, {{}}, setsid=True)"
    code = f"import os, sys, time\n{spawn}\ntime.sleep(10**6)"
    # The code goes in on stdin: on the command line, the token would mark the worker too.
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, start_new_session=True
    )
    assert worker.stdin is not None
    worker.stdin.write(code.encode())
    worker.stdin.close()
    try:
        assert wait_until(lambda: bool(processes_with(token)), 60), "the sandbox never started"
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()


def escapes(token: str, marker: Path, port: int) -> list[str]:
    """Every attempt above, each also leaving a trace on the host if it ran at all."""
    trace = f"open({str(marker)!r}, 'a').write('ran')\n"
    trace += f"socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
    attempts = [
        f"os.posix_spawn(sys.executable, {bomb(token)}, {{}})",
        f"os.posix_spawn(sys.executable, {sleeper(token)}, {{}}, setsid=True)",
        f"open('/tmp/{token}', 'w').write('x')",
        "print([open(p, 'rb').read() for p in glob.glob('/proc/*/environ')])",
        "socket.create_connection(('127.0.0.1', 5432), timeout=2).close()",
        "hog = bytearray(2 * 1024 ** 3)",
        "open('fill', 'wb').write(b'x' * 100 * 1024 * 1024)",
    ]
    return [f"import glob, os, socket, sys\n{trace}{attempt}" for attempt in attempts]


@pytest.fixture
def fake_bwraps(tmp_path: Path) -> Iterator[list[SandboxConfig]]:
    """bwrap missing (a path, then not on PATH), and one that the kernel refuses."""
    # Where the sandbox uid can run it: a root worker starts bwrap as that uid.
    folder = Path(tempfile.mkdtemp(prefix="specgate-fake-bwrap-"))
    folder.chmod(0o755)
    refused = folder / "bwrap"
    refused.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
    )
    refused.chmod(0o755)
    missing = SandboxConfig(bwrap=str(tmp_path / "bwrap"))
    yield [missing, SandboxConfig(bwrap="bwrap"), SandboxConfig(bwrap=str(refused))]
    shutil.rmtree(folder)


def test_without_a_working_sandbox_nothing_runs_and_it_is_not_evaluable(
    token, tmp_path, monkeypatch, caplog, fake_bwraps
):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    marker = tmp_path / "ran"
    attempts = escapes(token, marker, listener.getsockname()[1])
    before = NOT_RUN._value.get()
    monkeypatch.setenv("PATH", str(tmp_path))  # bwrap is not on PATH
    for config in fake_bwraps:
        probe.cache_clear()
        configure(config)
        for code in attempts:
            result = evaluate(code)
            assert result.not_evaluable is NotEvaluable.NO_SANDBOX and result.passed is None
        assert result.details["sandbox"].startswith(("bubblewrap not found", "bubblewrap does"))
    probe.cache_clear()
    assert "No permissions to create a new namespace" in result.details["sandbox"]
    assert NOT_RUN._value.get() == before + len(fake_bwraps) * len(attempts)
    # Loud once per process and setting, not once per evaluation.
    assert sum("sandbox_unavailable" in r.getMessage() for r in caplog.records) == 3
    assert not marker.exists() and not Path(f"/tmp/{token}").exists()
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
