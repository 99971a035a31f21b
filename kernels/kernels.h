// CPU kernels, each dispatched at run time to the best instruction set the machine has.
//
// Kernels are single-threaded functions over an explicit range of rows or columns; the runtime
// splits an op into ranges and runs them on its thread pool. Every kernel has a scalar twin in
// kernels/reference.h that the tests compare against on every compiled target.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/tensor_type.h"
#include "quant/blocks.h"

namespace llada::kernels {

// A weight matrix W[n_rows][n_cols] in its storage format: row n holds the n_cols input weights
// of output n (GGUF's ne[0] = n_cols is the fastest dimension).
struct WeightView {
    format::TensorType type = format::TensorType::F32;
    const uint8_t* data = nullptr;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    size_t row_bytes = 0;
    // Tile formats (TQ4, TQ8, TF16) have no rows: row_bytes is 0 and row() must not be used
    // (quant::dequantize_matrix_row reads one).
    // Block formats and F16: the same weights repacked for the CPU kernels (quant/packed.h),
    // starting at row 0 of this view (a view of rows [v0, ...) needs v0 % 16 == 0).
    const uint8_t* packed = nullptr;
    const uint8_t* row(int64_t n) const { return data + static_cast<size_t>(n) * row_bytes; }
};

// How the activations must be prepared for a weight format, following llama.cpp's CPU backend:
// F16/BF16 weights see activations rounded to F16/BF16; the legacy block formats (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL) see activations quantised to Q8_0 blocks (scale amax/127 in fp16,
// round half to even; Q4_1/Q5_1 also read Q8_1's sum from the same records); the k-quants and
// IQ4_XS see Q8_K blocks (one float scale per 256 values).
enum class ActKind { F32, F16, BF16, Q8_0, Q8_K };
ActKind act_kind_for(format::TensorType weight_type);

// --- activation preparation (rows [r0, r1) of a row-major [rows][k] matrix) ---
// y = x rounded to fp16 / bf16 precision, kept as float32.
void round_rows_fp16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1);
void round_rows_bf16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1);
// y[i] = x[i] as fp16 bits, rounded to nearest even (the fp16 KV cache's stores).
void to_fp16(const float* x, uint16_t* y, int64_t n);
// Each row of k floats (k % 32 == 0) becomes a quant::ActLayout row: int8 values with one
// fp16-rounded scale per 32 (llama.cpp's Q8_0 activation quantisation, and its Q8_1 sums).
void quantize_acts(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1);
// The same records from llama.cpp's Q8_K quantisation (k % 256 == 0): one float scale per 256
// values, the largest magnitude mapped to -127.
void quantize_acts_k(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1);

// --- matmul: y[m][n] = sum_k x[m][k] * W[n][k] for m in [0, m_rows), n in [n0, n1) ---
// x is float32 (already rounded for F16/BF16 weights); W is F32, F16 or BF16. F16 with `packed`
// set (quant/packed.h) takes the packed kernel, which needs n0 % 16 == 0.
void matmul_float(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1);
// xq holds m_rows quant::ActLayout rows prepared as act_kind_for(W.type) says; W is any block
// format (Q8_0 ... IQ4_XS) with `packed` set; n0 % 16 == 0.
void matmul_q8(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
               int64_t n0, int64_t n1);
// The generic block formats' kernel (quant::generic_pack), which matmul_q8 calls for them.
void matmul_generic(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                    int64_t n0, int64_t n1);

// W in a tile format (TQ4, TQ8, TF16: quant/tile.h) on the CPU, with the NPU's numerics: each
// 32-output strip is dequantised through fp16 tables (kernels/tile_gemm.h) and multiplied by x,
// whose rows are already rounded to fp16 (act_kind_for gives F16). n0 % 32 == 0; `data` points
// at strip 0 of the view (a view of rows [v0, ...) needs v0 % 32 == 0).
void matmul_tile(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1);

// --- row-wise ops on rows [r0, r1) of row-major matrices with `k` columns ---
// y = x / sqrt(mean(x^2) + eps) * w
void rms_norm(const float* x, const float* w, float* y, int64_t k, float eps, int64_t r0,
              int64_t r1);
// y = a + b (elementwise over n values starting at offset 0; callers pass sub-ranges).
void add(const float* a, const float* b, float* y, int64_t n);
// y = silu(g) * u, silu(x) = x / (1 + exp(-x)).
void swiglu(const float* g, const float* u, float* y, int64_t n);

// RoPE on one row of n_heads heads of head_dim values, in place. cos/sin hold n_rot/2 values
// for this row's position. NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2).
enum class RopeStyle { Norm, Neox };
void rope_row(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
              const float* sin, RopeStyle style);

// Attention of one query head against n_kv keys/values (rows of stride `kv_stride` floats, head
// slice already applied): out = softmax(q.k_j * scale) . v_j, computed with a streaming
// (flash-style) softmax so no score row is materialised.
void attention_head(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t n_kv,
                    int64_t head_dim, float scale, float* out);
// The same for n_q query rows of one head (rows of stride q_stride, outputs of stride
// out_stride), row r against keys [0, n_kv[r]) (n_kv[r] >= 1): the rows share each key and value
// load (groups of 8+ rows in the vector lanes, fewer in 4-row tiles; kernels/attention.cpp); the
// engine's attention. exp_table: nullptr for the exact
// (polynomial) exp, or ExpLut::data() (kernels/lut.h) to take the softmax's exponentials from
// the table. attention_head stays as the one-row baseline the kernel is measured against.
//
// excl: nullptr, or n_q key indices, one per row. Row r does not see key excl[r] (a "shadow
// row" at position p passes p, so that it attends to every cached key but its own and cannot
// copy its own token); -1 means the row sees all of its keys. Otherwise excl[r] must lie in
// [0, n_kv[r]), and the softmax runs over row r's remaining n_kv[r] - 1 keys: the excluded
// score is set to -infinity in the chunk that holds it, in the same single pass, so that its
// weight is exactly 0 with either exp. A row must keep at least one visible key: n_kv[r] == 1
// with excl[r] == 0 is a caller error, refused (Error) in every build, as is an excluded key
// outside [-1, n_kv[r]).
void attention_rows(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                    const float* k, const float* v, int64_t kv_stride, int64_t head_dim,
                    float scale, float* out, int64_t out_stride, const float* exp_table = nullptr,
                    const int64_t* excl = nullptr);
// The same with keys and values stored as fp16 bits (the fp16 KV cache): each chunk is widened
// to float as it is copied out, then computed exactly as above (excl included).
// head_dim <= kMaxFp16KvHeadDim.
constexpr int64_t kMaxFp16KvHeadDim = 256;
void attention_rows_f16(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                        const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t head_dim,
                        float scale, float* out, int64_t out_stride,
                        const float* exp_table = nullptr, const int64_t* excl = nullptr);

// --- fused sampling: per-row reductions over a vocabulary without keeping the logits ---
// Running statistics of one logits row over the vocabulary entries seen so far, relative to the
// running maximum, so chunks can be merged in any grouping (merge in vocabulary order keeps
// ties at the lowest index). NaN logits are ignored; +inf wins and each +inf counts once.
struct RowStats {
    int32_t token = -1;  // argmax (first maximum); -1 before any finite or +inf value
    float max = -INFINITY;
    float sum_exp = 0.0f;  // sum of exp(x - max)
    float ent_acc = 0.0f;  // sum of exp(x - max) * (x - max), for the entropy
    int32_t second = -1;   // runner-up token (different from `token`)
    float second_max = -INFINITY;
    // Gumbel-max sampling (row_gumbel_chunk): the token maximising
    // logit - T * log(-log u_v), its score and its logit (-1 when not sampled).
    int32_t gumbel_token = -1;
    double gumbel_score = -INFINITY;
    float gumbel_logit = -INFINITY;
};
// What a row's Gumbel-max draw needs: u_v = llada::counter_uniform(seed, offset + v) for
// vocabulary entry v, at temperature T (0: the plain argmax), never choosing `banned` (-1: none).
struct GumbelRow {
    uint64_t seed = 0;
    uint64_t offset = 0;
    double temperature = 0.0;
    int32_t banned = -1;
};
// Folds entries [v0, v0 + n) of logits rows [0, m_rows) (stride ld) into each row's Gumbel-max
// choice: the same choice as exp(logit) / (-log u)^T maximised in double precision (the
// unfused path, decode/sampling.cpp), ties to the lower index. Scalar.
void row_gumbel_chunk(const float* logits, int64_t m_rows, int64_t ld, int64_t n, int64_t v0,
                      const GumbelRow* rows, RowStats* out);
// The softmax probability of the Gumbel-max choice.
float row_gumbel_confidence(const RowStats& s);
// Confidence of the argmax: softmax probability = 1 / sum_exp (0 for an empty row).
float row_confidence(const RowStats& s);
// Entropy of the softmax distribution, in nats.
float row_entropy(const RowStats& s);
// Statistics of rows [0, m_rows) of a logits chunk (row stride ld) covering vocabulary entries
// [v0, v0 + n).
void row_stats_chunk(const float* logits, int64_t m_rows, int64_t ld, int64_t n, int64_t v0,
                     RowStats* out);
// Merges the statistics of a later vocabulary range into `into`.
void row_stats_merge(RowStats& into, const RowStats& later);

// Name of the instruction set the dispatcher picked (for logs and benchmarks).
const char* active_target();
// Restricts dispatch to the named instruction set (a Highway target name such as "AVX2",
// case-insensitive) for the rest of the process, so a narrower machine's kernels run here.
// Highway keeps the dispatch choice process-wide; this goes through its documented override.
// Throws llada::Error naming the sets this build and CPU offer if `name` is not one of them.
void limit_simd(const std::string& name);

}  // namespace llada::kernels
