// The cost model: projected op time from a profile.
#include "npu/cost_model.h"

#include <algorithm>

namespace llada::npu {

const char* category_name(Category c) {
    switch (c) {
        case Category::Matrix:
            return "matrix";
        case Category::Vector:
            return "vector";
        case Category::Dma:
            return "dma";
        case Category::Dispatch:
            return "dispatch";
        case Category::MapUnmap:
            return "map_unmap";
        case Category::Copy:
            return "copy";
        case Category::Compile:
            return "compile";
        case Category::Stall:
            return "stall";
    }
    return "?";
}

double Cost::total() const {
    double t = 0;
    for (double v : us)
        t += v;
    return t;
}

Cost& Cost::operator+=(const Cost& o) {
    for (int i = 0; i < kCategories; ++i)
        us[i] += o.us[i];
    return *this;
}

Cost op_cost(const Profile& p, const OpWork& w) {
    // GB/s = 1e3 bytes per microsecond; TFLOP/s = 1e6 FLOP per microsecond.
    const double matrix = w.matrix_flops / (p.matrix_tflops * 1e6);
    const double vector = std::max(w.vector_ops / (p.vector_gflops * 1e3),
                                   w.vector_bytes / (p.vector_load_gbps * 1e3));
    const double stream_gbps =
        p.kind == Profile::Kind::Npu ? std::min(p.dma_gbps, p.dram_gbps) : p.dram_gbps;
    const double dram = w.dram_bytes / (stream_gbps * 1e3);
    Cost c;
    c.add(Category::Dispatch, p.op_dispatch_us);
    if (w.serial_matrix_vector) {
        if (matrix + vector >= dram) {
            c.add(Category::Matrix, matrix);
            c.add(Category::Vector, vector);
        } else {
            c.add(Category::Dma, dram);
        }
        return c;
    }
    const double bound = std::max({matrix, vector, dram});
    if (bound == 0.0) return c;
    if (bound == matrix) {
        c.add(Category::Matrix, matrix);
    } else if (bound == dram) {
        c.add(Category::Dma, dram);
    } else {
        c.add(Category::Vector, vector);
    }
    return c;
}

double map_us(const Profile& p, size_t bytes) {
    return p.map_fixed_us + p.map_us_per_mib * static_cast<double>(bytes) / (1 << 20);
}

double unmap_us(const Profile& p, size_t bytes) {
    return p.unmap_fixed_us + p.unmap_us_per_mib * static_cast<double>(bytes) / (1 << 20);
}

double copy_us(const Profile& p, size_t bytes) {
    return static_cast<double>(bytes) / (p.host_copy_gbps * 1e3);
}

double compile_us(const Profile& p, int n_layers) {
    const double per_graph_ms = p.graph_build_ms + p.graph_opt_ms;
    return per_graph_ms * 1e3 * n_layers / std::max(1, p.compile_ref_layers);
}

}  // namespace llada::npu
