// Microbenchmarks of this machine's ceilings for roofline tables (single-threaded bodies; the
// caller runs them on every thread and times them).
#pragma once

#include <cstdint>

namespace llada::kernels {

// Runs `iters` rounds of independent FMA chains; returns the floating-point operations done.
double fma_flops(int64_t iters, float* sink);
// Runs `iters` rounds of independent u8 x s8 dot-product chains; returns the int8 operations
// done (2 per multiply-accumulate).
double int8_ops(int64_t iters, float* sink);
// The same int8 operations inside the instruction mix of a kernel for formats with a float
// scale per 32 values (the six-row VNNI tile on L1-resident data; the raw loop on targets
// without that tile): its ratio to int8_ops is the share of the raw rate such a kernel can reach.
double int8_block_ops(int64_t iters, float* sink);
// Streams through n floats; returns the bytes read.
double read_bytes(const float* data, int64_t n, float* sink);

}  // namespace llada::kernels
