// A main() for the fuzz targets in the normal build: runs LLVMFuzzerTestOneInput once per file
// given (or per file in each directory given). The regression inputs in fuzz/regressions/ and
// the seed corpora replay through it in ctest, so every target compiles and passes its known
// inputs in every build, with or without clang's libFuzzer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    namespace fs = std::filesystem;
    int n = 0;
    auto run = [&](const fs::path& p) {
        std::ifstream f(p, std::ios::binary);
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                         std::istreambuf_iterator<char>());
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
        ++n;
    };
    for (int i = 1; i < argc; ++i) {
        const fs::path p(argv[i]);
        if (fs::is_directory(p)) {
            for (const auto& e : fs::recursive_directory_iterator(p)) {
                if (e.is_regular_file()) run(e.path());
            }
        } else if (fs::exists(p)) {
            run(p);
        } else {
            std::fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            return 2;
        }
    }
    std::printf("replayed %d inputs\n", n);
    return 0;
}
