// Files that a tool writes, written so that nothing is lost: the bytes go to a temporary file in
// the target's directory, which is flushed to disk and renamed over the target only when the
// whole file is written. A crash, a kill or a failed write leaves the old target as it was
// (docs/bad-inputs.md, "Output files"). And a target that is one of the tool's inputs, reached
// by whatever path (the same name, a symlink, a hard link, "./" or ".." spellings), is refused
// before anything is written: writing it would destroy the input while it is still read.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace llada::format {

class OutputFile {
  public:
    // Creates the temporary file beside `path` (".<name>.tmp-XXXXXX"). Throws llada::Error
    // naming the path when its directory cannot take a new file, or when `path` is a directory.
    explicit OutputFile(const std::string& path);
    ~OutputFile();  // removes the temporary file unless commit() ran
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    std::FILE* get() const { return f_; }
    const std::string& path() const { return path_; }
    // Writes n bytes; throws llada::Error naming the target on a short write (disk full, ...).
    void write(const void* data, size_t n);
    // Flushes, fsyncs, closes and renames the temporary file over the target (the target's
    // permissions are kept when it existed), then fsyncs the directory. Throws on failure, the
    // target untouched.
    void commit();

  private:
    std::string path_, tmp_;
    std::FILE* f_ = nullptr;
    bool committed_ = false;
};

// Throws llada::Error when `output` is the same file as one of `inputs` (same device and inode,
// or for an input directory the same as a file inside it), naming both. Inputs that do not
// exist and an output that does not exist yet are fine.
void refuse_overwriting_input(const std::string& output, const std::vector<std::string>& inputs);

}  // namespace llada::format
