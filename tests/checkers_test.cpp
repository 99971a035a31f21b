// The `real` suite's answer checkers (tools/checkers.h) against hand-made verdicts: right answers
// and near misses written by train/make_checker_cases.py, which train/test_train.py holds the
// Python checkers to as well, so llada-eval and the training side score by one rule.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tools/checkers.h"
#include "tools/eval.h"
#include "util/error.h"

using namespace llada;

TEST(Checkers, HandMadeVerdicts) {
    std::ifstream f(std::string(LLADA_TEST_DATA) + "/checkers/cases.jsonl");
    ASSERT_TRUE(f) << "tests/data/checkers/cases.jsonl is missing";
    int n = 0, valid = 0;
    for (std::string line; std::getline(f, line);) {
        const auto c = nlohmann::json::parse(line);
        const std::string task = c["task"];
        ASSERT_TRUE(tools::has_checker(task)) << task;
        EXPECT_EQ(tools::check_answer(task, c["prompt"], c["text"]), c["valid"].get<bool>())
            << task << ": " << c["why"].get<std::string>() << "\n  " << c["text"];
        ++n;
        valid += c["valid"].get<bool>();
    }
    EXPECT_GE(n, 30);
    EXPECT_GE(valid, 5);
    EXPECT_GE(n - valid, 20);
}

// llada-eval's scoring: a checker task ignores the file's reference answer (one valid answer
// of many) and the regex; other tasks compare with the answer.
TEST(Checkers, ScoreUsesTheCheckerOnlyForItsTasks) {
    const tools::AnswerMatcher exact;
    const tools::Problem pick{"rpick",
                              "pick 2 of a10 b11 c12 d13 e14 f15 g16 h17 i18 j19 k20 l21 m22 n23 "
                              "o24 p25 q26 r27 s28 t29:",
                              "a10 b11"};
    EXPECT_TRUE(tools::score(exact, pick, "a10 b11"));
    EXPECT_TRUE(tools::score(exact, pick, " t29 c12\n"));  // another valid answer
    EXPECT_FALSE(tools::score(exact, pick, "t29 t29"));
    const tools::Problem ladd{"ladd", "0000000001+0000000002=", "exact"};
    EXPECT_TRUE(tools::score(exact, ladd, " exact "));
    EXPECT_FALSE(tools::score(exact, ladd, "exacts"));
    EXPECT_FALSE(tools::has_checker("ladd"));
    EXPECT_THROW(tools::check_answer("ladd", "x", "y"), Error);
}
