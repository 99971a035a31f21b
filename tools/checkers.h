// The answer checkers of the `real` task suite: tasks with many valid answers, scored by the
// rules of train/tasks_real.py (the same rules, held to one file of hand-made verdicts by both:
// tests/data/checkers/cases.jsonl). llada-eval scores a problem of such a task by its checker
// instead of by equality with the file's reference answer.
#pragma once

#include <string>

namespace llada::tools {

// Whether `task` is scored by a checker (rwalk, rpick, rsent).
bool has_checker(const std::string& task);

// The checker's verdict on a generation (surrounding whitespace ignored) for `prompt`; false for
// a prompt that is not one of the task's. Throws llada::Error for a task without a checker.
bool check_answer(const std::string& task, const std::string& prompt, const std::string& text);

}  // namespace llada::tools
