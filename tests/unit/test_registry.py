"""The patch registry on a small synthetic module: every behaviour without
touching vLLM."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.patching import registry as registry_module
from vllm_bridge.patching.registry import PatchError, Registry
from vllm_bridge.patching.spec import Patch, source_fingerprint

MODULE = "vllm_bridge_test_target"


def _greet(name: str) -> str:
    return f"hello {name}"


class _Widget:
    size = 1

    def area(self) -> int:
        return self.size * self.size

    @classmethod
    def make(cls) -> _Widget:
        return cls()

    @staticmethod
    def unit() -> str:
        return "cm"

    @property
    def label(self) -> str:
        return f"widget {self.size}"


class _Gadget(_Widget):
    pass


@pytest.fixture
def target() -> Iterator[types.ModuleType]:
    module = types.ModuleType(MODULE)
    module.greet = _greet
    module.Widget = _Widget
    module.Gadget = _Gadget
    sys.modules[MODULE] = module
    yield module
    del sys.modules[MODULE]


def make(name: str, attribute: str, **overrides) -> Patch:
    fields = dict(
        name=name,
        target=f"{MODULE}:{attribute}",
        stage="platform",
        kind="replace",
        new=lambda *a: "patched",
        why="test",
        how="test",
        upstream="https://example.invalid/pr/1",
        remove_when="never",
        vllm_versions=">=0.32,<0.33",
    )
    fields.update(overrides)
    return Patch(**fields)


def test_replace_and_revert_restore_identity(target):
    registry = Registry()
    registry.register(make("p", "greet"))
    original = target.greet
    registry.apply("platform")
    assert target.greet("x") == "patched"
    registry.revert("p")
    assert target.greet is original
    assert registry.records()["p"].status == "reverted"


def test_wrap_receives_the_original(target):
    registry = Registry()
    registry.register(
        make("p", "greet", kind="wrap", new=lambda orig: lambda n: orig(n).upper())
    )
    registry.apply("platform")
    assert target.greet("bob") == "HELLO BOB"


def test_wrap_keeps_classmethod_and_staticmethod(target):
    registry = Registry()
    registry.register(make("cm", "Widget.make", kind="wrap", new=lambda orig: orig))
    registry.register(
        make("sm", "Widget.unit", kind="wrap", new=lambda orig: lambda: orig() + "!")
    )
    registry.apply("platform")
    assert isinstance(vars(target.Widget)["make"], classmethod)
    assert isinstance(target.Widget.make(), target.Widget)
    assert isinstance(vars(target.Widget)["unit"], staticmethod)
    assert target.Widget.unit() == "cm!"
    registry.revert("cm")
    registry.revert("sm")
    assert vars(target.Widget)["make"] is vars(_Widget)["make"]


def test_wrap_property(target):
    registry = Registry()
    registry.register(
        make(
            "prop",
            "Widget.label",
            kind="wrap",
            new=lambda orig: property(lambda self: orig.fget(self) + "!"),
        )
    )
    original = vars(target.Widget)["label"]
    registry.apply("platform")
    assert target.Widget().label == "widget 1!"
    registry.revert("prop")
    assert vars(target.Widget)["label"] is original


def test_patch_of_inherited_attribute_reverts_by_deleting(target):
    registry = Registry()
    registry.register(make("p", "Gadget.area", new=lambda self: 99))
    registry.apply("platform")
    assert target.Gadget().area() == 99
    assert target.Widget().area() == 1
    registry.revert("p")
    assert "area" not in vars(target.Gadget)
    assert target.Gadget().area() == 1


def test_apply_is_idempotent(target):
    calls = []
    registry = Registry()
    registry.register(
        make("p", "greet", kind="wrap", new=lambda orig: calls.append(1) or orig)
    )
    registry.apply("platform")
    registry.apply("platform")
    assert calls == [1]


def test_only_the_requested_stage_is_applied(target):
    registry = Registry()
    registry.register(make("w", "greet", stage="worker"))
    assert registry.apply("platform") == []
    assert target.greet("x") == "hello x"


def test_same_target_twice_is_refused(target):
    registry = Registry()
    registry.register(make("a", "greet"))
    with pytest.raises(ValueError, match="already patched by a"):
        registry.register(make("b", "greet"))


def test_same_name_twice_is_refused(target):
    registry = Registry()
    registry.register(make("a", "greet"))
    with pytest.raises(ValueError, match="declared twice"):
        registry.register(make("a", "Widget.area"))


def test_missing_required_target_names_patch_target_and_upstream(target):
    registry = Registry()
    registry.register(make("gone", "no_such_function"))
    with pytest.raises(PatchError) as info:
        registry.apply("platform")
    message = str(info.value)
    assert "gone" in message
    assert f"{MODULE}:no_such_function" in message
    assert "https://example.invalid/pr/1" in message
    assert registry.records()["gone"].status == "failed"


def test_missing_optional_target_is_skipped(target):
    registry = Registry()
    registry.register(make("gone", "no_such_function", required=False))
    registry.apply("platform")
    assert registry.records()["gone"].status == "skipped"


def test_version_out_of_range_warns_and_applies(target, caplog):
    registry = Registry()
    registry.register(make("old", "greet", vllm_versions="<0.1"))
    registry.apply("platform")
    assert registry.records()["old"].status == "applied"
    assert "outside the patch's range <0.1" in caplog.text


def test_fingerprint_drift_warns(target, caplog):
    registry = Registry()
    registry.register(make("drift", "greet", fingerprint="0" * 16))
    registry.apply("platform")
    assert "target source changed" in caplog.text


def test_problems_are_typed(target):
    registry = Registry()
    drift = registry.register(
        make("drift", "greet", fingerprint="0" * 16, vllm_versions="<0.1")
    )
    gone = registry.register(make("gone", "no_such_function"))
    assert [p.kind for p in registry.problems(drift)] == [
        "version_range",
        "fingerprint",
    ]
    assert [p.kind for p in registry.problems(gone)] == ["target_missing"]


def test_patch_not_needed_here_is_inactive_and_unapplied(target):
    registry = Registry([make("idle", "greet", active_when=lambda: False)])
    original = target.greet
    registry.apply("platform")
    assert registry.records()["idle"].status == "inactive"
    assert target.greet is original


def test_patch_needed_here_is_applied(target):
    registry = Registry([make("busy", "greet", active_when=lambda: True)])
    registry.apply("platform")
    assert registry.records()["busy"].status == "applied"
    assert target.greet("x") == "patched"


def test_matching_fingerprint_is_no_problem(target):
    registry = Registry()
    patch = registry.register(
        make("ok", "greet", fingerprint=source_fingerprint(_greet))
    )
    assert registry.problems(patch) == []


def test_strict_mode_refuses_drift(target, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "1")
    registry = Registry()
    registry.register(make("drift", "greet", fingerprint="0" * 16))
    with pytest.raises(PatchError, match=r"drift.*target source changed"):
        registry.apply("platform")
    assert target.greet("x") == "hello x"


def test_disable_switch(target, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_DISABLE_PATCHES", "p")
    registry = Registry()
    registry.register(make("p", "greet"))
    registry.apply("platform")
    assert target.greet("x") == "hello x"
    assert registry.records()["p"].status == "disabled"


def test_disable_all(target, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_DISABLE_PATCHES", "all")
    registry = Registry()
    registry.register(make("p", "greet"))
    registry.apply("platform")
    assert registry.records()["p"].status == "disabled"


def test_unknown_disable_name_lists_known_names(target, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_DISABLE_PATCHES", "nope")
    registry = Registry()
    registry.register(make("p", "greet"))
    with pytest.raises(
        BridgeConfigError, match=r"unknown patch.*nope.*known patches: p"
    ):
        registry.apply("platform")


def test_bad_strict_value_names_the_variable(target, monkeypatch):
    monkeypatch.setenv("VLLM_BRIDGE_STRICT", "sometimes")
    registry = Registry()
    registry.register(make("p", "greet"))
    with pytest.raises(BridgeConfigError, match="VLLM_BRIDGE_STRICT='sometimes'"):
        registry.apply("platform")


def test_reverted_context_reapplies(target):
    registry = Registry()
    registry.register(make("p", "greet"))
    registry.apply("platform")
    with registry.reverted("p"):
        assert target.greet("x") == "hello x"
    assert target.greet("x") == "patched"
    assert registry.records()["p"].status == "applied"


def test_stage_applied_inside_a_reverted_block_leaves_the_patch_out(target):
    registry = Registry([make("p", "greet")])
    registry.apply("platform")
    with registry.reverted("p"):
        registry.apply("platform")  # as vLLM's hooks do while building a config
        assert target.greet("x") == "hello x"
    assert target.greet("x") == "patched"


def test_installed_vllm_version_is_the_pinned_one():
    assert str(registry_module.installed_vllm_version()) == "0.32.0"


def test_applied_patch_of_inherited_method_is_not_drift(target):
    registry = Registry()
    patch = registry.register(
        make(
            "p",
            "Gadget.area",
            kind="wrap",
            new=lambda orig: lambda self: orig(self) + 1,
            fingerprint=source_fingerprint(_Widget.area),
        )
    )
    registry.apply("platform")
    assert target.Gadget().area() == 2
    assert registry.problems(patch) == []


def test_patch_of_unimported_module_waits_for_its_import(tmp_path, monkeypatch):
    name = "vllm_bridge_test_lazy_target"
    (tmp_path / f"{name}.py").write_text("def greet(n):\n    return 'hello ' + n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry()
    registry.register(make("lazy", "greet", target=f"{name}:greet"))
    registry.apply("platform")
    assert name not in sys.modules
    assert registry.records()["lazy"].status == "deferred"
    try:
        module = __import__(name)
        assert module.greet("x") == "patched"
        assert registry.records()["lazy"].status == "applied"
    finally:
        sys.modules.pop(name, None)
