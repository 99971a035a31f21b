// exp through the fp16-indexed table of kernels/lut.h, for a chunk of softmax scores; included
// by each Highway kernel file that offers the table as its exp (per-target inline header).

#if defined(LLADA_KERNELS_EXP_LUT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LLADA_KERNELS_EXP_LUT_INL_H_
#undef LLADA_KERNELS_EXP_LUT_INL_H_
#else
#define LLADA_KERNELS_EXP_LUT_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "quant/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(-neg) per lane from the table, neg >= 0 (+inf gives the table's 0). Highway's emulated
// fp16 demotion truncates, so the scalar and emulated targets look each lane up with the scalar
// conversion. (SSSE3 / SSE4, where Highway 1.0 emulates it too, are not compiled:
// kernels/CMakeLists.txt.)
template <class DF>
HWY_INLINE hn::Vec<DF> ExpLutVec(DF df, hn::Vec<DF> neg, const float* table) {
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    const hn::Rebind<hwy::float16_t, DF> dh;
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<int32_t, DF> di;
    const auto bits = hn::BitCast(du16, hn::DemoteTo(dh, neg));
    const auto idx = hn::BitCast(di, hn::PromoteTo(hn::Rebind<uint32_t, DF>(), bits));
    return hn::GatherIndex(df, table, hn::And(idx, hn::Set(di, 0x7fff)));
#else
    HWY_ALIGN float t[hn::MaxLanes(df)];
    hn::Store(neg, df, t);
    for (size_t i = 0; i < hn::Lanes(df); ++i)
        t[i] = table[quant::fp32_to_fp16(t[i]) & 0x7fff];
    return hn::Load(df, t);
#endif
}

// s[j] = exp(s[j] - m) for j < n, read from the table (index: fp16 bits of m - s[j] >= 0).
HWY_INLINE void ExpChunkLut(float* s, int64_t n, float m, const float* table) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const auto vm = hn::Set(df, m);
    int64_t j = 0;
    for (; j + N <= n; j += N)
        hn::StoreU(ExpLutVec(df, hn::Sub(vm, hn::LoadU(df, s + j)), table), df, s + j);
    for (; j < n; ++j)
        s[j] = table[quant::fp32_to_fp16(m - s[j]) & 0x7fff];
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#endif  // LLADA_KERNELS_EXP_LUT_INL_H_
