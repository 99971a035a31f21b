// The decoding options, in one table: each option's command-line flag and request field
// (llada-server), its kind and range, the option group a policy must take for it
// (decode/registry.h) and its help. The command-line tools register their decoding flags from it
// (tools/flags.cpp, llada-bench), and the server's request parser validates its fields by it
// (tools/server_request.cpp), so a range cannot differ between them, and an option a policy
// does not take is refused by all of them with not_taken()'s words. The defaults are
// GenerateOptions' own (decode/policy.h).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "decode/policy.h"
#include "decode/registry.h"

namespace llada::decode {

enum class OptionKind {
    Int,     // an integer in [lo, hi]
    Real,    // a number in [lo, hi]
    Switch,  // on when given (a boolean field in a request)
    Seed,    // a 64-bit integer in [lo, hi]
    Count,   // 'auto' or an integer in [lo, hi] (the tool parses it; -1 is auto)
    Choice,  // one of a few words (the tool parses it)
    Text,    // a string (checked by the policy that reads it)
};

struct OptionSpec {
    const char* section;  // the --help section it is listed in
    const char* flag;     // "--threshold"
    const char* field;    // the request field ("threshold"), or null: not a request field
    OptionKind kind;
    double lo = 0.0, hi = 0.0;
    // 0 is the option's "not given" value (the policy's default then): given, it is refused.
    const char* zero_is_unset = nullptr;  // what a value is ("threshold"), or null
    int group = -1;                       // the Takes a policy needs for it, -1: every policy
    const char* metavar = "";
    std::string help;
    // Where the value lives in GenerateOptions (null: the tool keeps it, e.g. a Choice).
    void* (*place)(GenerateOptions&) = nullptr;

    bool taken_by(const PolicyInfo& p) const {
        return group < 0 || p.takes_option(static_cast<Takes>(group));
    }
    Takes takes() const { return static_cast<Takes>(group); }
};

// Every decoding option, in --help order.
std::span<const OptionSpec> decode_options();
// The option of a flag ("--threshold") or of a request field ("threshold"); null when none.
const OptionSpec* find_option(std::string_view flag);
const OptionSpec* find_field(std::string_view field);
// The option of a flag the caller knows is in the table (throws an internal error otherwise).
const OptionSpec& option(std::string_view flag);

// The words for a value out of range, a non-integer, and 0 given for an option whose 0 means
// "not given", in the caller's spelling of the option (`--threshold` or `'threshold'`); `hi`
// may tighten the table's upper bound (the server's limits).
std::string range_error(std::string_view name, const OptionSpec& s, double hi);
std::string zero_error(std::string_view name, const OptionSpec& s);

// Checks `value` against the option (its range up to min(hi, s.hi), an integer for an integer
// kind, 0 when it means "not given"); throws llada::Error with the words above.
void check_option(const OptionSpec& s, double value, std::string_view name, double hi);
// The same, then writes it into `opt` (an option with a place; a Switch takes 0 or 1).
void set_option(GenerateOptions& opt, const OptionSpec& s, double value, std::string_view name,
                double hi);

}  // namespace llada::decode
