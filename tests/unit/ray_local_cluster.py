"""Run vLLM's own Ray cluster set-up for two CPU workers where no Ray cluster
runs, as the engine core does, and print the worker slots the cluster
declares and the placement group vLLM got (for test_ray_cluster.py)."""

import json

if __name__ == "__main__":
    import ray
    from vllm.config import ParallelConfig
    from vllm.plugins import load_general_plugins
    from vllm.v1.executor import ray_executor_v2

    from vllm_bridge.distributed.ray_cluster import WORKER_RESOURCE

    load_general_plugins()  # as in the engine core: the platform stage
    parallel = ParallelConfig(
        tensor_parallel_size=2, distributed_executor_backend="ray"
    )
    ray_executor_v2.initialize_ray_cluster(parallel, require_gpu_on_driver=False)
    print(
        json.dumps(
            {
                "slots": ray.cluster_resources().get(WORKER_RESOURCE, 0),
                "bundles": parallel.placement_group.bundle_specs,
            }
        )
    )
    ray.shutdown()
