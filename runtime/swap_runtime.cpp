// The host side of the NPU's memory runtime: window memory, its content, the prefetch thread.
#include "runtime/swap_runtime.h"

#include <sys/mman.h>

#include <cstring>

#include "util/error.h"

namespace llada::runtime {

WindowBuffer::WindowBuffer(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        throw Error("npu-sim: cannot reserve " + std::to_string(bytes >> 20) +
                    " MiB of address space for the device window");
    }
    data_ = static_cast<uint8_t*>(p);
}

WindowBuffer::~WindowBuffer() {
    if (data_) munmap(data_, bytes_);
}

bool WindowContent::holds(size_t offset, int weight) const {
    auto it = ranges_.find(offset);
    return it != ranges_.end() && it->second.weight == weight;
}

void WindowContent::record(size_t offset, size_t bytes, int weight) {
    // Drop every range that overlaps [offset, offset + bytes).
    auto it = ranges_.lower_bound(offset);
    if (it != ranges_.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second.bytes > offset) it = prev;
    }
    while (it != ranges_.end() && it->first < offset + bytes)
        it = ranges_.erase(it);
    ranges_.emplace(offset, Range{bytes, weight});
}

Prefetcher::Prefetcher() : thread_([this] { loop(); }) {}

Prefetcher::~Prefetcher() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Prefetcher::start(const std::vector<Job>* jobs, int n_slots) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        jobs_ = jobs;
        n_slots_ = n_slots < 1 ? 1 : n_slots;
        next_ = ready_ = released_ = 0;
        active_ = true;
    }
    cv_.notify_all();
}

void Prefetcher::wait_ready(int j) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_ > j; });
}

void Prefetcher::release(int j) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (j + 1 > released_) released_ = j + 1;
    }
    cv_.notify_all();
}

void Prefetcher::finish() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!active_) return;
    // Jobs still waiting for a slot get it now: nothing computes any more.
    released_ = static_cast<int>(jobs_->size());
    cv_.notify_all();
    cv_.wait(lock, [&] { return ready_ >= static_cast<int>(jobs_->size()); });
    active_ = false;
}

void Prefetcher::loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] {
            return stop_ || (active_ && next_ < static_cast<int>(jobs_->size()) &&
                             next_ - n_slots_ < released_);
        });
        if (stop_) return;
        const int j = next_++;
        const Job& job = (*jobs_)[j];
        lock.unlock();
        for (const Part& p : job)
            std::memcpy(p.dst, p.src, p.bytes);
        lock.lock();
        ready_ = j + 1;
        ++done_total_;
        cv_.notify_all();
    }
}

}  // namespace llada::runtime
