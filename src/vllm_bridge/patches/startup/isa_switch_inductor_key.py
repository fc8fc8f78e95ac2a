"""Under ``VLLM_BRIDGE_ISA``, give inductor the switched class's vector
width, so that its cache keeps code of different classes apart."""

from vllm_bridge import startup
from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.device.isa import detect
from vllm_bridge.patching.spec import Patch

PATCH = Patch(
    name=startup.INDUCTOR_PATCH_NAME,
    target="torch._inductor.config:cpp.simdlen",
    stage="startup",
    kind="hook",
    new=startup.install_inductor_simdlen,
    undo=startup.uninstall_inductor_simdlen,
    active_when=lambda: detect().switched,
    why=(
        "The switch caps inductor's ISA through ATEN_CPU_CAPABILITY, which "
        "its FX-graph cache key does not hold: a graph compiled natively on "
        "an AVX-512 CPU was loaded from the cache under VLLM_BRIDGE_ISA=avx2 "
        "with its 512-bit tiling and compiled with AVX2 flags, so each loop "
        "handled half of every vector (a relu left 8 of 24 values negative). "
        "vLLM's model graphs are safe (compile-cache-bridge-key keys their "
        "cache by class); any other torch.compile in the process is not."
    ),
    how=(
        "At interpreter start (vllm_bridge_startup.pth), when VLLM_BRIDGE_ISA "
        "names a class: once torch._inductor.config is imported, "
        "config.cpp.simdlen becomes the class's vector width (256 bits for "
        "avx2, 512 for the AVX-512 classes) unless set, which both selects "
        "that ISA for code generation and enters the cache key."
    ),
    upstream=(
        "none found: PyTorch's FxGraphHashDetails hashes the inductor config "
        "and system info, not the vector ISA picked from ATEN_CPU_CAPABILITY"
    ),
    remove_when="inductor's FX-graph cache key holds the picked vector ISA",
    vllm_versions=SUPPORTED_VLLM,
)
