// Places a plan's activations in one arena from their lifetimes.
#include "runtime/memory_planner.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace llada::runtime {
namespace {

struct Interval {
    int first, last;
};

Interval lifetime(const TensorDesc& t) {
    return {t.first_op, std::max(t.first_op, t.last_op)};
}

bool overlaps(Interval a, Interval b) {
    return a.first <= b.last && b.first <= a.last;
}

}  // namespace

MemoryPlanStats plan_memory(Plan& plan, size_t align) {
    const int n = static_cast<int>(plan.tensors.size());
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    // Largest first; ties by index so the plan is deterministic.
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return plan.tensor_bytes(a) > plan.tensor_bytes(b); });
    MemoryPlanStats stats;
    std::vector<int> placed;
    size_t arena = 0;
    for (int t : order) {
        const size_t size = (plan.tensor_bytes(t) + align - 1) / align * align;
        stats.naive_bytes += size;
        const Interval life = lifetime(plan.tensors[t]);
        // Occupied ranges of already placed tensors alive at the same time, sorted by offset.
        std::vector<std::pair<size_t, size_t>> busy;
        for (int p : placed) {
            if (overlaps(life, lifetime(plan.tensors[p]))) {
                const size_t ps = (plan.tensor_bytes(p) + align - 1) / align * align;
                busy.emplace_back(plan.tensors[p].offset, plan.tensors[p].offset + ps);
            }
        }
        std::sort(busy.begin(), busy.end());
        // Best fit: the smallest gap that holds the tensor, else the end.
        size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
        for (const auto& [lo, hi] : busy) {
            if (lo > cursor && lo - cursor >= size && lo - cursor < best_gap) {
                best = cursor;
                best_gap = lo - cursor;
            }
            cursor = std::max(cursor, hi);
        }
        if (best == SIZE_MAX) best = cursor;
        plan.tensors[t].offset = best;
        arena = std::max(arena, best + size);
        placed.push_back(t);
    }
    plan.arena_bytes = arena;
    stats.arena_bytes = arena;
    return stats;
}

bool memory_plan_is_valid(const Plan& plan) {
    const int n = static_cast<int>(plan.tensors.size());
    for (int a = 0; a < n; ++a) {
        const size_t a_lo = plan.tensors[a].offset, a_hi = a_lo + plan.tensor_bytes(a);
        if (a_hi > plan.arena_bytes) return false;
        for (int b = a + 1; b < n; ++b) {
            if (!overlaps(lifetime(plan.tensors[a]), lifetime(plan.tensors[b]))) continue;
            const size_t b_lo = plan.tensors[b].offset, b_hi = b_lo + plan.tensor_bytes(b);
            if (a_lo < b_hi && b_lo < a_hi && a_hi > a_lo && b_hi > b_lo) return false;
        }
    }
    return true;
}

}  // namespace llada::runtime
