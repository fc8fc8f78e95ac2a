"""Whether vllm-bridge is the platform of this process, decided once.

vLLM calls the platform entry point twice per process and swallows its
exceptions at debug level, silently falling back to a built-in platform. We
decide once, report any failure as an ERROR that names the cause, and only
then let vLLM fall back.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution

from vllm_bridge import envs
from vllm_bridge.compat import VLLM_DISTRIBUTION
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.log import get_logger
from vllm_bridge.startup import bridge_disabled

PLATFORM_MODULE = "vllm_bridge.platform"
PLATFORM_QUALNAME = f"{PLATFORM_MODULE}.BridgePlatform"

logger = get_logger("activation")


def cpu_build_installed() -> bool:
    try:
        distribution(VLLM_DISTRIBUTION)
    except PackageNotFoundError:
        return False
    return True


@cache
def platform_qualname() -> str | None:
    try:
        if bridge_disabled():
            logger.info("vllm-bridge is disabled by %s.", envs.DISABLE.name)
            return None
        if not cpu_build_installed():
            logger.info(
                "vllm-bridge stays inactive: the %s distribution is not installed.",
                VLLM_DISTRIBUTION,
            )
            return None
        importlib.import_module(PLATFORM_MODULE)
    except BridgeConfigError as exc:
        logger.error("vllm-bridge could not activate: %s", exc)
        return None
    except Exception as exc:
        logger.error(
            "vllm-bridge could not activate: %s: %s. vLLM falls back to its "
            "built-in platform.",
            type(exc).__name__,
            exc,
            exc_info=True,
        )
        return None
    logger.info("vllm-bridge platform active in process %d.", os.getpid())
    return PLATFORM_QUALNAME


def on_general_plugins() -> None:
    """Apply the platform-stage patches in processes where we are active,
    then check every VLLM_BRIDGE_* variable: each vLLM command that loads
    plugins (serve, bench, LLM(...)) stops on a bad one with its one line
    (the config-error-exit patch is in place by then). Last, add
    vllm-bridge's quantization methods (vLLM builds its parser after this)."""
    if platform_qualname() is None:
        return
    from vllm_bridge.config.schema import check_environment
    from vllm_bridge.quantization import register as register_quantization

    apply_platform_stage()
    check_environment(os.environ)
    register_quantization()


def apply_platform_stage() -> None:
    """The startup- and platform-stage patches of this process (idempotent),
    with their own bad settings reported as one line.

    The registry reads VLLM_BRIDGE_DISABLE_PATCHES and VLLM_BRIDGE_STRICT
    before it applies anything, the one-line report (config-error-exit)
    included; the first call comes while vLLM imports its kernels, before
    any plugin hook, so an unreadable value would end the command in a
    traceback through vLLM's imports."""
    from vllm_bridge.patches.catalogue import REGISTRY

    try:
        REGISTRY.apply("startup")
        REGISTRY.apply("platform")
    except BridgeConfigError:
        from vllm_bridge.patches.platform import config_error_exit

        config_error_exit.install()
        raise
