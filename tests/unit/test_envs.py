"""The VLLM_BRIDGE_* variables: parsing, errors, documentation."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from vllm_bridge import envs
from vllm_bridge.errors import BridgeConfigError


@pytest.mark.parametrize(
    ("raw", "value"), [("1", True), ("Off", False), (" yes ", True)]
)
def test_booleans(monkeypatch, raw: str, value: bool):
    monkeypatch.setenv(envs.STRICT.name, raw)
    assert envs.STRICT.get() is value


def test_unset_and_empty_give_the_default(monkeypatch):
    monkeypatch.delenv(envs.DISABLE.name, raising=False)
    assert envs.DISABLE.get() is False
    monkeypatch.setenv(envs.DISABLE.name, "")
    assert envs.DISABLE.get() is False


def test_bad_boolean_names_variable_value_and_allowed(monkeypatch):
    monkeypatch.setenv(envs.DISABLE.name, "2")
    with pytest.raises(BridgeConfigError) as info:
        envs.DISABLE.get()
    message = str(info.value)
    assert "VLLM_BRIDGE_DISABLE='2' is invalid" in message
    assert "1/true/yes/on/0/false/no/off" in message


def test_patch_list_is_split_and_trimmed(monkeypatch):
    monkeypatch.setenv(envs.DISABLE_PATCHES.name, " a, b ,,c ")
    assert envs.DISABLE_PATCHES.get() == ("a", "b", "c")


def test_readme_settings_table_is_generated_from_envs():
    from vllm_bridge.tools import settings_docs

    readme = (REPO / "README.md").read_text()
    assert settings_docs.render() in readme, (
        "README.md's settings table is stale: paste `vllm-bridge settings`"
    )


def test_every_variable_says_what_is_allowed():
    for variable in envs.ALL:
        assert variable.allowed and variable.doc, variable.name
