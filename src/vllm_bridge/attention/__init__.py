"""Attention on the CPU: which backend a layer gets (``selection``) and
vllm-bridge's variant of vLLM's CPU backend (``cpu_backend``), which writes
the KV cache inside the attention call."""
