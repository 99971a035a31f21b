// Helpers shared by the test suites: running a tool of the build, and running a kernel on every
// instruction set Highway compiled and the machine supports.
#pragma once

// LLADA_TEST_ASAN: built with AddressSanitizer, under g++ (__SANITIZE_ADDRESS__) or clang
// (__has_feature), for the tests that must size themselves or skip under it.
#if defined(__SANITIZE_ADDRESS__)
#define LLADA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LLADA_TEST_ASAN 1
#endif
#endif

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include "hwy/targets.h"

namespace llada::test {

struct CommandResult {
    int status = -1;  // exit status, -1 when the process did not exit normally
    std::string out;  // stdout
    std::string err;  // stderr
};

// Runs a shell command, capturing stdout and stderr (through a file named after `tag` and the
// process, so tests running side by side do not share it).
inline CommandResult run_command(const std::string& cmd, const std::string& tag) {
    namespace fs = std::filesystem;
    // The process id too: ctest -j runs a suite's tests as concurrent processes.
    const fs::path err_file =
        fs::temp_directory_path() / ("llada_" + tag + "." + std::to_string(getpid()) + ".stderr");
    CommandResult r;
    FILE* p = popen((cmd + " 2>" + err_file.string()).c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        r.out.append(buf, n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    {
        std::ifstream e(err_file);
        r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
    }
    fs::remove(err_file);
    return r;
}

// Runs `body` once per compiled and supported instruction set, naming it on failure.
template <typename F>
void for_each_target(F body) {
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        SCOPED_TRACE(std::string("target ") + hwy::TargetName(target));
        body();
    }
    hwy::SetSupportedTargetsForTest(0);
}

}  // namespace llada::test
