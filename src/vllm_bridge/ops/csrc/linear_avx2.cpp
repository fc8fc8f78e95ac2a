// y = x @ w^T + bias with w stored narrow and all arithmetic in float32, for
// x86 CPUs with AVX2 and FMA but no bf16 arithmetic (AMD Zen 2/3, Intel
// before Cooper Lake):
//   bf16_linear: bf16 weights. oneDNN refuses bf16 there and PyTorch's
//     fallback GEMM runs at a few percent of the fp32 rate.
//   int8_linear: int8 weights with a float32 scale per output row
//     (--quantization bridge_int8). oneDNN's int8 GEMM on AVX2 (no VNNI)
//     runs at about 2 GB/s of weights, a tenth of the bf16 kernel.
// Each reads the weights once per call (near the memory bandwidth for
// decode-sized batches) and runs an fp32 FMA micro-kernel on them for larger
// batches.
//
// Layout: w is [N, K] row-major (nn.Linear's own layout, used as loaded: no
// packed copy). Both operands are walked along K, so the micro-kernel is a
// block of dot products whose lanes are summed at the end of each K block.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kLanes = 8;        // floats per AVX2 register
constexpr int64_t kBlockK = 1024;    // K block: a 4-row fp32 weight tile is 16 KiB
constexpr int64_t kTileN = 4;        // weight rows per micro-kernel call
constexpr int64_t kTileM = 3;        // activation rows per micro-kernel call
constexpr int64_t kChunkM = 64;      // activation rows per pass over the weights
constexpr int64_t kDirectMaxM = 12;  // up to here, weights are converted in registers
constexpr int64_t kPrefetchAhead = 16384;  // bytes, direct path

inline __m256 load_bf16(const uint16_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

inline float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline __m256 load_int8(const int8_t* p) {
  const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
}

// Eight weights as float32, and one, for each stored weight type.
inline __m256 load_w(const uint16_t* p) { return load_bf16(p); }
inline __m256 load_w(const int8_t* p) { return load_int8(p); }
inline float w_to_float(uint16_t v) { return bf16_to_float(v); }
inline float w_to_float(int8_t v) { return static_cast<float>(v); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Round-to-nearest-even float -> bf16 for 8 values; NaN stays a quiet NaN.
inline __m128i float_to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC00000), nan);
  rounded = _mm256_srli_epi32(rounded, 16);
  // pack 8 x u32 (each < 65536) into 8 x u16, in order
  const __m128i lo = _mm256_castsi256_si128(rounded);
  const __m128i hi = _mm256_extracti128_si256(rounded, 1);
  return _mm_packus_epi32(lo, hi);
}

inline uint16_t float_to_bf16_scalar(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu)) {
    return 0x7FC0;
  }
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// Decode-sized M: one weight row at a time, read as one sequential stream
// (the hardware prefetchers follow it; several short interleaved rows they
// follow too late), converted in registers and used for all M activation
// rows. kUnroll independent accumulators per activation row hide the FMA
// latency, fewer where more rows share the 16 registers (M x kUnroll <= 12,
// x read from memory by the FMAs). Software prefetch runs kPrefetchAhead
// bytes ahead of the reads.
template <int64_t M, typename W>
void direct_rows(const float* x, int64_t ldx, const W* w, int64_t K,
                 int64_t rows, float* y, int64_t ldy, const W* w_end) {
  constexpr int64_t kUnroll = M <= 3 ? 4 : M <= 6 ? 2 : 1;
  constexpr int64_t kStep = kLanes * kUnroll;
  const int64_t k_main = K / kStep * kStep;
  const int64_t k_vec = K / kLanes * kLanes;
  const char* end = reinterpret_cast<const char*>(w_end);
  for (int64_t r = 0; r < rows; ++r) {
    const W* wr = w + r * K;
    __m256 acc[M][kUnroll];
#pragma GCC unroll 16
    for (int64_t m = 0; m < M; ++m)
#pragma GCC unroll 16
      for (int64_t u = 0; u < kUnroll; ++u) acc[m][u] = _mm256_setzero_ps();
    for (int64_t k = 0; k < k_main; k += kStep) {
      const char* ahead = reinterpret_cast<const char*>(wr + k) + kPrefetchAhead;
      if (ahead < end) _mm_prefetch(ahead, _MM_HINT_T1);
#pragma GCC unroll 16
      for (int64_t u = 0; u < kUnroll; ++u) {
        const __m256 wv = load_w(wr + k + u * kLanes);
#pragma GCC unroll 16
        for (int64_t m = 0; m < M; ++m)
          acc[m][u] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * ldx + k + u * kLanes), wv,
                                      acc[m][u]);
      }
    }
    for (int64_t k = k_main; k < k_vec; k += kLanes) {
      const __m256 wv = load_w(wr + k);
#pragma GCC unroll 16
      for (int64_t m = 0; m < M; ++m)
        acc[m][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * ldx + k), wv, acc[m][0]);
    }
#pragma GCC unroll 16
    for (int64_t m = 0; m < M; ++m) {
      __m256 sum = acc[m][0];
#pragma GCC unroll 16
      for (int64_t u = 1; u < kUnroll; ++u) sum = _mm256_add_ps(sum, acc[m][u]);
      float s = hsum(sum);
      for (int64_t k = k_vec; k < K; ++k) s += x[m * ldx + k] * w_to_float(wr[k]);
      y[m * ldy + r] = s;
    }
  }
}

// Batch-sized M: an MR x NR block of dot products over one K block, from an
// fp32 weight tile (converted once per K block, reused by every M tile).
// kc is a multiple of kLanes: activations and tiles are zero-padded.
template <int64_t MR, int64_t NR>
void tile_dots(const float* x, int64_t ldx, const float* wt, int64_t kc,
               float* y, int64_t ldy, bool accumulate) {
  __m256 acc[MR][NR];
#pragma GCC unroll 4
  for (int64_t m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int64_t n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k += kLanes) {
    __m256 xv[MR];
#pragma GCC unroll 4
    for (int64_t m = 0; m < MR; ++m) xv[m] = _mm256_loadu_ps(x + m * ldx + k);
#pragma GCC unroll 4
    for (int64_t n = 0; n < NR; ++n) {
      const __m256 wv = _mm256_load_ps(wt + n * kc + k);
#pragma GCC unroll 4
      for (int64_t m = 0; m < MR; ++m) acc[m][n] = _mm256_fmadd_ps(xv[m], wv, acc[m][n]);
    }
  }
#pragma GCC unroll 4
  for (int64_t m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int64_t n = 0; n < NR; ++n) {
      const float s = hsum(acc[m][n]);
      y[m * ldy + n] = accumulate ? y[m * ldy + n] + s : s;
    }
  }
}

// tile_dots<mr, nr> for the run-time mr <= MR and nr <= NR (the edges of
// the output), instantiated for every such pair.
template <int64_t MR, int64_t NR>
void tile_dots_upto(int64_t mr, int64_t nr, const float* x, int64_t ldx, const float* wt,
                    int64_t kc, float* y, int64_t ldy, bool accumulate) {
  if constexpr (MR > 1) {
    if (mr < MR) return tile_dots_upto<MR - 1, NR>(mr, nr, x, ldx, wt, kc, y, ldy, accumulate);
  }
  if constexpr (NR > 1) {
    if (nr < NR) return tile_dots_upto<MR, NR - 1>(mr, nr, x, ldx, wt, kc, y, ldy, accumulate);
  }
  tile_dots<MR, NR>(x, ldx, wt, kc, y, ldy, accumulate);
}

// Weight rows [k0, k0 + kc) as fp32, each row padded with zeros to kcp.
template <typename W>
void convert_rows(const W* w, int64_t K, int64_t rows, int64_t k0, int64_t kc,
                  int64_t kcp, float* out) {
  const int64_t k_vec = kc / kLanes * kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    const W* src = w + r * K + k0;
    float* dst = out + r * kcp;
    for (int64_t k = 0; k < k_vec; k += kLanes) _mm256_store_ps(dst + k, load_w(src + k));
    for (int64_t k = k_vec; k < kc; ++k) dst[k] = w_to_float(src[k]);
    for (int64_t k = kc; k < kcp; ++k) dst[k] = 0.0f;
  }
}

// The same K block of the next rows, on its way to the cache while this one
// is multiplied.
template <typename W>
void prefetch_rows(const W* w, int64_t K, int64_t rows, int64_t k0, int64_t kc) {
  for (int64_t r = 0; r < rows; ++r) {
    const char* begin = reinterpret_cast<const char*>(w + r * K + k0);
    const char* end = reinterpret_cast<const char*>(w + r * K + k0 + kc);
    for (const char* line = begin; line < end; line += 64) _mm_prefetch(line, _MM_HINT_T0);
  }
}

// x: [M, ldx] fp32 with ldx a multiple of kLanes, zero beyond K.
template <typename W>
void blocked_rows(const float* x, int64_t M, int64_t K, int64_t ldx, const W* w,
                  int64_t rows, float* y, int64_t ldy) {
  alignas(32) float tile[kTileN * kBlockK];
  // Activation rows are taken kChunkM at a time so that their K block stays
  // in the L2 cache while every weight tile passes over it (kChunkM x kBlockK
  // floats: 256 KiB, half the L2 of AMD Zen 2/3).
  for (int64_t mc0 = 0; mc0 < M; mc0 += kChunkM) {
    const int64_t mc = std::min(kChunkM, M - mc0);
    for (int64_t n0 = 0; n0 < rows; n0 += kTileN) {
      const int64_t nr = std::min(kTileN, rows - n0);
      const int64_t next_rows = std::min(kTileN, rows - n0 - nr);
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kc = std::min(kBlockK, K - k0);
        const int64_t kcp = (kc + kLanes - 1) / kLanes * kLanes;
        convert_rows(w + n0 * K, K, nr, k0, kc, kcp, tile);
        prefetch_rows(w + (n0 + nr) * K, K, next_rows, k0, kc);
        for (int64_t m0 = mc0; m0 < mc0 + mc; m0 += kTileM) {
          const int64_t mr = std::min(kTileM, mc0 + mc - m0);
          const float* xm = x + m0 * ldx + k0;
          float* ym = y + m0 * ldy + n0;
          const bool accumulate = k0 > 0;
          tile_dots_upto<kTileM, kTileN>(mr, nr, xm, ldx, tile, kcp, ym, ldy, accumulate);
        }
      }
    }
  }
}

// direct_rows<m> for the run-time m <= M, instantiated for every such m.
template <int64_t M, typename W>
void direct_rows_upto(int64_t m, const float* x, int64_t ldx, const W* w, int64_t K,
                      int64_t rows, float* y, int64_t ldy, const W* w_end) {
  if constexpr (M > 1) {
    if (m < M) return direct_rows_upto<M - 1, W>(m, x, ldx, w, K, rows, y, ldy, w_end);
  }
  direct_rows<M, W>(x, ldx, w, K, rows, y, ldy, w_end);
}

// w_end: the end of the whole weight, as far as prefetching may reach.
template <typename W>
void rows_of_output(const float* x, int64_t M, int64_t K, int64_t ldx, const W* w,
                    int64_t rows, float* y, int64_t ldy, const W* w_end) {
  if (M <= kDirectMaxM) {
    direct_rows_upto<kDirectMaxM, W>(M, x, ldx, w, K, rows, y, ldy, w_end);
  } else {
    blocked_rows(x, M, K, ldx, w, rows, y, ldy);
  }
}

void store_bf16(const float* src, uint16_t* dst, int64_t n) {
  const int64_t n_vec = n / kLanes * kLanes;
  for (int64_t i = 0; i < n_vec; i += kLanes)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), float_to_bf16(_mm256_loadu_ps(src + i)));
  for (int64_t i = n_vec; i < n; ++i) dst[i] = float_to_bf16_scalar(src[i]);
}

// The shared driver: x [..., K] (bf16 or float32), w [N, K] of type W,
// optional float32 row scales [N] applied before the bias.
template <typename W>
at::Tensor narrow_weight_linear(const char* op, const at::Tensor& x, const at::Tensor& weight,
                                const W* wp, const float* scales,
                                const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), op, ": CPU tensors only");
  const int64_t N = weight.size(0);
  const int64_t K = weight.size(1);
  TORCH_CHECK(x.size(-1) == K, op, ": x has ", x.size(-1), " features, weight ", K);
  const auto out_dtype = x.scalar_type();
  TORCH_CHECK(out_dtype == at::kBFloat16 || out_dtype == at::kFloat,
              op, ": x must be bfloat16 or float32");

  const at::Tensor x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0);
  const bool bias_given = bias.has_value() && bias->defined();
  at::Tensor bias_c;
  if (bias_given) {
    TORCH_CHECK(bias->numel() == N, op, ": bias has ", bias->numel(),
                " values, weight ", N, " rows");
    TORCH_CHECK(bias->scalar_type() == at::kBFloat16 || bias->scalar_type() == at::kFloat,
                op, ": bias must be bfloat16 or float32");
    bias_c = bias->contiguous();
  }
  const bool to_bf16 = out_dtype == at::kBFloat16;

  // One float32 block: the activations (rows padded with zeros to whole
  // vectors) and, for a bf16 output, the float32 result before rounding.
  const int64_t ldx = (K + kLanes - 1) / kLanes * kLanes;
  at::Tensor scratch =
      at::empty({M * ldx + (to_bf16 ? M * N : 0)}, x2.options().dtype(at::kFloat));
  at::Tensor out = at::empty({M, N}, to_bf16 ? x2.options() : scratch.options());
  float* xp = scratch.data_ptr<float>();
  float* yp = to_bf16 ? xp + M * ldx : out.data_ptr<float>();
  uint16_t* out16 = to_bf16 ? reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()) : nullptr;
  for (int64_t m = 0; m < M; ++m) {
    float* row = xp + m * ldx;
    if (to_bf16) {
      const uint16_t* src = reinterpret_cast<const uint16_t*>(x2.data_ptr<at::BFloat16>()) + m * K;
      const int64_t k_vec = K / kLanes * kLanes;
      for (int64_t k = 0; k < k_vec; k += kLanes) _mm256_storeu_ps(row + k, load_bf16(src + k));
      for (int64_t k = k_vec; k < K; ++k) row[k] = bf16_to_float(src[k]);
    } else {
      std::memcpy(row, x2.data_ptr<float>() + m * K, K * sizeof(float));
    }
    for (int64_t k = K; k < ldx; ++k) row[k] = 0.0f;
  }
  const bool bias_bf16 = bias_given && bias_c.scalar_type() == at::kBFloat16;
  const void* bp = bias_given ? bias_c.data_ptr() : nullptr;

  if (M > 0 && N > 0) {
    // Each thread takes one contiguous range of weight rows (output
    // columns), read once as one stream, and finishes its own columns.
    // (Chunks handed out as threads come free measured slower: they break
    // the streams the prefetching follows.)
    const int64_t grain = M <= kDirectMaxM ? 64 : 16;
    at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
      rows_of_output<W>(xp, M, K, ldx, wp + n0 * K, n1 - n0, yp + n0, N, wp + n1 * K);
      for (int64_t m = 0; m < M; ++m) {
        float* row = yp + m * N;
        if (scales != nullptr) {
          for (int64_t n = n0; n < n1; ++n) row[n] *= scales[n];
        }
        if (bias_bf16) {
          const uint16_t* b16 = static_cast<const uint16_t*>(bp);
          for (int64_t n = n0; n < n1; ++n) row[n] += bf16_to_float(b16[n]);
        } else if (bp != nullptr) {
          const float* b32 = static_cast<const float*>(bp);
          for (int64_t n = n0; n < n1; ++n) row[n] += b32[n];
        }
        if (to_bf16) store_bf16(row + n0, out16 + m * N + n0, n1 - n0);
      }
    });
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  return out.view(shape);
}

at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kBFloat16,
              "bf16_linear: weight must be a 2-D bfloat16 tensor");
  const at::Tensor w = weight.contiguous();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  return narrow_weight_linear<uint16_t>("bf16_linear", x, w, wp, nullptr, bias);
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scale,
                       const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar,
              "int8_linear: weight must be a 2-D int8 tensor");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.numel() == weight.size(0),
              "int8_linear: scale must be float32 with one value per weight row");
  const at::Tensor w = weight.contiguous();
  const at::Tensor s = scale.contiguous();
  return narrow_weight_linear<int8_t>("int8_linear", x, w, w.data_ptr<int8_t>(),
                                      s.data_ptr<float>(), bias);
}

}  // namespace

TORCH_LIBRARY(vllm_bridge, m) {
  m.def("bf16_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor weight, Tensor scale, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(vllm_bridge, CPU, m) {
  m.impl("bf16_linear", &bf16_linear);
  m.impl("int8_linear", &int8_linear);
}
