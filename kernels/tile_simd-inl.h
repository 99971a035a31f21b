// What the register-tile kernels (matmul, attention, the Q4_0 LUT matmul) need to compile for
// every Highway target, Arm's SVE included. Per-target: include it after hwy/highway.h, inside
// HWY_NAMESPACE's enclosing namespaces as the kernels' own code is (the toggle below).
//
// SVE's vectors are "sizeless": their width is known only when the program runs, so C++ forbids
// arrays of them and struct members of their type, and the lane count is no compile-time
// constant. The kernels size their tiles and their layouts (16-row weight groups, lane-major
// score blocks) by the lane count at compile time. So on scalable targets they use 128-bit
// vectors (every SVE machine has at least those: the same tiles as NEON, through SVE
// instructions) and keep a tile's vectors in a small aligned buffer instead of an array of
// vectors. Elsewhere `VecArray` is a plain array of vectors, so the x86 and NEON code is what it
// was.

#if defined(LLADA_KERNELS_TILE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LLADA_KERNELS_TILE_SIMD_INL_H_
#undef LLADA_KERNELS_TILE_SIMD_INL_H_
#else
#define LLADA_KERNELS_TILE_SIMD_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {

#if HWY_HAVE_SCALABLE
using TileTagF = hwy::HWY_NAMESPACE::FixedTag<float, 4>;
#else
using TileTagF = hwy::HWY_NAMESPACE::ScalableTag<float>;
#endif

#if HWY_HAVE_SCALABLE
// N vectors of tag D in an aligned buffer: a[i] reads one, Put(a, i, v) writes one.
template <class D, int N>
class VecArray {
    static constexpr size_t kLanes = hwy::HWY_NAMESPACE::MaxLanes(D());
    HWY_ALIGN hwy::HWY_NAMESPACE::TFromD<D> lanes_[N * kLanes];

  public:
    hwy::HWY_NAMESPACE::Vec<D> operator[](int i) const {
        return hwy::HWY_NAMESPACE::Load(D(), lanes_ + i * kLanes);
    }
    void set(int i, hwy::HWY_NAMESPACE::Vec<D> v) {
        hwy::HWY_NAMESPACE::Store(v, D(), lanes_ + i * kLanes);
    }
};
template <class D, int N, class V>
HWY_INLINE void Put(VecArray<D, N>& a, int i, V v) {
    a.set(i, v);
}
#else
// N vectors of tag D: a plain array (a[i] reads, Put(a, i, v) writes).
template <class D, int N>
using VecArray = hwy::HWY_NAMESPACE::Vec<D>[N];
template <class V, size_t N>
HWY_INLINE void Put(V (&a)[N], int i, V v) {
    a[i] = v;
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#endif  // LLADA_KERNELS_TILE_SIMD_INL_H_
