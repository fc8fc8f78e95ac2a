"""BridgeConfig: vllm-bridge's own settings, typed and strict.

Read from the top-level keys of vLLM's ``additional_config``
(``--additional-config '{...}'``), over the ``VLLM_BRIDGE_*`` environment
variables of ``envs.py``, over the defaults. Unknown keys and wrong types are
errors that name the input; nothing is coerced (``"0.3"`` is not a number).
"""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vllm_bridge import envs
from vllm_bridge.errors import BridgeConfigError

ADDITIONAL_CONFIG = "--additional-config"


class BridgeConfig(BaseModel):
    """The keys of ``--additional-config``; each is declared with its
    variable in envs.py (default, allowed values, meaning)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    strict: bool = Field(default=envs.STRICT.default, description=envs.STRICT.allowed)
    compile_mode: envs.CompileRequest = Field(
        default=envs.COMPILE_MODE.default, description=envs.COMPILE_MODE.allowed
    )
    kv_cache_share: float = Field(
        default=envs.KV_CACHE_SHARE.default,
        gt=envs.KV_CACHE_SHARE_RANGE[0],
        le=envs.KV_CACHE_SHARE_RANGE[1],
        description=envs.KV_CACHE_SHARE.allowed,
    )
    drain_timeout: int = Field(
        default=envs.DRAIN_TIMEOUT.default,
        ge=envs.DRAIN_TIMEOUT_RANGE[0],
        le=envs.DRAIN_TIMEOUT_RANGE[1],
        description=envs.DRAIN_TIMEOUT.allowed,
    )
    tpot_objective_ms: float | None = Field(
        default=envs.TPOT_OBJECTIVE_MS.default,
        gt=envs.TPOT_OBJECTIVE_MS_RANGE[0],
        le=envs.TPOT_OBJECTIVE_MS_RANGE[1],
        description=envs.TPOT_OBJECTIVE_MS.allowed,
    )


# Where each key's default comes from when --additional-config leaves it out.
ENV_FOR_KEY: dict[str, envs.EnvVar[object]] = {
    variable.key: variable for variable in envs.ALL if variable.key is not None
}
KNOWN_KEYS = tuple(BridgeConfig.model_fields)


def _did_you_mean(name: str, known: tuple[str, ...], cutoff: float, quote: bool) -> str:
    """``"; did you mean X?"`` for the closest of ``known``, else ``"."``.

    The long shared prefix of the variable names needs a higher cutoff than
    the short config keys to avoid suggesting an unrelated variable."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=cutoff)
    if not matches:
        return "."
    return (
        f"; did you mean {matches[0]!r}?" if quote else f"; did you mean {matches[0]}?"
    )


def _unknown_bridge_variables(environ: Mapping[str, str]) -> None:
    known = tuple(variable.name for variable in envs.ALL)
    for name in sorted(environ):
        if name.startswith(envs.PREFIX) and name not in known:
            raise BridgeConfigError(
                f"Unknown environment variable {name}"
                f"{_did_you_mean(name, known, cutoff=0.6, quote=False)} "
                f"vllm-bridge reads only: {', '.join(known)}."
            )


def check_environment(environ: Mapping[str, str]) -> None:
    """Every ``VLLM_BRIDGE_*`` variable known and valid, or the
    BridgeConfigError that names the first one that is not."""
    _unknown_bridge_variables(environ)
    for variable in envs.ALL:
        variable.get(environ)


def parse_additional_config(raw: str) -> dict[str, object]:
    """The ``--additional-config`` argument: a JSON object, or an argparse
    error that says what is wrong with it (vLLM's own parsing passes text
    that is not JSON on as a string, which then fails deep in VllmConfig)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc}): give a JSON object such as "
            "'{\"kv_cache_share\": 0.3}'"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"must be a JSON object of vllm-bridge keys ({', '.join(KNOWN_KEYS)}), "
            f"got {type(value).__name__} {value!r}"
        )
    return value


def use_strict_additional_config(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` (vLLM's CLI parser) read ``--additional-config``
    with ``parse_additional_config``."""
    for action in parser._actions:
        if ADDITIONAL_CONFIG in action.option_strings:
            action.type = parse_additional_config


def load(additional_config: object, environ: Mapping[str, str]) -> BridgeConfig:
    """The plugin config of one VllmConfig (its ``additional_config``).
    Every ``VLLM_BRIDGE_*`` variable is checked, also those read elsewhere."""
    check_environment(environ)
    if additional_config is None:
        additional_config = {}
    if not isinstance(additional_config, Mapping):
        raise BridgeConfigError(
            f"{ADDITIONAL_CONFIG} must be a JSON object of vllm-bridge keys "
            f"({', '.join(KNOWN_KEYS)}), got {type(additional_config).__name__} "
            f"{additional_config!r}."
        )
    for key in additional_config:
        if key not in KNOWN_KEYS:
            raise BridgeConfigError(
                f"{ADDITIONAL_CONFIG} has an unknown key {key!r}"
                f"{_did_you_mean(str(key), KNOWN_KEYS, cutoff=0.5, quote=True)} "
                f"Known keys: {', '.join(KNOWN_KEYS)}."
            )
    values: dict[str, object] = {}
    origin: dict[str, str] = {}
    for key, variable in ENV_FOR_KEY.items():
        if key in additional_config:
            values[key] = additional_config[key]
            origin[key] = f"{ADDITIONAL_CONFIG} key {key!r}"
        elif variable.is_set(environ):
            values[key] = variable.get(environ)
            origin[key] = variable.name
    try:
        return BridgeConfig(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0])
        description = BridgeConfig.model_fields[key].description
        raise BridgeConfigError(
            f"{origin[key]} = {values[key]!r} is invalid: {error['msg']}. "
            f"Allowed: {description}."
        ) from None
