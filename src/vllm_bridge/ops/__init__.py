"""Out-of-tree ops: vLLM's C++ CPU kernels where vLLM 0.32 leaves native
PyTorch in eager mode (``activation``, ``ir_kernels``: under inductor the
native forms are fused by the compiler and stay), and vllm-bridge's own
C++ kernels (``native`` builds them, ``linear`` runs bf16 weights with
float32 arithmetic on CPUs without bf16 arithmetic)."""
