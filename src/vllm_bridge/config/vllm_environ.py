"""vLLM's check of the ``VLLM_*`` environment variables, without
vllm-bridge's own ``VLLM_BRIDGE_*`` ones (which config/schema.py checks,
with the allowed values and a did-you-mean)."""

from __future__ import annotations

from collections.abc import Mapping

from vllm_bridge import envs
from vllm_bridge.log import get_logger

VLLM_PREFIX = "VLLM_"
READ_OUTSIDE_VLLM_ENVS = frozenset({"VLLM_CPU_SIM_MULTI_NUMA", "VLLM_DIST_IDENT"})
"""CPU-path variables vLLM 0.32 reads straight from ``os.environ``
(``utils/ompmultiprocessing.py``, ``cpu_communicator.py``) and so does not
list in ``vllm.envs``: its own check calls them unknown."""
logger = get_logger("config")


def unknown_vllm_variables(environ: Mapping[str, str]) -> list[str]:
    """``VLLM_*`` variables that neither vLLM nor vllm-bridge defines."""
    import vllm.envs

    return sorted(
        name
        for name in environ
        if name.startswith(VLLM_PREFIX)
        and not name.startswith(envs.PREFIX)
        and name not in vllm.envs.environment_variables
        and name not in READ_OUTSIDE_VLLM_ENVS
    )


def validate_vllm_environ(environ: Mapping[str, str], hard_fail: bool) -> None:
    """What vLLM's ``Platform.validate_environ`` does (a warning per unknown
    variable, or ValueError under ``--fail-on-environ-validation``), for the
    variables that are vLLM's to know."""
    for name in unknown_vllm_variables(environ):
        if hard_fail:
            raise ValueError(f"Unknown vLLM environment variable detected: {name}")
        logger.warning("Unknown vLLM environment variable detected: %s", name)
