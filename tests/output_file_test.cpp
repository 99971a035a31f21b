// Output files (format/output_file.h): written aside and renamed, never over a tool's input.
// The library side here; tools_test.cpp runs the tools (llada-quantize over its own input, a
// kill during a write).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "format/output_file.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;

namespace {

fs::path scratch() {
    const fs::path d = fs::temp_directory_path() / ("output-file-" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

void put(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

int files_in(const fs::path& d) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(d))
        n += e.is_regular_file() || e.is_symlink();
    return n;
}

std::string refusal(const fs::path& out, const std::vector<std::string>& in) {
    try {
        format::refuse_overwriting_input(out.string(), in);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(OutputFile, CommitReplacesTheTargetAndKeepsItsPermissions) {
    const fs::path d = scratch(), t = d / "out.bin";
    put(t, "old");
    ::chmod(t.c_str(), 0640);
    {
        format::OutputFile f(t.string());
        f.write("new bytes", 9);
        EXPECT_EQ(slurp(t), "old");  // nothing reaches the target before commit
        EXPECT_EQ(files_in(d), 2);   // the target and the temporary file beside it
        f.commit();
    }
    EXPECT_EQ(slurp(t), "new bytes");
    EXPECT_EQ(files_in(d), 1);
    struct stat st;
    ASSERT_EQ(::stat(t.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
    fs::remove_all(d);
}

TEST(OutputFile, AWriteThatNeverCommitsLeavesTheOldFileAndNoTemporary) {
    const fs::path d = scratch(), t = d / "out.bin";
    put(t, "old");
    try {
        format::OutputFile f(t.string());
        f.write("half", 4);
        throw Error("the writer failed");
    } catch (const Error&) {
    }
    EXPECT_EQ(slurp(t), "old");
    EXPECT_EQ(files_in(d), 1);
    fs::remove_all(d);
}

TEST(OutputFile, BadTargetsAreNamed) {
    const fs::path d = scratch();
    try {
        format::OutputFile f(d.string());
        FAIL() << "a directory was accepted as an output file";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
    }
    try {
        format::OutputFile f((d / "missing" / "out.bin").string());
        FAIL() << "a file in a missing directory was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find((d / "missing").string()), std::string::npos)
            << e.what();
    }
    fs::remove_all(d);
}

TEST(OutputFile, TheInputIsRefusedByEveryPathThatReachesIt) {
    const fs::path d = scratch(), in = d / "model.gguf";
    put(in, "weights");
    fs::create_symlink(in, d / "link.gguf");
    fs::create_hard_link(in, d / "hard.gguf");
    fs::create_directories(d / "hf");
    put(d / "hf" / "model.safetensors", "tensors");
    const std::string input = in.string();
    EXPECT_NE(refusal(in, {input}).find("is the input"), std::string::npos);
    EXPECT_NE(refusal(d / "link.gguf", {input}).find("is the input"), std::string::npos);
    EXPECT_NE(refusal(d / "hard.gguf", {input}).find("is the input"), std::string::npos);
    EXPECT_NE(refusal(d / "." / "model.gguf", {input}).find("is the input"), std::string::npos);
    EXPECT_NE(refusal(d / "hf" / ".." / "model.gguf", {input}).find("is the input"),
              std::string::npos);
    EXPECT_NE(refusal(d / "hf" / "model.safetensors", {(d / "hf").string()})
                  .find("input directory's file"),
              std::string::npos);
    // Another file, a new file, and an input that does not exist are fine.
    put(d / "other.gguf", "x");
    EXPECT_EQ(refusal(d / "other.gguf", {input}), "");
    EXPECT_EQ(refusal(d / "new.gguf", {input}), "");
    EXPECT_EQ(refusal(d / "other.gguf", {(d / "absent").string(), ""}), "");
    EXPECT_EQ(slurp(in), "weights");
    fs::remove_all(d);
}
