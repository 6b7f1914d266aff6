"""Jupyter servers in tests, started as people start them (``make lab``, ``jupyter
server``) on 127.0.0.1 with a free port, and stopped by the process group they were
started in, so that no kernel or extension process outlives its test."""

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    port: int,
    log: Path,
    seconds: float = 120,
    path: str = "/api/status",
    success_only: bool = False,
) -> Iterator[subprocess.Popen]:
    """Run ``command`` until the server on ``port`` answers ``path`` (any answer but a
    server error: 403 without a token is up; with ``success_only``, a 2xx); stop it
    afterwards. Fails with the end of ``log`` when the server exits or does not answer
    in time."""
    with log.open("w") as sink:
        server = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + seconds
        while not _answers(port, path, success_only):
            assert server.poll() is None, f"the server exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no answer in {seconds} s:\n{log.read_text()}"
            time.sleep(0.5)
        yield server
    finally:
        _stop(server)


def _answers(port: int, path: str, success_only: bool) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5):
            return True
    except urllib.error.HTTPError as error:  # 403 without a token: it is up
        return error.code < 500 and not success_only
    except OSError:
        return False


def _stop(server: subprocess.Popen) -> None:
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    except ProcessLookupError:
        pass
