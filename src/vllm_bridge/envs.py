"""Every ``VLLM_BRIDGE_*`` environment variable: name, type, default, doc.

Standard library only: the interpreter-start stage reads this module too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, get_args

from vllm_bridge.errors import BridgeConfigError

T = TypeVar("T")
CompileRequest = Literal["auto", "eager", "compiled"]

PREFIX = "VLLM_BRIDGE_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    allowed = "/".join(_TRUE + _FALSE)
    raise ValueError(f"expected a boolean ({allowed})")


def parse_name_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def parse_float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError("expected a number") from None


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value

    return parse


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    name: str
    parse: Callable[[str], T]
    default: T
    doc: str

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return (os.environ if environ is None else environ).get(
            self.name, ""
        ).strip() != ""

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        raw = (os.environ if environ is None else environ).get(self.name, "")
        if raw.strip() == "":
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise BridgeConfigError(
                f"{self.name}={raw!r} is invalid: {exc}. "
                f"Fix or unset {self.name} ({self.doc})"
            ) from None


DISABLE = EnvVar(
    "VLLM_BRIDGE_DISABLE",
    parse_bool,
    False,
    "true turns the plugin off: vLLM uses its built-in CPU platform",
)
DISABLE_PATCHES = EnvVar(
    "VLLM_BRIDGE_DISABLE_PATCHES",
    parse_name_list,
    (),
    "comma-separated patch names to leave unapplied, or 'all'",
)
STRICT = EnvVar(
    "VLLM_BRIDGE_STRICT",
    parse_bool,
    False,
    "true refuses to start when a rule would override an explicit user "
    "setting or a patch no longer matches the installed vLLM",
)
COMPILE_MODE = EnvVar(
    "VLLM_BRIDGE_COMPILE_MODE",
    parse_choice(*get_args(CompileRequest)),
    "auto",
    "auto keeps vLLM's choice (compiled unless eager is configured or LoRA is "
    "on); eager never compiles; compiled refuses to start when the model "
    "would run eagerly",
)

KV_CACHE_SHARE = EnvVar(
    "VLLM_BRIDGE_KV_CACHE_SHARE",
    parse_float,
    0.5,
    "share of the memory left after the weights that the KV cache may take "
    "when no KV size is given, in (0, 0.9]",
)

ALL: tuple[EnvVar[object], ...] = (  # type: ignore[assignment]
    DISABLE,
    DISABLE_PATCHES,
    STRICT,
    COMPILE_MODE,
    KV_CACHE_SHARE,
)
