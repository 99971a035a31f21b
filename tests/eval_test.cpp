// llada-eval's pieces: task files, answer extraction and normalisation, Wilson intervals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tools/eval.h"
#include "util/error.h"

using namespace llada;
using namespace llada::tools;
namespace fs = std::filesystem;

TEST(Answer, ExactMatchAfterTrimming) {
    AnswerMatcher m;
    EXPECT_TRUE(m.correct("  12+35=47\n", "12+35=47"));
    EXPECT_TRUE(m.correct("a b", " a b "));
    EXPECT_FALSE(m.correct("a  b", "a b"));  // inner whitespace is significant
    EXPECT_FALSE(m.correct("47.", "47"));    // without a regex nothing but whitespace is dropped
    EXPECT_FALSE(m.correct("", "0"));
    EXPECT_TRUE(m.correct("", "  "));
}

TEST(Answer, RegexTakesTheLastMatchAndNormalisesNumbers) {
    AnswerMatcher m("#### (\\S+)");
    EXPECT_EQ(m.extract("so #### 12 wait #### 1,234."), std::optional<std::string>("1234"));
    EXPECT_TRUE(m.correct("reasoning... #### 1,234.", "1234"));
    EXPECT_TRUE(m.correct("#### 42", "42."));
    EXPECT_FALSE(m.correct("the answer is 42", "42"));  // no match: wrong
    EXPECT_EQ(m.extract("no marker"), std::nullopt);
    // Without a group the whole match is the answer.
    AnswerMatcher whole("-?[0-9]+");
    EXPECT_EQ(whole.extract("3 apples and 17 pears"), std::optional<std::string>("17"));
    // Empty matches do not loop forever.
    AnswerMatcher empty("x*");
    EXPECT_TRUE(empty.extract("abc").has_value());
    // UTF-8 text is matched by code points.
    AnswerMatcher utf("Answer: (\\w+)");
    EXPECT_EQ(utf.extract("Answer: café"), std::optional<std::string>("café"));
}

TEST(Answer, BadRegexIsAClearError) {
    try {
        AnswerMatcher bad("(unclosed");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--answer-regex '(unclosed' is invalid"),
                  std::string::npos);
    }
}

TEST(Wilson, KnownValues) {
    // 95% Wilson interval for 9/10: [0.5958, 0.9821] (standard tables).
    const Interval a = wilson95(9, 10);
    EXPECT_NEAR(a.lo, 0.5958, 1e-4);
    EXPECT_NEAR(a.hi, 0.9821, 1e-4);
    const Interval all = wilson95(50, 50);
    EXPECT_NEAR(all.hi, 1.0, 1e-12);
    EXPECT_NEAR(all.lo, 0.9287, 1e-4);
    const Interval none = wilson95(0, 50);
    EXPECT_NEAR(none.lo, 0.0, 1e-12);
    EXPECT_NEAR(none.hi, 0.0713, 1e-4);
}

TEST(Problems, ReadsJsonlAndNamesBadLines) {
    const fs::path p = fs::temp_directory_path() / "llada_eval_test.jsonl";
    {
        std::ofstream f(p);
        f << "{\"task\": \"add\", \"prompt\": \"1+1=\", \"answer\": \"2\"}\n\n";
        f << "{\"prompt\": \"x\", \"answer\": 42}\n";
    }
    auto probs = read_problems(p.string());
    ASSERT_EQ(probs.size(), 2u);
    EXPECT_EQ(probs[0].task, "add");
    EXPECT_EQ(probs[1].task, "default");
    EXPECT_EQ(probs[1].answer, "42");
    {
        std::ofstream f(p);
        f << "{\"task\": \"add\", \"prompt\": \"1+1=\", \"answer\": \"2\"}\n";
        f << "{\"prompt\": 5}\n";
    }
    try {
        read_problems(p.string());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
    }
    {
        std::ofstream f(p);
        f << "not json\n";
    }
    EXPECT_THROW(read_problems(p.string()), Error);
    fs::remove(p);
    EXPECT_THROW(read_problems("/nonexistent.jsonl"), Error);
}
