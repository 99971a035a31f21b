// Small text helpers shared by the tools.
#pragma once

#include <string>

namespace llada {

// `s` without leading and trailing ASCII whitespace (space, \t, \r, \n, \f, \v).
inline std::string trim(const std::string& s) {
    const char* ws = " \t\r\n\f\v";
    const size_t a = s.find_first_not_of(ws);
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

}  // namespace llada
