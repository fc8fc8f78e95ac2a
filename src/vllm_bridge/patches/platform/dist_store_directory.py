"""Put the file behind the workers' torch.distributed store in the process
tree's runtime directory (where patch ipc-socket-directory puts vLLM's
sockets), so that an engine that is killed leaves nothing in the temporary
directory."""

from __future__ import annotations

import os
import tempfile
import uuid

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patches.platform.ipc_socket_directory import BASE_PATH_ENV
from vllm_bridge.patching.spec import Patch


def file_store_init_method() -> str:
    """vLLM's rendezvous address, in VLLM_RPC_BASE_PATH where it is set."""
    directory = os.environ.get(BASE_PATH_ENV) or tempfile.gettempdir()
    return f"file://{directory}/vllm_dist_{uuid.uuid4().hex}"


PATCH = Patch(
    name="dist-store-directory",
    target="vllm.v1.executor.multiproc_executor:get_file_store_init_method",
    stage="platform",
    kind="replace",
    new=file_store_init_method,
    why=(
        "vLLM's multiprocessing executor makes its workers meet through a "
        "torch.distributed FileStore at <temporary directory>/vllm_dist_<uuid>. "
        "The store deletes the file when the last process using it closes it "
        "cleanly; when a worker or the engine core is killed (the OOM "
        "killer, a crash) the file stays: one per killed engine, two per run "
        "of this project's test suite, 47 in /tmp on the development machine "
        "after a day of test runs."
    ),
    how=(
        "The file goes to VLLM_RPC_BASE_PATH, the directory that patch "
        "ipc-socket-directory makes for each process tree and removes when "
        "the process that made it (API server or LLM script) exits, whatever "
        "happened to its engine core and workers. Where "
        "that patch is off and VLLM_RPC_BASE_PATH unset, the temporary "
        "directory as before."
    ),
    upstream=(
        "https://github.com/vllm-project/vllm/pull/41983 (the file:// "
        "rendezvous that replaced a racy TCP port); the file left by an "
        "unclean exit is not reported yet"
    ),
    remove_when="vLLM removes the file store's file once its workers have met",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="6a04655c2944a18c",
)
