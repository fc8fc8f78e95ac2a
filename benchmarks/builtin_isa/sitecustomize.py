"""The ISA switch for vLLM's built-in CPU platform, in benchmarks only.

With ``VLLM_BRIDGE_DISABLE=1`` vllm-bridge's platform patches do not run, so
vLLM's built-in platform would still read the real CPU's ISA (load the
AVX-512 kernel library, run AMX attention) while ATen, oneDNN and MKL are
capped by ``VLLM_BRIDGE_ISA``. The benchmarks put this directory on the
PYTHONPATH of the built-in side, so that every process it spawns starts
with torch.cpu's ISA queries capped the same way.
"""

import os

if os.environ.get("VLLM_BRIDGE_ISA", "auto").strip().lower() not in ("", "auto"):
    from vllm_bridge.patches.platform.isa_switch import install

    install()
