// The exception type for anything a user can cause: bad files, bad options, impossible requests.
#pragma once

#include <stdexcept>
#include <string>

namespace llada {

// Thrown for user-caused problems; the message names the problem and, where useful, a hint.
// Broken internal invariants use assert() instead.
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace llada
