"""Name the CPU communicator's shared-memory segment after the host's
shared-memory domain, so ranks on different hosts never take the
shared-memory path together."""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from collections.abc import Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
SHM_DIR = "/dev/shm"


def shared_memory_domain() -> str:
    """A short id that two processes share exactly when they can open each
    other's POSIX shared memory: the same running kernel (boot id) and the
    same /dev/shm mount (its device number; a container with its own
    /dev/shm gets its own). Where neither is readable, the host name."""
    try:
        with open(BOOT_ID_PATH) as boot_id_file:
            boot_id = boot_id_file.read().strip()
        shm_device = os.stat(SHM_DIR).st_dev
    except OSError:
        return socket.gethostname()
    return hashlib.sha256(f"{boot_id}:{shm_device}".encode()).hexdigest()[:12]


def with_host_domain(original: Callable[[Any], str]) -> Callable[[Any], str]:
    @functools.wraps(original)
    def make_group_name(communicator: Any) -> str:
        return f"{original(communicator)}-{shared_memory_domain()}"

    return make_group_name


PATCH = Patch(
    name="cpu-shm-host-aware-name",
    target=(
        "vllm.distributed.device_communicators.cpu_communicator:"
        "_CPUSHMDistributed.make_group_name"
    ),
    stage="worker",
    kind="wrap",
    new=with_host_domain,
    why=(
        "The CPU communicator's shared-memory all-reduce names its segment "
        "from VLLM_DIST_IDENT, the group's name and its ranks only. Under "
        "the Ray executor (and any launcher that gives every host the same "
        "rendezvous address) VLLM_DIST_IDENT is the same on every host, so "
        "the ranks' check that they agree on one segment name passes across "
        "hosts, each host creates its own segment of that name, and the "
        "ranks wait for peers that never write to it."
    ),
    how=(
        "The segment name gets a suffix that two processes share exactly "
        "when they share POSIX shared memory (a hash of the kernel's boot id "
        "and the device number of /dev/shm). Ranks on different hosts then "
        "disagree on the name, and vLLM's own check falls back to "
        "torch.distributed (gloo) for that group; ranks on one host keep "
        "the shared-memory path."
    ),
    upstream=(
        "https://github.com/vllm-project/vllm/pull/46716 (open), "
        "https://github.com/vllm-project/vllm/issues/33628"
    ),
    remove_when="vLLM's CPU shared-memory group name identifies the host",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="38a65e250390fe81",
)
