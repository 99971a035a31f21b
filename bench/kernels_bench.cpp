// Kernel microbenchmarks (Google Benchmark): each table-driven alternative beside the exact
// kernel it replaces, on the same data, so the ratio is measured side by side.
//   ./build/bin/kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lut.h"
#include "kernels/peak.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/packed.h"
#include "util/error.h"

using namespace llada;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v)
        x = d(rng);
    return v;
}

// One head (head_dim 128) of a 32-row window against n_kv keys (the window + a cached prefix).
// Keys and values a position-major cache row apart (16 heads: 2048 floats): the one-row kernel
// per row, the multi-row kernel, and the multi-row kernel with the exp table. Contiguous, as in
// the engine's head-major cache: float32 (read in place) and fp16 (widened per chunk). The
// *_excl cases make every row a shadow row: row r excludes its own position n_kv - 32 + r (the
// window is the last 32 keys), the most masking a window can ask for.
// Items are (row, key) pairs.
enum class AttnPath {
    OneRow,
    MultiRow,
    MultiRowLut,
    HeadMajor,
    HeadMajorF16,
    MultiRowExcl,
    HeadMajorExcl
};
void BM_AttentionWindow(benchmark::State& state, AttnPath path) {
    const bool head_major = path == AttnPath::HeadMajor || path == AttnPath::HeadMajorF16 ||
                            path == AttnPath::HeadMajorExcl;
    const bool shadow = path == AttnPath::MultiRowExcl || path == AttnPath::HeadMajorExcl;
    const int64_t hd = 128, stride = head_major ? hd : 16 * hd, rows = 32, n_kv = state.range(0);
    auto q = random_vec(rows * hd, 1), k = random_vec(n_kv * stride, 2),
         v = random_vec(n_kv * stride, 3);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    kernels::to_fp16(k.data(), k16.data(), static_cast<int64_t>(k.size()));
    kernels::to_fp16(v.data(), v16.data(), static_cast<int64_t>(v.size()));
    std::vector<float> out(rows * hd);
    const std::vector<int64_t> kv(rows, n_kv);
    std::vector<int64_t> excl(rows);
    for (int64_t r = 0; r < rows; ++r)
        excl[r] = n_kv - rows + r;
    const kernels::ExpLut lut;
    for (auto _ : state) {
        if (path == AttnPath::OneRow) {
            for (int64_t r = 0; r < rows; ++r) {
                kernels::attention_head(q.data() + r * hd, k.data(), v.data(), stride, n_kv, hd,
                                        0.088f, out.data() + r * hd);
            }
        } else if (path == AttnPath::HeadMajorF16) {
            kernels::attention_rows_f16(q.data(), hd, rows, kv.data(), k16.data(), v16.data(),
                                        stride, hd, 0.088f, out.data(), hd);
        } else {
            kernels::attention_rows(q.data(), hd, rows, kv.data(), k.data(), v.data(), stride, hd,
                                    0.088f, out.data(), hd,
                                    path == AttnPath::MultiRowLut ? lut.data() : nullptr,
                                    shadow ? excl.data() : nullptr);
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.SetItemsProcessed(state.iterations() * rows * n_kv);
}
BENCHMARK_CAPTURE(BM_AttentionWindow, one_row, AttnPath::OneRow)->Arg(32)->Arg(544);
BENCHMARK_CAPTURE(BM_AttentionWindow, multi_row, AttnPath::MultiRow)->Arg(32)->Arg(544);
BENCHMARK_CAPTURE(BM_AttentionWindow, multi_row_lut_exp, AttnPath::MultiRowLut)->Arg(32)->Arg(544);
BENCHMARK_CAPTURE(BM_AttentionWindow, head_major, AttnPath::HeadMajor)->Arg(32)->Arg(544);
BENCHMARK_CAPTURE(BM_AttentionWindow, head_major_fp16, AttnPath::HeadMajorF16)->Arg(32)->Arg(544);
BENCHMARK_CAPTURE(BM_AttentionWindow, multi_row_excl, AttnPath::MultiRowExcl)->Arg(32)->Arg(544);
BENCHMARK_CAPTURE(BM_AttentionWindow, head_major_excl, AttnPath::HeadMajorExcl)->Arg(32)->Arg(544);

// Q4_0 weights (2048 x 2048) times `rows` activation rows, three ways: dequantised through the
// 16-entry table, dequantised arithmetically, and the int8 path (activations quantised to Q8).
enum class Q4Path { Lut, Arith, Int8 };
void BM_Q4Matmul(benchmark::State& state, Q4Path path) {
    const int64_t n = 2048, k = 2048, m = state.range(0);
    auto wf = random_vec(n * k, 4);
    std::vector<uint8_t> raw(quant::row_bytes(format::TensorType::Q4_0, k) * n);
    for (int64_t r = 0; r < n; ++r) {
        quant::quantize_row(format::TensorType::Q4_0, wf.data() + r * k,
                            raw.data() + r * quant::row_bytes(format::TensorType::Q4_0, k), k);
    }
    const quant::PackedLayout l = quant::packed_layout(format::TensorType::Q4_0, n, k);
    std::vector<uint8_t> packed(l.total_bytes());
    quant::pack_groups(l, raw.data(), quant::row_bytes(format::TensorType::Q4_0, k), 0, l.n_groups,
                       packed.data());
    kernels::WeightView w{format::TensorType::Q4_0,
                          raw.data(),
                          n,
                          k,
                          quant::row_bytes(format::TensorType::Q4_0, k),
                          packed.data()};
    auto x = random_vec(m * k, 5);
    std::vector<uint8_t> xq(quant::act_layout(k).row_bytes * m);
    std::vector<float> y(m * n);
    for (auto _ : state) {
        switch (path) {
            case Q4Path::Lut:
                kernels::matmul_q4_lut(x.data(), m, w, y.data(), n, 0, n);
                break;
            case Q4Path::Arith:
                kernels::matmul_q4_dequant(x.data(), m, w, y.data(), n, 0, n);
                break;
            case Q4Path::Int8:
                kernels::quantize_acts(x.data(), xq.data(), k, 0, m);
                kernels::matmul_q8(xq.data(), m, w, y.data(), n, 0, n);
                break;
        }
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * m * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Q4Matmul, lut_dequant, Q4Path::Lut)->Arg(1)->Arg(32);
BENCHMARK_CAPTURE(BM_Q4Matmul, arith_dequant, Q4Path::Arith)->Arg(1)->Arg(32);
BENCHMARK_CAPTURE(BM_Q4Matmul, int8_dot, Q4Path::Int8)->Arg(1)->Arg(32);

// The int8 path of both quantised formats (2048 x K weights, packed at load; activations
// quantised to Q8 per call, as the engine does) at the row counts of a denoising step. Arguments:
// rows, K. K = 2048 is the model's shape; K = 256 keeps a tile's weights (two groups x 8 blocks)
// in L1, which separates the kernel's in-core rate from its weight stream out of L2.
void BM_QuantMatmul(benchmark::State& state, format::TensorType t) {
    const int64_t n = 2048, k = state.range(1), m = state.range(0);
    auto wf = random_vec(n * k, 4);
    const size_t rb = quant::row_bytes(t, k);
    std::vector<uint8_t> raw(rb * n);
    for (int64_t r = 0; r < n; ++r)
        quant::quantize_row(t, wf.data() + r * k, raw.data() + r * rb, k);
    const quant::PackedLayout l = quant::packed_layout(t, n, k);
    std::vector<uint8_t> packed(l.total_bytes());
    quant::pack_groups(l, raw.data(), rb, 0, l.n_groups, packed.data());
    kernels::WeightView w{t, raw.data(), n, k, rb, packed.data()};
    auto x = random_vec(m * k, 5);
    std::vector<uint8_t> xq(quant::act_layout(k).row_bytes * m);
    std::vector<float> y(m * n);
    for (auto _ : state) {
        kernels::quantize_acts(x.data(), xq.data(), k, 0, m);
        kernels::matmul_q8(xq.data(), m, w, y.data(), n, 0, n);
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * m * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_QuantMatmul, q8_0, format::TensorType::Q8_0)
    ->Args({32, 2048})
    ->Args({128, 2048})
    ->Args({32, 256})
    ->Args({128, 256});
BENCHMARK_CAPTURE(BM_QuantMatmul, q4_0, format::TensorType::Q4_0)
    ->Args({32, 2048})
    ->Args({128, 2048})
    ->Args({32, 256})
    ->Args({128, 256});

// F16 weights (n x k) times `rows` float activation rows: the float-weight kernel every F16/BF16
// model's matmuls run through (the shapes of the 1B model: q/o 2048 x 2048, ffn down 2048 x 5632).
// Third argument 1: the weights repacked at load (quant/packed.h) and the outer-product kernel;
// 0: row-major weights and the dot-product tiles (BF16/F32, and F16 where nothing was packed).
void BM_F16Matmul(benchmark::State& state) {
    const int64_t m = state.range(0), n = 2048, k = state.range(1);
    const bool pack = state.range(2) != 0;
    auto wf = random_vec(n * k, 6);
    std::vector<uint16_t> w16(n * k);
    for (size_t i = 0; i < w16.size(); ++i)
        w16[i] = quant::fp32_to_fp16(wf[i]);
    kernels::WeightView w{format::TensorType::F16,
                          reinterpret_cast<const uint8_t*>(w16.data()),
                          n,
                          k,
                          static_cast<size_t>(k) * 2,
                          nullptr};
    const quant::PackedLayout l = quant::packed_layout(format::TensorType::F16, n, k);
    std::vector<uint8_t> packed(pack ? l.total_bytes() : 0);
    if (pack) {
        quant::pack_groups(l, w.data, w.row_bytes, 0, l.n_groups, packed.data());
        w.packed = packed.data();
    }
    auto x = random_vec(m * k, 7);
    std::vector<float> y(m * n);
    for (auto _ : state) {
        kernels::matmul_float(x.data(), m, w, y.data(), n, 0, n);
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * m * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_F16Matmul)->ArgsProduct({{32, 64, 160}, {2048, 5632}, {0, 1}});

// One thread's raw int8 dot-product rate beside the same dot products inside a block-format
// kernel's instruction mix (kernels/peak.h): their ratio is the share of the raw rate a kernel
// for Q8_0 / Q4_0 can reach, the ceiling to read QuantMatmul's GOP/s against.
void BM_Int8Rate(benchmark::State& state, bool block_mix) {
    float sink = 0.0f;
    double ops = 0.0;
    for (auto _ : state)
        ops += block_mix ? kernels::int8_block_ops(20000, &sink) : kernels::int8_ops(20000, &sink);
    benchmark::DoNotOptimize(sink);
    state.counters["GOP/s"] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Int8Rate, raw, false);
BENCHMARK_CAPTURE(BM_Int8Rate, block_format_mix, true);

}  // namespace

// LLADA_BENCH_TARGET=AVX2 (or any Highway target name this build has and the CPU supports)
// runs every kernel on that target instead of the best one, so a narrower machine's kernels
// can be timed here (the tools' --simd).
int main(int argc, char** argv) {
    if (const char* want = std::getenv("LLADA_BENCH_TARGET")) {
        try {
            llada::kernels::limit_simd(want);
        } catch (const llada::Error& e) {
            std::fprintf(stderr, "kernels_bench: LLADA_BENCH_TARGET: %s\n", e.what());
            return 2;
        }
        std::fprintf(stderr, "kernels_bench: target %s\n", llada::kernels::active_target());
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
