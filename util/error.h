// The exception type for anything a user can cause: bad files, bad options, impossible requests.
#pragma once

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace llada {

// Thrown for user-caused problems; the message names the problem and, where useful, a hint.
// Broken internal invariants use assert() instead.
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A number as a message shows it: integers without a fraction ("256", not "256.000000"),
// others with the digits they need ("0.9", "1e-05").
inline std::string number_str(double v) {
    char buf[32];
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.0f", v);
    } else {
        std::snprintf(buf, sizeof buf, "%.6g", v);
    }
    return buf;
}

}  // namespace llada
