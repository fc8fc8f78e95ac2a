"""The vector width vLLM's C++ CPU kernels need.

They process the last dimension in whole SIMD vectors and raise ("Expected
d % VEC_ELEM_NUM == 0") otherwise; 8 elements on AVX-512 here. A multiple of
32 covers every vector width vLLM builds for.
"""

KERNEL_WIDTH_MULTIPLE = 32
