// The CPU path of progressive revision (decode/cpu_lane.h).
#include "decode/cpu_lane.h"

#include <chrono>

namespace llada::decode {

CpuLane::CpuLane(const model::Model& model, const runtime::KvCache& like, int threads,
                 const runtime::PlanOptions& kernels, const runtime::CompanionCpu& cpu, bool serial)
    // Slots [n_pos, 2 n_pos) of each sequence hold the check rows' own K/V (beyond every
    // row's attention span).
    : kv_(like.n_layer(), like.n_seq(), 2 * like.n_pos(), like.n_kv_head(), like.head_dim(),
          like.f16()),
      pool_(threads),
      device_(runtime::make_cpu_device(pool_, cpu.device)),
      // Per sequence: a K/V refresh and a check row per position at most.
      session_(model, *device_, kv_, int64_t{2} * like.n_seq() * like.n_pos(),
               int64_t{like.n_seq()} * like.n_pos(), kernels),
      serial_(serial),
      copy_gbps_(cpu.copy_gbps) {
    if (!serial_) thread_ = std::thread([this] { worker(); });
}

CpuLane::~CpuLane() {
    if (thread_.joinable()) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
}

bool CpuLane::projected() const {
    const runtime::DeviceReport* r = device_->report();
    return r != nullptr && r->projected;
}

void CpuLane::run() {
    const runtime::DeviceReport* rep = device_->report();
    const double proj0 = rep ? rep->projected_ms() : 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        out_ = session_.forward(batch_);
    } catch (...) {
        error_ = std::current_exception();
    }
    last_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    last_projected_ms_ = rep && rep->projected ? rep->projected_ms() - proj0 : 0.0;
}

void CpuLane::worker() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        cv_.wait(lock, [this] { return has_job_ || stop_; });
        if (stop_) return;
        has_job_ = false;
        lock.unlock();
        run();
        lock.lock();
        job_done_ = true;
        cv_.notify_all();
    }
}

void CpuLane::start(const runtime::Batch& batch) {
    std::lock_guard<std::mutex> lock(mu_);
    batch_ = batch;
    out_ = nullptr;
    error_ = nullptr;
    job_done_ = false;
    if (serial_) return;
    has_job_ = true;
    cv_.notify_all();
}

const float* CpuLane::wait() {
    if (serial_) {
        run();
    } else {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return job_done_; });
    }
    if (error_) std::rethrow_exception(error_);
    return out_;
}

}  // namespace llada::decode
