// The decoding options' table (decode/options.h) as its three readers see it: llada-cli's flags
// (tools/flags.cpp), llada-server's request fields (tools/server_request.cpp) and the refusals
// of an option a policy does not take. For every option of the table, each reader takes the
// range's ends and refuses just past them, and refuses the option for a policy that does not
// take it with not_taken()'s words.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "decode/options.h"
#include "decode/registry.h"
#include "tools/common.h"
#include "tools/server_request.h"
#include "util/error.h"

namespace llada {
namespace {

using decode::OptionKind;
using decode::OptionSpec;
using json = nlohmann::json;

std::string model_path() {
    return std::string(LLADA_SOURCE_DIR) + "/models/tiny-llada-m.gguf";
}

// llada-cli's decoding flags given `argv` (after the program name), finished on the bundled
// model; the error text, or "" when they were taken.
std::string cli_error(const model::Model& m, std::vector<std::string> argv) {
    tools::ArgTable args("t", "t");
    tools::DecodeFlags dec;
    dec.add_to(args);
    argv.insert(argv.begin(), "t");
    std::vector<char*> ptrs;
    for (auto& a : argv)
        ptrs.push_back(a.data());
    try {
        args.parse(static_cast<int>(ptrs.size()), ptrs.data());
        dec.finish(args, m);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

tools::ServerLimits limits() {
    tools::ServerLimits l;
    l.max_gen = 64;
    return l;
}

std::string server_error(const json& body, const std::string& policy = "dual-cache") {
    decode::GenerateOptions defaults;
    defaults.gen = 32;
    defaults.block = 32;
    defaults.threshold = 0.9;
    try {
        tools::parse_request(body, policy, defaults, limits(), false);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

bool numeric(const OptionSpec& s) {
    return s.kind == OptionKind::Int || s.kind == OptionKind::Real || s.kind == OptionKind::Seed;
}

std::string num(double v) {
    return number_str(v);
}

TEST(OptionTable, FlagsAndFieldsAreUniqueAndEveryOneHasAPlaceOrAnOwner) {
    std::set<std::string> flags, fields;
    for (const OptionSpec& s : decode::decode_options()) {
        EXPECT_TRUE(flags.insert(s.flag).second) << s.flag;
        if (s.field != nullptr) EXPECT_TRUE(fields.insert(s.field).second) << s.field;
        EXPECT_FALSE(s.help.empty()) << s.flag;
        if (numeric(s)) {
            EXPECT_LE(s.lo, s.hi) << s.flag;
            EXPECT_NE(s.place, nullptr) << s.flag;
        }
    }
    // The option groups of the registry each have a flag.
    for (decode::Takes t :
         {decode::Takes::Blocks, decode::Takes::Steps, decode::Takes::CommitRule,
          decode::Takes::Refresh, decode::Takes::Revise, decode::Takes::SelfCheck,
          decode::Takes::Lookahead, decode::Takes::Pipeline, decode::Takes::DreamSampler}) {
        bool found = false;
        for (const OptionSpec& s : decode::decode_options())
            found = found || (s.group >= 0 && s.takes() == t);
        EXPECT_TRUE(found) << static_cast<int>(t);
    }
}

TEST(OptionTable, TheCliTakesEachNumericOptionsRangeAndRefusesPastIt) {
    auto m = model::Model::load(model_path());
    for (const OptionSpec& s : decode::decode_options()) {
        if (!numeric(s)) continue;
        // A policy that takes the option (the step engine's own checks aside).
        std::vector<std::string> base = {"--policy", "mbsd", "--threshold", "0.5"};
        if (s.group >= 0 && s.takes() == decode::Takes::Pipeline) base = {"--policy", "pipeline"};
        if (s.group >= 0 && s.takes() == decode::Takes::Revise) base.push_back("--revise");
        if (s.group >= 0 && s.takes() == decode::Takes::SelfCheck) base.push_back("--self-check");
        if (s.group >= 0 && s.takes() == decode::Takes::DreamSampler) base = {"--policy", "dream"};
        if (s.group >= 0 && s.takes() == decode::Takes::Steps) base = {"--policy", "vanilla"};
        if (s.group >= 0 && s.takes() == decode::Takes::Refresh) base = {"--policy", "dual-cache"};
        if (std::string(s.flag) == "--threshold" || std::string(s.flag) == "--factor") {
            base = {"--policy", "dual-cache"};
        }
        const bool integral = s.kind != OptionKind::Real;
        const double past = integral ? s.hi + 1 : s.hi * 1.5 + 1;
        auto with = [&](double v) {
            auto a = base;
            a.push_back(s.flag);
            a.push_back(integral ? std::to_string(static_cast<long long>(v)) : num(v));
            return a;
        };
        const std::string over = cli_error(*m, with(past));
        EXPECT_NE(over.find("out of range"), std::string::npos) << s.flag << ": " << over;
        // The range's ends parse (what the engine then makes of them is its own check).
        for (double v : {s.lo, s.hi}) {
            const std::string e = cli_error(*m, with(v));
            EXPECT_EQ(e.find("out of range"), std::string::npos) << s.flag << " " << v << ": " << e;
        }
    }
}

TEST(OptionTable, TheServerTakesTheSameRangesCappedByItsLimits) {
    for (const OptionSpec& s : decode::decode_options()) {
        if (s.field == nullptr || !(numeric(s) || s.kind == OptionKind::Count)) continue;
        const std::string f = s.field;
        // The lengths are capped by --max-gen.
        const bool capped = f == "max_tokens" || f == "block" || f == "lookahead";
        const double hi = capped ? limits().max_gen : s.hi;
        // The server's default policy, or the first that takes the option.
        std::string policy = "dual-cache";
        if (!s.taken_by(decode::policy_info(policy))) {
            for (const decode::PolicyInfo& p : decode::policies()) {
                if (s.taken_by(p)) {
                    policy = p.name;
                    break;
                }
            }
        }
        const double past = s.kind == OptionKind::Real ? hi * 1.5 + 1 : hi + 1;
        const std::string over = server_error({{"prompt", "x"}, {f, past}}, policy);
        EXPECT_NE(over.find(decode::range_error("'" + f + "'", s, hi)), std::string::npos)
            << f << ": " << over;
        EXPECT_NE(over.find("[" + num(s.lo) + ", " + num(hi) + "]"), std::string::npos) << over;
        const std::string low = server_error({{"prompt", "x"}, {f, s.lo - 1}}, policy);
        EXPECT_NE(low.find("must be in ["), std::string::npos) << f << ": " << low;
        if (s.kind != OptionKind::Real) {
            const std::string frac = server_error({{"prompt", "x"}, {f, s.lo + 0.5}}, policy);
            EXPECT_NE(frac.find("'" + f + "' must be an integer"), std::string::npos) << frac;
        }
    }
    // 0 where it means "not given": the same words as the CLI's, in the field's spelling.
    const OptionSpec& t = decode::option("--threshold");
    EXPECT_NE(server_error({{"prompt", "x"}, {"threshold", 0}})
                  .find(decode::zero_error("'threshold'", t)),
              std::string::npos);
    auto m = model::Model::load(model_path());
    EXPECT_NE(cli_error(*m, {"--policy", "dual-cache", "--threshold", "0"})
                  .find(decode::zero_error("--threshold", t)),
              std::string::npos);
}

TEST(OptionTable, AnOptionAPolicyDoesNotTakeIsRefusedByBothInTheRegistrysWords) {
    auto m = model::Model::load(model_path());
    int checked_cli = 0, checked_server = 0;
    for (const OptionSpec& s : decode::decode_options()) {
        if (s.group < 0) continue;
        for (const decode::PolicyInfo& p : decode::policies()) {
            if (s.taken_by(p) || decode::engine_refuses(p, s.takes())) continue;
            // A value the option takes.
            std::vector<std::string> argv = {"--policy", p.name, s.flag};
            std::string value = s.kind == OptionKind::Choice || s.kind == OptionKind::Text ? "mask"
                                : s.kind == OptionKind::Count
                                    ? "4"
                                    : num(std::max(s.lo, std::min(s.hi, 1.0)));
            if (std::string(s.flag) == "--pipeline-verify") value = "shadow";
            if (std::string(s.flag) == "--revise-mode") value = "replace";
            if (std::string(s.flag) == "--revise-context") value = "fresh";
            if (std::string(s.flag) == "--revise-tail") value = "cpu";
            if (s.kind != OptionKind::Switch) argv.push_back(value);
            const std::string e = cli_error(*m, argv);
            EXPECT_NE(e.find(decode::not_taken(s.flag, s.takes(), p)), std::string::npos)
                << s.flag << " with " << p.name << ": " << e;
            ++checked_cli;
            if (s.field == nullptr) continue;
            json v = s.kind == OptionKind::Switch ? json(true)
                                                  : json(s.kind == OptionKind::Real ? 0.5 : 4.0);
            const std::string f = s.field;
            const std::string se = server_error({{"prompt", "x"}, {f, v}}, p.name);
            EXPECT_NE(se.find(decode::not_taken("'" + f + "'", s.takes(), p, "policy ")),
                      std::string::npos)
                << f << " with " << p.name << ": " << se;
            ++checked_server;
        }
    }
    // ar and dream refuse the step engine's options; the other way round, the sampler's.
    EXPECT_GT(checked_cli, 30);
    EXPECT_GT(checked_server, 5);
}

}  // namespace
}  // namespace llada
