// The NPU's memory runtime: the window layout planner's invariants (live weights never overlap,
// everything fits the window, the plan is deterministic), the baseline map-on-use policy, the
// prefetch thread, and identical outputs from the baseline and the optimised runtime on a model
// that does not fit the window.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <random>

#include "decode/policy.h"
#include "model/model.h"
#include "runtime/devices.h"
#include "runtime/swap_runtime.h"
#include "runtime/window_planner.h"
#include "tools/synthetic.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;

namespace {

// A table of `n` units of 1-7 weights with random sizes, one unit after the other in op order.
runtime::WeightTable random_table(std::mt19937& rng, int n) {
    runtime::WeightTable t;
    std::uniform_int_distribution<int> n_weights(1, 7);
    std::uniform_int_distribution<size_t> bytes(1000, 3 << 20);
    int op = 0;
    for (int u = 0; u < n; ++u) {
        runtime::WeightTable::Unit unit;
        unit.name = "blk." + std::to_string(u);
        unit.first_op = op;
        for (int w = n_weights(rng); w > 0; --w) {
            runtime::WeightTable::Weight weight;
            weight.bytes = bytes(rng);
            weight.unit = u;
            weight.name = unit.name + ".w" + std::to_string(w);
            unit.weights.push_back(static_cast<int>(t.weights.size()));
            unit.bytes += (weight.bytes + 4095) / 4096 * 4096;
            t.weights.push_back(weight);
            op += 2;
        }
        unit.last_op = op - 1;
        t.units.push_back(unit);
    }
    return t;
}

bool same_layout(const runtime::WindowLayout& a, const runtime::WindowLayout& b) {
    return a.weight_offset == b.weight_offset && a.unit_slot == b.unit_slot &&
           a.streamed == b.streamed && a.n_slots == b.n_slots && a.slot_bytes == b.slot_bytes &&
           a.reserved_offset == b.reserved_offset;
}

}  // namespace

TEST(WindowPlanner, LayoutsAreSoundFitAndAreDeterministic) {
    std::mt19937 rng(42);
    int streamed_layouts = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const int n = 1 + static_cast<int>(rng() % 40);
        const auto table = random_table(rng, n);
        size_t total = 0, largest = 0;
        for (const auto& u : table.units) {
            total += u.bytes;
            largest = std::max(largest, u.bytes);
        }
        const size_t reserve = rng() % (8 << 20);
        const size_t lo = reserve + 2 * largest + 8192;
        const size_t window = lo + rng() % (total + (total >> 2));
        const int slots = 1 + static_cast<int>(rng() % 3);
        const auto l = runtime::plan_window(table, reserve, window, slots);
        ASSERT_EQ(runtime::check_window_layout(l, table), "") << "trial " << trial;
        // Everything fits: weights, ring and reserve inside the window.
        EXPECT_LE(l.ring_offset + l.n_slots * l.slot_bytes, l.reserved_offset);
        EXPECT_LE(l.reserved_offset + l.reserved_bytes, window);
        EXPECT_GE(l.reserved_bytes, reserve);
        EXPECT_EQ(l.resident_bytes + l.streamed_bytes, [&] {
            size_t s = 0;
            for (const auto& w : table.weights)
                s += w.bytes;
            return s;
        }());
        // Few, large mappings: the resident region, each slot, the reserve.
        EXPECT_LE(l.mappings, 2 + l.n_slots);
        if (total + reserve + 4096 <= window) {
            EXPECT_TRUE(l.streamed.empty());
        }
        streamed_layouts += !l.streamed.empty();
        EXPECT_TRUE(same_layout(l, runtime::plan_window(table, reserve, window, slots)));
    }
    EXPECT_GT(streamed_layouts, 100);  // the trials exercise the ring
}

TEST(WindowPlanner, StreamedUnitsAreSpreadOverTheForward) {
    std::mt19937 rng(1);
    runtime::WeightTable t;
    for (int u = 0; u < 32; ++u) {
        runtime::WeightTable::Unit unit;
        unit.name = "blk." + std::to_string(u);
        unit.first_op = 10 * u;
        unit.last_op = 10 * u + 9;
        unit.bytes = 1 << 20;
        unit.weights = {u};
        t.units.push_back(unit);
        t.weights.push_back({nullptr, size_t{1} << 20, unit.name, u});
    }
    // Room for 25 units + 2 slots: 7 streamed, spread with 3-4 resident units before each.
    const auto l = runtime::plan_window(t, 0, 27 << 20, 2);
    ASSERT_EQ(l.streamed.size(), 7u);
    EXPECT_EQ(l.streamed, (std::vector<int>{3, 8, 12, 17, 21, 26, 31}));
    EXPECT_EQ(runtime::check_window_layout(l, t), "");
}

TEST(WindowPlanner, AWindowTooSmallForOneLayerIsAnError) {
    std::mt19937 rng(5);
    const auto table = random_table(rng, 4);
    size_t largest = 0;
    for (const auto& u : table.units)
        largest = std::max(largest, u.bytes);
    try {
        runtime::plan_window(table, 1 << 20, largest, 2);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot hold one layer"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(runtime::plan_window(table, 10 << 20, 4 << 20, 2), Error);
}

// Map on use with LRU eviction: a cyclic pass over more bytes than the window misses on every
// access once warm (the baseline's thrashing), and live mappings never overlap.
TEST(MapOnUse, CyclicAccessBeyondTheWindowThrashes) {
    runtime::MapOnUse m(10 * 4096, 4096);
    int64_t misses_second_pass = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (int w = 0; w < 6; ++w) {
            const auto s = m.touch(w, 2 * 4096 - 100);
            if (pass == 1) misses_second_pass += !s.hit;
            EXPECT_LE(m.window().used(), m.capacity());
        }
    }
    EXPECT_EQ(misses_second_pass, 6);
    // Within the window everything stays mapped.
    runtime::MapOnUse fits(10 * 4096, 4096);
    for (int pass = 0; pass < 3; ++pass) {
        for (int w = 0; w < 4; ++w) {
            const auto s = fits.touch(w, 2 * 4096);
            EXPECT_EQ(s.hit, pass > 0);
        }
    }
    EXPECT_THROW(fits.touch(99, 11 * 4096), Error);
}

TEST(Prefetcher, CopiesInOrderAndWaitsForFreeSlots) {
    runtime::Prefetcher p;
    std::vector<std::vector<uint8_t>> src(6, std::vector<uint8_t>(1 << 16));
    std::vector<uint8_t> slots(2 << 16);
    std::vector<runtime::Prefetcher::Job> jobs;
    for (int j = 0; j < 6; ++j) {
        std::fill(src[j].begin(), src[j].end(), static_cast<uint8_t>(j + 1));
        jobs.push_back({{src[j].data(), slots.data() + (j % 2) * (1 << 16), src[j].size()}});
    }
    for (int forward = 0; forward < 3; ++forward) {
        p.start(&jobs, 2);
        for (int j = 0; j < 6; ++j) {
            p.wait_ready(j);
            // The slot holds job j's bytes until it is released.
            EXPECT_EQ(slots[(j % 2) * (1 << 16) + 123], j + 1);
            p.release(j);
        }
        p.finish();
    }
    EXPECT_EQ(p.jobs_done(), 18);
}

// A synthetic Q4_0 model (6 layers) in a window that holds about half of it: the optimised
// runtime streams layers through its ring with the prefetch thread, the baseline remaps on every
// forward, and both give exactly the outputs of a window that holds everything.
TEST(NpuMemory, BaselineAndOptimisedGiveIdenticalOutputs) {
    const fs::path dir = fs::temp_directory_path() / "llada_npu_memory_test";
    fs::create_directories(dir);
    const std::string path = (dir / "synthetic-6l.gguf").string();
    runtime::ThreadPool pool(2);
    tools::write_synthetic(tools::parse_shape("layers=6,d=128,heads=4,ffn=256,vocab=512,ctx=256"),
                           format::TensorType::Q4_0, 7, path, pool);
    auto m = model::Model::load(path);
    decode::GenerateOptions opt;
    opt.gen = 32;
    opt.steps = 32;
    opt.block = 16;
    opt.early_stop = 0;
    decode::TokenIds ids;
    ids.mask = 511;
    const std::vector<int32_t> prompt = {505, 72, 101, 108, 108, 111};
    struct Run {
        decode::GenerateResult res;
        runtime::DeviceReport rep;
    };
    auto run = [&](const std::string& memory, const std::string& overrides) {
        runtime::DeviceConfig c;
        c.device = "npu-sim";
        c.memory = memory;
        c.overrides = overrides;
        auto dev = runtime::make_device(c, pool);
        Run r;
        r.res = decode::make_policy("prefix-cache", *m, *dev, opt, ids)->generate(prompt);
        r.rep = *dev->report();
        return r;
    };
    const std::string small = "window_mib=0.75";
    const Run all = run("optimised", "");
    const Run opt_small = run("optimised", small);
    const Run base_small = run("baseline", small);
    EXPECT_EQ(opt_small.res.canvas, all.res.canvas);
    EXPECT_EQ(base_small.res.canvas, all.res.canvas);
    // Everything resident in the large window; streaming in the small one.
    EXPECT_EQ(all.rep.streamed_bytes, 0u);
    EXPECT_GT(opt_small.rep.streamed_bytes, 0u);
    EXPECT_GT(opt_small.rep.resident_bytes, 0u);
    EXPECT_EQ(opt_small.rep.ring_slots, 2);
    EXPECT_LE(opt_small.rep.mappings, 4);  // resident region, two slots, the reserve
    // The baseline remaps weights on every forward: many more mappings and bytes.
    const int64_t forwards = base_small.rep.executions;
    EXPECT_GT(base_small.rep.mappings, forwards);
    EXPECT_GT(base_small.rep.unmappings, forwards);
    EXPECT_GT(base_small.rep.projected_us[npu::Category::MapUnmap],
              opt_small.rep.projected_us[npu::Category::MapUnmap]);
    EXPECT_GT(opt_small.rep.bytes_copied, all.rep.bytes_copied);
    fs::remove_all(dir);
}

// The overlap is modelled: a slow copy thread makes the NPU wait (stall time), a fast one hides
// the copies entirely.
TEST(NpuMemory, StallsAppearWhenCopiesOutrunTheCompute) {
    const fs::path dir = fs::temp_directory_path() / "llada_npu_stall_test";
    fs::create_directories(dir);
    const std::string path = (dir / "synthetic-6l.gguf").string();
    runtime::ThreadPool pool(1);
    tools::write_synthetic(tools::parse_shape("layers=6,d=128,heads=4,ffn=256,vocab=512,ctx=256"),
                           format::TensorType::Q4_0, 7, path, pool);
    auto m = model::Model::load(path);
    auto stall_of = [&](const std::string& overrides) {
        runtime::DeviceConfig c;
        c.device = "npu-sim";
        c.overrides = overrides;
        c.timing_only = true;
        auto dev = runtime::make_device(c, pool);
        model::Session s(*m, *dev, 1, 32, 32, 32);
        std::vector<int32_t> tok(32, 7), pos(32), seq(32, 0), out(32);
        for (int i = 0; i < 32; ++i)
            pos[i] = out[i] = i;
        int32_t kv = 32;
        runtime::Batch b{32, tok.data(), pos.data(), seq.data(), 32, out.data(), &kv};
        s.forward_stats(b);
        s.forward_stats(b);
        return dev->report()->stall_us();
    };
    EXPECT_GT(stall_of("window_mib=0.75,host_copy_gbps=0.01"), 0.0);
    EXPECT_EQ(stall_of("window_mib=0.75,host_copy_gbps=1000"), 0.0);
    fs::remove_all(dir);
}
