// The CPU path of progressive revision (docs/step-engine.md, "Progressive revision"): a session
// of its own on the host CPU, with its own thread pool (never the dense path's:
// runtime/thread_pool.h is not re-entrant), over a mirror of the dense session's KV cache, run
// on a thread of its own while the dense forward runs. Both paths read the cache as the previous
// step left it; decode::Scheduler merges the slots each wrote at the step boundary.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "model/model.h"
#include "runtime/device.h"
#include "runtime/devices.h"
#include "runtime/kv_cache.h"
#include "runtime/thread_pool.h"

namespace llada::decode {

class CpuLane {
  public:
    // A lane for generations on a session over `like` (the mirror takes its shape). `cpu` is the
    // host CPU beside the dense device (runtime::companion_cpu): the lane's projection.
    // serial: the forward runs inside wait(), on the calling thread (the same work, in order).
    CpuLane(const model::Model& model, const runtime::KvCache& like, int threads,
            const runtime::PlanOptions& kernels, const runtime::CompanionCpu& cpu, bool serial);
    ~CpuLane();
    CpuLane(const CpuLane&) = delete;
    CpuLane& operator=(const CpuLane&) = delete;

    // Begins the forward of `batch` (its arrays must stay valid until wait()).
    void start(const runtime::Batch& batch);
    // Ends it; returns its logits [batch.n_out][n_vocab]. Rethrows the forward's error.
    const float* wait();

    // The mirror: the dense cache's slots, then as many scratch slots per sequence.
    runtime::KvCache& kv() { return kv_; }
    model::Session& session() { return session_; }
    int threads() const { return pool_.size(); }
    bool serial() const { return serial_; }
    bool projected() const;
    double last_ms() const { return last_ms_; }                      // host time of the forward
    double last_projected_ms() const { return last_projected_ms_; }  // 0 without a projection
    double copy_gbps() const { return copy_gbps_; }  // the projected CPU's copy bandwidth

  private:
    void run();
    void worker();

    runtime::KvCache kv_;
    runtime::ThreadPool pool_;
    std::unique_ptr<runtime::Device> device_;
    model::Session session_;
    bool serial_;
    double copy_gbps_ = 0.0;

    std::mutex mu_;
    std::condition_variable cv_;
    bool has_job_ = false, job_done_ = false, stop_ = false;
    runtime::Batch batch_{};
    const float* out_ = nullptr;
    std::exception_ptr error_;
    double last_ms_ = 0.0, last_projected_ms_ = 0.0;
    std::thread thread_;  // last: started once everything above exists
};

}  // namespace llada::decode
