// Output files written aside and renamed (format/output_file.h).
#include "format/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace llada::format {
namespace fs = std::filesystem;

namespace {

std::string errno_text() {
    return std::strerror(errno);
}

// The directory a path's file lives in ("." for a bare name).
std::string dir_of(const std::string& path) {
    const fs::path p(path);
    return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

}  // namespace

OutputFile::OutputFile(const std::string& path) : path_(path) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw Error("cannot write '" + path + "': it is a directory");
    const std::string dir = dir_of(path);
    // (Built with append: GCC 12 warns, falsely, on "." + name + ".tmp-XXXXXX" with -O2.)
    std::string name(".");
    name.append(fs::path(path).filename().string()).append(".tmp-XXXXXX");
    std::string tmpl = (fs::path(dir) / name).string();
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
        throw Error("cannot create a file in '" + dir + "' for '" + path + "': " + errno_text());
    tmp_ = tmpl;
    f_ = ::fdopen(fd, "wb");
    if (f_ == nullptr) {
        ::close(fd);
        ::unlink(tmp_.c_str());
        throw Error("cannot write '" + path + "': " + errno_text());
    }
}

OutputFile::~OutputFile() {
    if (f_ != nullptr) std::fclose(f_);
    if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void OutputFile::write(const void* data, size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, f_) != n)
        throw Error("write to '" + path_ + "' failed: " + errno_text() + " (the old file is kept)");
}

void OutputFile::commit() {
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
        throw Error("write to '" + path_ + "' failed: " + errno_text() + " (the old file is kept)");
    // New files get the umask's permissions, an existing target keeps its own.
    struct stat st;
    const mode_t umask_now = ::umask(0);
    ::umask(umask_now);
    const mode_t mode =
        ::stat(path_.c_str(), &st) == 0 ? (st.st_mode & 07777) : (0666 & ~umask_now);
    ::fchmod(::fileno(f_), mode);
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0)
        throw Error("write to '" + path_ + "' failed: " + errno_text() + " (the old file is kept)");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
        throw Error("cannot replace '" + path_ + "': " + errno_text() + " (the old file is kept)");
    committed_ = true;
    const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void refuse_overwriting_input(const std::string& output, const std::vector<std::string>& inputs) {
    struct stat out;
    if (::stat(output.c_str(), &out) != 0) return;  // a new file overwrites nothing
    auto same = [&](const struct stat& s) {
        return s.st_dev == out.st_dev && s.st_ino == out.st_ino;
    };
    for (const std::string& in : inputs) {
        struct stat s;
        if (in.empty() || ::stat(in.c_str(), &s) != 0) continue;
        if (same(s)) {
            throw Error("the output '" + output + "' is the input '" + in +
                        "' (the same file); write to another file");
        }
        if (S_ISDIR(s.st_mode)) {
            std::error_code ec;
            for (const auto& e : fs::directory_iterator(in, ec)) {
                struct stat f;
                if (::stat(e.path().c_str(), &f) == 0 && same(f)) {
                    throw Error("the output '" + output + "' is the input directory's file '" +
                                e.path().string() + "'; write to another file");
                }
            }
        }
    }
}

}  // namespace llada::format
