"""`make lab` as a student or an instructor starts it: the server, and the formgrader
answering on the first open of a fresh course, with a complete gradebook."""

import json
import os
import sqlite3
import urllib.request
from pathlib import Path

import pytest
from servers import free_port, serving

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-for-the-lab"


def get(port: int, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"token {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture
def lab(tmp_path):
    """`make lab` on a free port of 127.0.0.1, with the gradebook in tmp_path; stopped
    by the process group it was started in."""
    port = free_port()
    env = dict(os.environ, NBGRADER_DB_URL=f"sqlite:///{tmp_path / 'gradebook.db'}")
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    args = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.token={TOKEN}"
    command = ["make", "lab", f"LAB_ARGS={args}"]
    with serving(command, ROOT, env, port, tmp_path / "lab.log"):
        yield port, tmp_path


def test_formgrader_answers_on_the_first_open(lab):
    port, folder = lab
    status, body = get(port, "/formgrader/api/assignments")
    assert status == 200, body[-2000:]
    names = {assignment["name"] for assignment in json.loads(body)}
    assert {"a1_numerical_symbolic", "a5_memory"} <= names
    with sqlite3.connect(folder / "gradebook.db") as gradebook:
        tables = {row[0] for row in gradebook.execute("select name from sqlite_master")}
    assert "alembic_version" in tables  # the gradebook nbgrader made is complete
    assert "FileNotFoundError" not in (folder / "lab.log").read_text()
