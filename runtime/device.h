// The device interface: compile a plan once per row capacity, then execute it many times.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kv_cache.h"
#include "runtime/plan.h"
#include "runtime/thread_pool.h"

namespace llada::runtime {

// One execution: a window of rows (token, position, sequence) and the rows whose logits are
// wanted. Arrays are owned by the caller and must outlive the call.
struct Batch {
    int64_t n_rows = 0;
    const int32_t* tokens = nullptr;  // [n_rows]
    const int32_t* pos = nullptr;     // [n_rows] canvas positions
    const int32_t* seq = nullptr;     // [n_rows] sequence (KV cache slot) of each row
    int64_t n_out = 0;
    const int32_t* out_rows = nullptr;  // [n_out] indices into the window
    // Non-causal attention of a row of sequence s covers cache positions [0, kv_len[s]); the
    // window's own K/V are stored before attention, so kv_len includes them.
    const int32_t* kv_len = nullptr;  // [n_seq]
};

// Called after every op with its output (float32 tensors only), for dumps and parity tests.
using OpObserver = std::function<void(int op_index, const Op& op, const TensorDesc& out,
                                      const float* data, int64_t rows)>;

class CompiledPlan {
  public:
    virtual ~CompiledPlan() = default;
    virtual const Plan& plan() const = 0;
    // The plan's output (logits [n_out][n_vocab]) of the last execution.
    virtual const float* output() const = 0;
    virtual size_t arena_bytes() const = 0;
};

class Device {
  public:
    virtual ~Device() = default;
    virtual std::string name() const = 0;
    virtual std::unique_ptr<CompiledPlan> compile(Plan plan) = 0;
    virtual void execute(CompiledPlan& compiled, const Batch& batch, KvCache& kv,
                         const OpObserver* observer = nullptr) = 0;
};

// The CPU device: SIMD kernels split over the thread pool.
std::unique_ptr<Device> make_cpu_device(ThreadPool& pool);

}  // namespace llada::runtime
