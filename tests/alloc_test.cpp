// Nothing is allocated inside the denoising loop: global operator new is counted while every
// diffusion policy runs, and the count must not move between the second step and the last.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "decode/policy.h"
#include "model/model.h"
#include "runtime/device.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}

void* operator new(std::size_t n) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
    return operator new(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    const size_t al = static_cast<size_t>(a);
    if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
    throw std::bad_alloc();
}
// The nothrow forms too (std::stable_sort's temporary buffer uses them): counted like the
// others, and allocated with malloc so that the deletes above match them (AddressSanitizer checks).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
    return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    const size_t al = static_cast<size_t>(a);
    return std::aligned_alloc(al, (n + al - 1) / al * al);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

using namespace llada;

TEST(Allocations, NoneInsideTheDenoisingLoop) {
    const auto path = std::filesystem::path(LLADA_TEST_DATA) / "decode" / "llada-gqa-tied.gguf";
    auto m = model::Model::load(path.string());
    for (int threads : {1, 2}) {
        runtime::ThreadPool pool(threads);
        auto dev = runtime::make_cpu_device(pool);
        for (const char* policy : {"vanilla", "prefix-cache", "dual-cache", "threshold"}) {
            for (bool fused : {true, false}) {
                decode::GenerateOptions opt;
                opt.gen = 32;
                opt.block = 8;
                opt.steps = 32;
                opt.early_stop = 0;
                opt.fused_sampling = fused;
                if (std::string(policy) == "threshold") opt.threshold = 0.5;
                auto p = decode::make_policy(policy, *m, *dev, opt, {258, 257, -1});
                int64_t at_step1 = -1, at_last = -1;
                int steps = 0;
                std::vector<int32_t> prompt = {256, 72, 101, 108, 108, 111};
                p->generate(prompt, [&](const decode::StepEvent& ev) {
                    ++steps;
                    const int64_t now = g_allocations.load();
                    if (ev.info.step == 1) at_step1 = now;
                    at_last = now;
                });
                ASSERT_GE(steps, 8) << policy;
                EXPECT_EQ(at_last, at_step1)
                    << policy << (fused ? " fused" : " full logits") << ", threads " << threads;
            }
        }
    }
}
