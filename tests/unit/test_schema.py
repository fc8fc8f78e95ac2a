"""BridgeConfig from --additional-config and VLLM_BRIDGE_* variables: the
loader as a function for every bad input (each gets one error that names
it), and the real EngineArgs -> VllmConfig path once per way in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vllm.engine.arg_utils import EngineArgs

from vllm_bridge import envs
from vllm_bridge.config import rules, schema
from vllm_bridge.errors import BridgeConfigError

pytestmark = pytest.mark.usefixtures("restore_environ")


@pytest.fixture(autouse=True)
def no_bridge_env(monkeypatch: pytest.MonkeyPatch):
    for variable in envs.ALL:
        monkeypatch.delenv(variable.name, raising=False)
    monkeypatch.delenv(rules.KVCACHE_SPACE_ENV, raising=False)


def build(model: Path, additional_config: object = None):
    kwargs = (
        {} if additional_config is None else {"additional_config": additional_config}
    )
    return EngineArgs(model=str(model), **kwargs).create_engine_config()


def test_defaults_without_any_input():
    assert schema.load(None, {}) == schema.BridgeConfig()
    assert schema.load({}, {}).kv_cache_share == envs.KV_CACHE_SHARE.default


def test_additional_config_wins_over_environment():
    environ = {envs.KV_CACHE_SHARE.name: "0.2"}
    assert schema.load({"kv_cache_share": 0.3}, environ).kv_cache_share == 0.3
    assert schema.load({}, environ).kv_cache_share == 0.2


def test_kv_cache_share_sizes_the_kv_budget(tiny_model: Path, monkeypatch):
    from vllm_bridge.device import cpu

    # Fixed available memory (mocked: this machine's free memory moves), small
    # enough that the share, not max_num_seqs x max_model_len, decides.
    monkeypatch.setattr(cpu, "available_memory_bytes", lambda: 2**30)
    monkeypatch.setattr(rules, "_kv_bytes_per_token", lambda _: 1024)
    weights = rules._local_weights_bytes(build(tiny_model))
    config = build(tiny_model, {"kv_cache_share": 0.25})
    expected = int(0.25 * (2**30 - weights)) // rules.MiB * rules.MiB
    assert config.cache_config.kv_cache_memory_bytes == expected


# (additional_config, environment, fragments the one message must contain)
BAD_INPUTS = [
    (
        {"kv_cache_sahre": 0.3},
        {},
        ["unknown key 'kv_cache_sahre'", "did you mean 'kv_cache_share'"],
    ),
    (
        {"KV_CACHE_SHARE": 0.3},
        {},
        ["unknown key 'KV_CACHE_SHARE'", "Known keys: strict, compile_mode"],
    ),
    ({"strict": "yes"}, {}, ["'strict' = 'yes' is invalid", "true / false"]),
    ({"strict": 1}, {}, ["'strict' = 1 is invalid"]),
    ({"Strict": True}, {}, ["unknown key 'Strict'", "did you mean 'strict'"]),
    (
        {"compile_mode": "fast"},
        {},
        ["'compile_mode' = 'fast' is invalid", "auto, eager, compiled"],
    ),
    ({"compile_mode": "Eager"}, {}, ["'compile_mode' = 'Eager' is invalid"]),
    ({"compile_mode": None}, {}, ["'compile_mode' = None is invalid"]),
    (
        {"compile_mod": "eager"},
        {},
        ["unknown key 'compile_mod'", "did you mean 'compile_mode'"],
    ),
    (
        {"enforce_eager": True},
        {},
        ["unknown key 'enforce_eager'", "Known keys: strict, compile_mode"],
    ),
    (
        {"kv_cache_shar": 0.3},
        {},
        ["unknown key 'kv_cache_shar'", "did you mean 'kv_cache_share'"],
    ),
    ({"kvcache": 0.3}, {}, ["unknown key 'kvcache'", "kv_cache_share"]),
    ({"zzz": 1}, {}, ["unknown key 'zzz'", "Known keys:", "kv_cache_share"]),
    ({"kv_cache_share": None}, {}, ["'kv_cache_share' = None is invalid"]),
    ({"kv_cache_share": {"v": 1}}, {}, ["'kv_cache_share' = {'v': 1} is invalid"]),
    ({"kv_cache_share": "0.3"}, {}, ["'kv_cache_share' = '0.3' is invalid", "number"]),
    ({"kv_cache_share": 0}, {}, ["'kv_cache_share' = 0 is invalid", "(0, 0.9]"]),
    ({"kv_cache_share": -0.1}, {}, ["'kv_cache_share' = -0.1 is invalid"]),
    ({"kv_cache_share": 0.95}, {}, ["'kv_cache_share' = 0.95 is invalid", "0.9"]),
    ({"kv_cache_share": True}, {}, ["'kv_cache_share' = True is invalid"]),
    ({"kv_cache_share": [0.3]}, {}, ["'kv_cache_share' = [0.3] is invalid"]),
    ({"drain_timeout": -1}, {}, ["'drain_timeout' = -1 is invalid", "[0, 3600]"]),
    ({"drain_timeout": 2.5}, {}, ["'drain_timeout' = 2.5 is invalid"]),
    ({"drain_timeout": "30"}, {}, ["'drain_timeout' = '30' is invalid"]),
    ({"drain_timeout": 7200}, {}, ["'drain_timeout' = 7200 is invalid", "3600"]),
    (None, {"VLLM_BRIDGE_STRICT": "2"}, ["VLLM_BRIDGE_STRICT='2' is invalid"]),
    (None, {"VLLM_BRIDGE_STRICT": "enable"}, ["VLLM_BRIDGE_STRICT='enable'"]),
    (
        None,
        {"VLLM_BRIDGE_KV_CACHE_SHARE": "half"},
        ["VLLM_BRIDGE_KV_CACHE_SHARE='half' is invalid", "expected a number"],
    ),
    (
        None,
        {"VLLM_BRIDGE_KV_CACHE_SHARE": "2"},
        ["VLLM_BRIDGE_KV_CACHE_SHARE='2' is invalid", "a number in (0, 0.9]"],
    ),
    (
        None,
        {"VLLM_BRIDGE_KV_CACHE_SHARE": "0"},
        ["VLLM_BRIDGE_KV_CACHE_SHARE='0' is invalid"],
    ),
    (
        None,
        {"VLLM_BRIDGE_STRIKT": "1"},
        ["Unknown environment variable VLLM_BRIDGE_STRIKT", "VLLM_BRIDGE_STRICT?"],
    ),
    (
        None,
        {"VLLM_BRIDGE_KV_SHARE": "0.3"},
        ["VLLM_BRIDGE_KV_SHARE", "did you mean VLLM_BRIDGE_KV_CACHE_SHARE"],
    ),
    (None, {"VLLM_BRIDGE_": "1"}, ["Unknown environment variable VLLM_BRIDGE_"]),
    (
        None,
        {"VLLM_BRIDGE_DISABLE_PASSES": "int8-quant"},
        [
            "VLLM_BRIDGE_DISABLE_PASSES='int8-quant' is invalid",
            "unknown fusion pass(es) int8-quant",
            "known passes: int8-quant-inline, attention-direct, or all",
        ],
    ),
    (
        None,
        {"VLLM_BRIDGE_DISABLE": "maybe"},
        ["VLLM_BRIDGE_DISABLE='maybe' is invalid", "expected a boolean"],
    ),
    (
        None,
        {"VLLM_BRIDGE_COMPILE_MODE": "fast"},
        ["VLLM_BRIDGE_COMPILE_MODE='fast' is invalid", "auto, eager, compiled"],
    ),
    (
        {"compile_mode": "compiled"},
        {"VLLM_BRIDGE_COMPILE_MODE": "eager", "VLLM_BRIDGE_STRICT": "maybe"},
        ["VLLM_BRIDGE_STRICT='maybe' is invalid"],
    ),
    (
        None,
        {"VLLM_BRIDGE_DISABLE_PATCH": "all"},
        ["VLLM_BRIDGE_DISABLE_PATCH", "VLLM_BRIDGE_DISABLE_PATCHES"],
    ),
    (
        None,
        {"VLLM_BRIDGE_DRAIN_TIMEOUT": "30s"},
        ["VLLM_BRIDGE_DRAIN_TIMEOUT='30s' is invalid", "expected a whole number"],
    ),
    (
        None,
        {"VLLM_BRIDGE_DRAIN_TIMEOUT": "-5"},
        ["VLLM_BRIDGE_DRAIN_TIMEOUT='-5' is invalid", "[0, 3600]"],
    ),
    (
        None,
        {"VLLM_BRIDGE_ISA": "sse"},
        ["VLLM_BRIDGE_ISA='sse' is invalid", "auto, avx2, avx512, avx512_bf16, amx"],
    ),
    (
        None,
        {"VLLM_BRIDGE_LINEAR_KERNEL": "onednn"},
        ["VLLM_BRIDGE_LINEAR_KERNEL='onednn' is invalid", "auto, vllm, bridge"],
    ),
    (
        None,
        {"VLLM_BRIDGE_ATTENTION": "flash"},
        ["VLLM_BRIDGE_ATTENTION='flash' is invalid", "bridge, vllm"],
    ),
]


@pytest.mark.parametrize(("additional_config", "environ", "fragments"), BAD_INPUTS)
def test_bad_input_names_the_problem(additional_config, environ, fragments):
    with pytest.raises(BridgeConfigError) as info:
        schema.load(additional_config, environ)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("additional_config", "environ", "fragment"),
    [
        ({"kv_cache_shar": 0.3}, {}, "did you mean 'kv_cache_share'"),
        (None, {"VLLM_BRIDGE_STRICT": "2"}, "VLLM_BRIDGE_STRICT='2' is invalid"),
    ],
)
def test_bad_input_stops_the_config_build(
    tiny_model: Path, monkeypatch, additional_config, environ, fragment
):
    """The same errors through EngineArgs, as `vllm serve` and LLM() build."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(BridgeConfigError, match=re.escape(fragment)):
        build(tiny_model, additional_config)


class HashableSettings:
    """vLLM also accepts any object with compute_hash() as additional_config."""

    def compute_hash(self) -> str:
        return "settings"


def test_additional_config_that_is_not_a_mapping_is_refused(tiny_model: Path):
    with pytest.raises(BridgeConfigError) as info:
        build(tiny_model, HashableSettings())
    message = str(info.value)
    assert "--additional-config must be a JSON object" in message
    assert "HashableSettings" in message


def test_every_key_is_declared_with_its_variable():
    assert set(schema.ENV_FOR_KEY) == set(schema.KNOWN_KEYS)
    for key, variable in schema.ENV_FOR_KEY.items():
        field = schema.BridgeConfig.model_fields[key]
        assert field.default == variable.default, key
        assert field.description == variable.allowed, key
