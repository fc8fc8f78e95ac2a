"""A process tree that leaves a ZeroMQ IPC socket file behind the way vLLM's
processes do: the vLLM process (this one) applies the platform-stage
patches, a spawned child binds a socket at the address vLLM's
get_open_zmq_ipc_path gives and ends without closing it. Prints the
address. tests/unit/test_ipc_socket_directory.py runs it."""

from __future__ import annotations

import multiprocessing
import os

ADDRESS_PREFIX = "ADDRESS "


def bind_and_vanish(queue: multiprocessing.Queue) -> None:
    import zmq
    from vllm.utils.network_utils import get_open_zmq_ipc_path

    address = get_open_zmq_ipc_path()
    zmq.Context().socket(zmq.PULL).bind(address)
    queue.put(address)
    queue.close()
    queue.join_thread()
    os._exit(0)


if __name__ == "__main__":
    from vllm_bridge.patches.catalogue import REGISTRY

    REGISTRY.apply("platform")
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=bind_and_vanish, args=(queue,))
    child.start()
    print(ADDRESS_PREFIX + queue.get(timeout=60), flush=True)
    child.join(60)
