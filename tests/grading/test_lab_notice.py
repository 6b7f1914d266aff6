"""A student's kernel killed for its memory: JupyterLab hears why, in the cell that ran.

A Jupyter server runs as the hub runs each student's (its kernel websocket is
``lab_notice.MemoryNotice``, from the students' settings) inside a cgroup of 384 MB.
A cell that takes more kills the kernel; before the websocket says "restarting", the
cell gets a stderr line naming the limit. A kernel that dies for another reason, and
a cell that fits, get no such line. Both websocket protocols are tried: JupyterLab 4
speaks v1, older clients JSON.
"""

import json
import os
import sys
import urllib.request

import pytest
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from servers import free_port, serving

from autodiff.grading import lab_notice
from classroom.sandbox import Cgroup, Limits

websocket = pytest.importorskip("websocket")
TOKEN = "test-token-for-the-memory-notice"
V1 = lab_notice.V1


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Jupyter server with the students' websocket class, in a cgroup of 384 MB."""
    if not Cgroup.available():
        pytest.skip("a memory cgroup is made only as root with cgroups writable")
    group = Cgroup.make(Limits(memory_mb=384, processes=64))
    assert group is not None
    folder = tmp_path_factory.mktemp("lab-notice")
    port = free_port()
    enter = (
        "import os, sys; from pathlib import Path\n"
        "for folder in sys.argv[1].split(':'): Path(folder, 'cgroup.procs').write_text('0')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'jupyter_server', *sys.argv[2:]])"
    )
    command = [
        sys.executable, "-c", enter, ":".join(str(f) for f in group.folders),
        "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
        f"--ServerApp.token={TOKEN}",
        "--ServerApp.kernel_websocket_connection_class="
        "autodiff.grading.lab_notice.MemoryNotice",
    ]  # fmt: skip
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(folder / "runtime"))
    try:
        with serving(command, folder, env, port, folder / "server.log"):
            yield port
    finally:
        group.kill()
        group.remove()


def start_kernel(port: int) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/kernels",
        data=b'{"name": "python3"}',
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)["id"]


def run_cell(port: int, kernel: str, protocol: str, code: str) -> tuple[str, list[dict]]:
    """Send ``code`` to run as JupyterLab does, over the websocket in ``protocol``
    ("" for JSON); return the request's msg_id and the iopub messages that came
    until the kernel went idle after it, or said it was restarting."""
    address = f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels?token={TOKEN}"
    connection = websocket.create_connection(
        address, timeout=120, subprotocols=[protocol] if protocol else None
    )
    try:
        request = Session().msg(
            "execute_request",
            {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
        )
        pack = lambda part: json.dumps(part, default=str).encode()  # noqa: E731
        if protocol == V1:
            connection.send_binary(serialize_msg_to_ws_v1(request, "shell", pack))
        else:
            connection.send(json.dumps({**request, "channel": "shell"}, default=str))
        came = []
        while True:
            message = _read(connection.recv(), protocol)
            if message["channel"] != "iopub":
                continue
            came.append(message)
            state = message["content"].get("execution_state")
            mine = message["parent_header"].get("msg_id") == request["header"]["msg_id"]
            if state == "restarting" or (state == "idle" and mine):
                return request["header"]["msg_id"], came
    finally:
        connection.close()


def _read(raw, protocol: str) -> dict:
    if protocol == V1:
        channel, parts = deserialize_msg_from_ws_v1(raw)
        header, parent, _, content = (json.loads(part) for part in parts[:4])
        return {"channel": channel, "header": header, "parent_header": parent, "content": content}
    message = json.loads(raw)
    return {**message, "channel": message.get("channel")}


def notices(came: list[dict], msg_id: str) -> list[str]:
    return [
        message["content"]["text"]
        for message in came
        if message["header"]["msg_type"] == "stream"
        and message["content"].get("name") == "stderr"
        and message["parent_header"].get("msg_id") == msg_id
        and "memory" in message["content"]["text"]
    ]


@pytest.mark.parametrize("protocol", [V1, ""], ids=["v1", "json"])
def test_a_cell_past_the_memory_limit_is_told_why_its_kernel_died(server, protocol):
    kernel = start_kernel(server)
    msg_id, came = run_cell(server, kernel, protocol, "small = b'x' * 2**20; print('fits')")
    printed = [m["content"]["text"] for m in came if m["header"]["msg_type"] == "stream"]
    assert printed == ["fits\n"], f"a cell that fits printed {printed}"
    assert notices(came, msg_id) == []

    msg_id, came = run_cell(server, kernel, protocol, "hog = b'x' * (600 * 2**20)")
    told = notices(came, msg_id)
    assert len(told) == 1, f"the cell got {told} (iopub: {[m['header'] for m in came]})"
    assert "the notebook used more than 384 MB of memory, the limit" in told[0], told[0]
    states = [m["content"].get("execution_state") for m in came]
    assert states[-1] == "restarting", f"the last status was {states[-1]}, not restarting"
    kinds = [m["header"]["msg_type"] for m in came]
    assert kinds.index("stream") < len(kinds) - 1, "the notice came after the restart"


def test_a_kernel_that_dies_for_another_reason_gets_no_memory_notice(server):
    kernel = start_kernel(server)
    msg_id, came = run_cell(server, kernel, V1, "import os; os._exit(1)")
    assert came[-1]["content"].get("execution_state") == "restarting"
    assert notices(came, msg_id) == [], "a kernel that exited was said to run out of memory"
