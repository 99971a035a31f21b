// Places a plan's activations in one arena from their lifetimes, reusing memory between
// tensors that are never alive at the same time.
#pragma once

#include <cstddef>

#include "runtime/plan.h"

namespace llada::runtime {

struct MemoryPlanStats {
    size_t arena_bytes = 0;  // what the planner needs
    size_t naive_bytes = 0;  // the sum of all tensor sizes (one buffer each)
};

// Assigns TensorDesc::offset for every tensor and Plan::arena_bytes. Greedy by size: the largest
// tensors are placed first, each at the lowest offset that does not overlap a tensor whose
// lifetime [first_op, last_op] intersects its own. Deterministic. Offsets are `align`-aligned.
MemoryPlanStats plan_memory(Plan& plan, size_t align = 64);

// True when no two tensors that are alive at the same op share bytes (used by tests and asserts).
bool memory_plan_is_valid(const Plan& plan);

}  // namespace llada::runtime
