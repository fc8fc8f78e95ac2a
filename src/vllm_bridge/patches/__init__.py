"""vllm-bridge's patches to vLLM (and, under the ISA switch, to torch),
one module per patch, grouped by stage. Each module declares its ``Patch``
as data and imports nothing of the registry; ``catalogue`` collects them."""
