"""One rank of a two-rank CPU communicator group, as a TP group's rank in a
worker builds it: ``python shm_rank.py RANK PORT``. Prints whether the
group took the shared-memory path and the result of one all-reduce.

Both ranks get the same VLLM_DIST_IDENT, as every host does under the Ray
executor (its rendezvous is one TCP address)."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    import torch
    import torch.distributed as dist

    # Loads torch.ops._C (the shared-memory kernels), as a worker does.
    import vllm._custom_ops  # noqa: F401
    from vllm.distributed.device_communicators import cpu_communicator

    from vllm_bridge.patches.catalogue import REGISTRY

    REGISTRY.apply("worker")
    os.environ["VLLM_DIST_IDENT"] = "same-on-every-host"
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    group = dist.group.WORLD
    communicator = cpu_communicator.CpuCommunicator(
        group, torch.device("cpu"), group, unique_name="tp:0"
    )
    values = torch.full((4,), float(rank + 1))
    communicator.all_reduce(values)
    shared_memory = isinstance(
        communicator.dist_module, cpu_communicator._CPUSHMDistributed
    )
    kernels = hasattr(torch.ops._C, "init_shm_manager")
    print(
        json.dumps(
            {
                "shared_memory": shared_memory,
                "shared_memory_kernels": kernels,
                "sum": values.tolist(),
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
