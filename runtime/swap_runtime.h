// The host side of the NPU's memory runtime: host memory standing in for the device window, a
// record of which weight each part of it holds, and the prefetch thread that copies the next
// streamed layer into its ring slot while the current layer computes (real concurrency).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace llada::runtime {

// `bytes` of address space backed lazily by the OS (pages cost memory only once written), so a
// 3.5 GiB window costs what is actually mapped into it.
class WindowBuffer {
  public:
    WindowBuffer() = default;
    explicit WindowBuffer(size_t bytes);
    ~WindowBuffer();
    WindowBuffer(const WindowBuffer&) = delete;
    WindowBuffer& operator=(const WindowBuffer&) = delete;
    uint8_t* data() const { return data_; }
    size_t size() const { return bytes_; }

  private:
    uint8_t* data_ = nullptr;
    size_t bytes_ = 0;
};

// Which weight (by id) occupies which bytes of the window, so content survives between plans
// that place a weight at the same offset and is known stale once something else is written over.
class WindowContent {
  public:
    bool holds(size_t offset, int weight) const;
    void record(size_t offset, size_t bytes, int weight);  // forgets whatever it overlaps
    void clear() { ranges_.clear(); }

  private:
    struct Range {
        size_t bytes;
        int weight;
    };
    std::map<size_t, Range> ranges_;
};

// Copies jobs (lists of src -> dst byte ranges) in order on its own thread. Job j may start only
// once job j - n_slots has been released (its ring slot is free again).
class Prefetcher {
  public:
    struct Part {
        const uint8_t* src;
        uint8_t* dst;
        size_t bytes;
    };
    using Job = std::vector<Part>;

    Prefetcher();
    ~Prefetcher();
    Prefetcher(const Prefetcher&) = delete;
    Prefetcher& operator=(const Prefetcher&) = delete;

    // Starts a forward over `jobs` (which must stay valid until finish()).
    void start(const std::vector<Job>* jobs, int n_slots);
    void wait_ready(int j);  // blocks until job j is copied
    void release(int j);     // job j's slot may be reused
    void finish();           // waits for the remaining jobs and ends the forward
    int64_t jobs_done() const { return done_total_; }

  private:
    void loop();
    std::mutex mu_;
    std::condition_variable cv_;
    const std::vector<Job>* jobs_ = nullptr;
    int n_slots_ = 1;
    int next_ = 0, ready_ = 0, released_ = 0;
    bool active_ = false, stop_ = false;
    int64_t done_total_ = 0;
    std::thread thread_;
};

}  // namespace llada::runtime
