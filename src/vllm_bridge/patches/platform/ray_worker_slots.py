"""Join or start the Ray cluster with the CPU worker resource declared, and
say at once when the cluster lacks it."""

from __future__ import annotations

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.distributed.ray_cluster import with_worker_slots
from vllm_bridge.patching.spec import Patch

PATCH = Patch(
    name="ray-cpu-worker-slots",
    target="vllm.v1.executor.ray_executor_v2:initialize_ray_cluster",
    stage="platform",
    kind="wrap",
    new=with_worker_slots,
    why=(
        "vLLM places each Ray worker in a placement-group bundle of the "
        "platform's Ray resource (for the CPU: vllm_cpu_worker). Where no Ray "
        "cluster runs, vLLM's ray.init() starts one that declares no such "
        "resource; where the running cluster lacks it, vLLM waits for the "
        "placement group for up to 30 minutes, logging only the bundle specs."
    ),
    how=(
        "Before vLLM's cluster set-up: join the running cluster (RAY_ADDRESS "
        "or the local one) as vLLM would, else start a one-node cluster "
        "declaring one vllm_cpu_worker slot per physical core; then, unless "
        "the user gave a placement group, warn at once with the slot count "
        "and the `ray start --resources` fix when the cluster has fewer "
        "slots than workers (vLLM still waits: an autoscaler may add nodes)."
    ),
    upstream=(
        "https://github.com/vllm-project/vllm/issues/21602 (Ray on CPU; no "
        "upstream fix)"
    ),
    remove_when="vLLM's CPU platform supports the Ray executor",
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="a84eadf01fc19d4b",
)
