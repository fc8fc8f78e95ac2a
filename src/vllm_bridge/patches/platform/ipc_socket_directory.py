"""Give each vLLM process tree a directory of its own for vLLM's ZeroMQ IPC
sockets, removed when the process that made it exits."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

BASE_PATH_ENV = "VLLM_RPC_BASE_PATH"
PREFIX = "vb-ipc-"
# A Unix socket path holds at most 107 bytes; vLLM appends "/<uuid4>".
SOCKET_PATH_MAX = 107
NAME_LENGTH = 1 + 36

_made: dict[str, int] = {}
"""Directory -> the pid of the process that made it (forked children
inherit atexit handlers; only the maker removes)."""


def _remove(directory: str, maker: int) -> None:
    if os.getpid() == maker:
        shutil.rmtree(directory, ignore_errors=True)


def install() -> None:
    """Point VLLM_RPC_BASE_PATH at a fresh directory, unless it is set (by
    the user, or by the parent process that made one for its children)."""
    if os.environ.get(BASE_PATH_ENV):
        return
    directory = tempfile.mkdtemp(prefix=PREFIX)
    if len(directory.encode()) + NAME_LENGTH > SOCKET_PATH_MAX:
        # The temporary directory's path is too long for sockets in a
        # directory below it: vLLM's default is left as it is.
        os.rmdir(directory)
        return
    os.environ[BASE_PATH_ENV] = directory
    _made[directory] = os.getpid()
    atexit.register(_remove, directory, os.getpid())


def uninstall() -> None:
    for directory, maker in list(_made.items()):
        if os.environ.get(BASE_PATH_ENV) == directory:
            del os.environ[BASE_PATH_ENV]
        atexit.unregister(_remove)
        _remove(directory, maker)
        del _made[directory]


PATCH = Patch(
    name="ipc-socket-directory",
    target="vllm.envs:VLLM_RPC_BASE_PATH",
    stage="platform",
    kind="hook",
    new=install,
    undo=uninstall,
    why=(
        "vLLM binds its ZeroMQ IPC sockets (engine handshake, input and "
        "output queues, the shared-memory broadcast queues of the workers) "
        "at ipc://$VLLM_RPC_BASE_PATH/<uuid>, by default in the temporary "
        "directory, and several are never unlinked: 9 socket files stayed in "
        "/tmp after each PP=2 LLM(...) script, 72 after one run of this "
        "project's test suite, over 2000 on this machine after a few days."
    ),
    how=(
        "Where VLLM_RPC_BASE_PATH is unset, the first vLLM process "
        "(API server or LLM(...) script) sets it to a new directory "
        "(tempfile.mkdtemp, prefix vb-ipc-) that its engine core and "
        "workers inherit, and removes the directory with whatever is left in "
        "it when it exits. A VLLM_RPC_BASE_PATH you set is kept, and so is "
        "vLLM's default where the temporary directory's path is too long "
        "for a socket path (107 bytes) one level deeper."
    ),
    upstream=(
        "vllm-project/vllm#11115 (cleanup of IPC sockets at exit, 2024) "
        "covers only some of the sockets 0.32 creates; not reported yet"
    ),
    remove_when="vLLM unlinks every IPC socket file it binds",
    vllm_versions=SUPPORTED_VLLM,
)
