// The cost model: projected time of one op from a profile, split by what bounds it, and the
// costs of the memory runtime (map, unmap, copy) and of compiling a static graph. Units are
// microseconds throughout. Every figure it produces is projected, not measured.
#pragma once

#include <array>
#include <cstddef>

#include "npu/profile.h"

namespace llada::npu {

// Where projected time goes. An op's time is attributed to the resource that bounds it, so
// the categories of a timeline add up to its total.
enum class Category : int {
    Matrix,    // matrix engine (HMX tiles; the CPU's GEMM)
    Vector,    // vector unit (HVX / NEON): elementwise, softmax, LUT dequantisation
    Dma,       // weight / KV streaming from DRAM
    Dispatch,  // per-op dispatch and per-graph RPC
    MapUnmap,  // mapping and unmapping memory into the device window
    Copy,      // synchronous copies into the window (the optimised runtime's first load)
    Compile,   // static graph build + optimisation, once per shape bucket
    Stall,     // waiting for weights the prefetch thread has not prepared yet
};
constexpr int kCategories = 8;
const char* category_name(Category c);

struct Cost {
    std::array<double, kCategories> us{};
    double total() const;
    double operator[](Category c) const { return us[static_cast<int>(c)]; }
    void add(Category c, double v) { us[static_cast<int>(c)] += v; }
    Cost& operator+=(const Cost& o);
};

// The resources one op uses. Matrix FLOPs are already padded to the engine's tiles
// (npu/tile_engine.h).
struct OpWork {
    double matrix_flops = 0;  // on the matrix engine
    double vector_ops = 0;    // element operations on the vector unit
    double vector_bytes = 0;  // bytes the vector unit loads
    double dram_bytes = 0;    // bytes streamed from DRAM (weights, KV)
    // Matrix and vector work alternate on the same data (attention: scores, softmax, values),
    // so their times add; otherwise the engines pipeline across tiles and the slowest bounds.
    bool serial_matrix_vector = false;
};

// dispatch + max(matrix, vector, dram) (or dispatch + max(matrix + vector, dram) when serial),
// the max attributed to the category that bounds it.
Cost op_cost(const Profile& p, const OpWork& w);

// Times of the memory runtime and of graph compilation.
double map_us(const Profile& p, size_t bytes);
double unmap_us(const Profile& p, size_t bytes);
double copy_us(const Profile& p, size_t bytes);  // a CPU thread copying into the window
double compile_us(const Profile& p, int n_layers);

}  // namespace llada::npu
