// Functional semantics of the simulated NPU's ops on the host.
#include "runtime/npu_exec.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/tile_gemm.h"
#include "quant/blocks.h"
#include "util/error.h"

namespace llada::runtime {

TileWeight convert_to_tiles(CpuOps& ops, const kernels::WeightView& w, quant::TileType type) {
    TileWeight t;
    t.key = w.data;
    t.layout = quant::tile_layout(type, w.n_rows, w.n_cols);
    if (quant::tile_type_of(w.type) == type) {
        t.data = w.data;
        return t;
    }
    const size_t bytes = (t.layout.total_bytes() + 63) / 64 * 64;
    t.host = aligned_bytes(bytes, "npu-sim's tile copy of a weight");
    const int64_t k = w.n_cols;
    const int64_t strips = t.layout.n_strips;
    // A few strips per task, each task with its own float rows.
    const int64_t per_task = std::max<int64_t>(1, strips / (ops.pool().size() * 8));
    const int64_t tasks = (strips + per_task - 1) / per_task;
    ops.pool().parallel_for(tasks, [&](int64_t task, int) {
        std::vector<float> rows(static_cast<size_t>(quant::kTileDim * k));
        for (int64_t s = task * per_task; s < std::min(strips, (task + 1) * per_task); ++s) {
            const int64_t r0 = s * quant::kTileDim;
            const int64_t r1 = std::min(w.n_rows, r0 + quant::kTileDim);
            for (int64_t r = r0; r < r1; ++r) {
                quant::dequantize_matrix_row(w.type, w.data, w.n_rows, k, r,
                                             rows.data() + (r - r0) * k);
            }
            quant::quantize_tile_strips(t.layout, rows.data(), k, s, s + 1,
                                        t.host.get() + s * t.layout.strip_bytes());
        }
    });
    t.data = t.host.get();
    return t;
}

void NpuScratch::size_for(int n_threads, int64_t max_k, int64_t max_rows) {
    const int64_t k_pad = (max_k + quant::kTileDim - 1) / quant::kTileDim * quant::kTileDim;
    strip_floats = quant::kTileDim * k_pad;
    logits_floats = max_rows * quant::kTileDim;
    strips.assign(static_cast<size_t>(n_threads * strip_floats), 0.0f);
    logits.assign(static_cast<size_t>(n_threads * logits_floats), 0.0f);
}

void npu_matmul(CpuOps& ops, NpuScratch& s, const float* x, int64_t m_rows,
                const quant::TileLayout& l, const uint8_t* w, float* y) {
    const int64_t n = l.n_rows;
    ops.pool().parallel_for(l.n_strips, [&](int64_t strip, int thread) {
        // One strip of 32 outputs: its tiles dequantised input-major, then an outer product.
        float* buf = s.strips.data() + thread * s.strip_floats;
        kernels::dequant_tile_strip_kn(l, w + strip * l.strip_bytes(), buf);
        const int64_t valid = std::min<int64_t>(quant::kTileDim, n - strip * quant::kTileDim);
        kernels::matmul_kn32(x, m_rows, l.n_cols, buf, y + strip * quant::kTileDim, n, valid);
    });
    round_rows_to_fp16(ops, y, n, m_rows);
}

void npu_lm_head_reduce(CpuOps& ops, NpuScratch& s, const float* x, int64_t m_rows, int64_t n_valid,
                        const quant::TileLayout& l, const uint8_t* w,
                        std::vector<kernels::RowStats>& partial, kernels::RowStats* out) {
    ops.pool().parallel_for(l.n_strips, [&](int64_t strip, int thread) {
        float* buf = s.strips.data() + thread * s.strip_floats;
        float* logits = s.logits.data() + thread * s.logits_floats;
        kernels::dequant_tile_strip_kn(l, w + strip * l.strip_bytes(), buf);
        const int64_t valid =
            std::min<int64_t>(quant::kTileDim, l.n_rows - strip * quant::kTileDim);
        kernels::matmul_kn32(x, m_rows, l.n_cols, buf, logits, quant::kTileDim, valid);
        kernels::round_rows_fp16(logits, logits, quant::kTileDim, 0, m_rows);
        kernels::row_stats_chunk(logits, n_valid, quant::kTileDim, valid, strip * quant::kTileDim,
                                 partial.data() + strip * m_rows);
    });
    // Merged in vocabulary order, so the result does not depend on the thread count.
    for (int64_t r = 0; r < n_valid; ++r) {
        kernels::RowStats acc;
        for (int64_t strip = 0; strip < l.n_strips; ++strip)
            kernels::row_stats_merge(acc, partial[strip * m_rows + r]);
        out[r] = acc;
    }
}

void round_rows_to_fp16(CpuOps& ops, float* y, int64_t cols, int64_t rows) {
    ops.parallel_ranges(
        rows, cols, [&](int64_t lo, int64_t hi) { kernels::round_rows_fp16(y, y, cols, lo, hi); });
}

}  // namespace llada::runtime
