// A read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace llada::format {

class MappedFile {
  public:
    // Throws llada::Error naming the path and the OS error.
    static std::unique_ptr<MappedFile> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    // Tells the kernel the pages fully inside [p, p + n) will not be needed soon, so they leave
    // the resident set (they are read back from the file if touched again).
    void release(const uint8_t* p, size_t n) const;
    size_t size() const { return size_; }

  private:
    MappedFile() = default;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace llada::format
