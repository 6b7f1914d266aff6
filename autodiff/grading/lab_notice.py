"""JupyterLab tells a student why their kernel died when it died for its memory.

On the course's hub each student's server and its kernels share a cgroup with a
memory limit (``classroom.hub``). Past it, Linux kills the biggest process, the kernel, and
JupyterLab says only that "the kernel appears to have died". The students' settings
(``classroom.hub_setup.write_student_settings``) make this class the server's kernel websocket
connection: it remembers the last cell sent to run, and when the kernel restarts
after the cgroup's count of such kills went up, it writes into that cell that the
notebook used more than the limit, before JupyterLab hears of the restart.
"""

from __future__ import annotations

import json
import struct

from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
)
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from . import oom

V1 = "v1.kernel.websocket.jupyter.org"  # the websocket protocol JupyterLab 4 speaks


def notice(limit: str) -> str:
    return (
        f"MemoryError: {oom.used_too_much(limit)} and started again, without your variables."
        " Run the cells again from the top, with smaller arrays, or del the ones you no"
        " longer need."
    )


class MemoryNotice(ZMQChannelsWebsocketConnection):
    """A kernel's websocket that says when the kernel was killed for its memory."""

    cgroup = oom.own_cgroup()  # the server's: its kernels are in it too
    _running: dict | None = None  # the header of the last cell sent to run
    _kills = 0  # the cgroup's count when it was sent

    def handle_incoming_message(self, incoming_msg) -> None:
        header = self._shell_header(incoming_msg)
        if header is not None and header.get("msg_type") == "execute_request":
            self._running, self._kills = header, oom.kills(self.cgroup)
        super().handle_incoming_message(incoming_msg)

    def on_kernel_restarted(self) -> None:
        kills, limit = oom.kills(self.cgroup), oom.limit(self.cgroup)
        if kills > self._kills and self._running is not None and limit is not None:
            self.write_stderr(notice(oom.in_words(limit)), self._running)
        self._kills = kills
        super().on_kernel_restarted()

    def _shell_header(self, message) -> dict | None:
        """The header of a message the browser sends on the shell channel (where cells
        are sent to run), in either websocket protocol; None for any other."""
        try:
            if self.subprotocol == V1:
                channel, parts = deserialize_msg_from_ws_v1(message)
                return self.session.unpack(parts[0]) if channel == "shell" else None
            if isinstance(message, bytes):
                decoded = deserialize_binary_message(message)
            else:
                decoded = json.loads(message)
            return decoded.get("header") if decoded.get("channel") == "shell" else None
        except (ValueError, KeyError, IndexError, TypeError, struct.error):
            return None  # not ours to judge: the server's own handling reports it
