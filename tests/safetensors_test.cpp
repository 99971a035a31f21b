// Tests of the safetensors reader: a valid file read back, and every check it makes on crafted
// hostile files (the message names the file and the tensor or field).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "util/error.h"

using namespace llada;
using namespace llada::format;

namespace {

// 8-byte header length, the header, the data: the layout the format defines.
std::vector<uint8_t> file(const std::string& header, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> b(8 + header.size() + data.size());
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
    return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
    try {
        SafetensorsFile::from_memory(b.data(), b.size(), "t.safetensors");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Safetensors, ReadsTensorsInDataOrderWithMetadata) {
    // Written in the header in the other order than their data.
    const std::string h =
        R"({"b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},)"
        R"( "__metadata__": {"format": "pt"},)"
        R"( "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},)"
        R"( "e": {"dtype": "F16", "shape": [0, 5], "data_offsets": [22, 22]}}   )";
    std::vector<uint8_t> data(22);
    const float a[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    std::memcpy(data.data(), a, 16);
    for (int i = 16; i < 22; ++i)
        data[i] = static_cast<uint8_t>(i);
    const auto b = file(h, data);
    auto f = SafetensorsFile::from_memory(b.data(), b.size(), "t.safetensors");
    ASSERT_EQ(f->tensors().size(), 3u);
    EXPECT_EQ(f->tensors()[0].name, "a");
    EXPECT_EQ(f->tensors()[1].name, "b");
    const SafeTensor* ta = f->find("a");
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->dtype, StDtype::F32);
    EXPECT_EQ(ta->shape, (std::vector<uint64_t>{2, 2}));
    EXPECT_EQ(ta->n_elements, 4u);
    float back[4];
    std::memcpy(back, ta->data, 16);
    EXPECT_EQ(back[3], 8.0f);
    const SafeTensor* tb = f->find("b");
    EXPECT_EQ(tb->dtype, StDtype::BF16);
    EXPECT_EQ(tb->n_bytes, 6u);
    EXPECT_EQ(tb->data[0], 16);
    EXPECT_EQ(f->find("e")->n_elements, 0u);
    EXPECT_EQ(f->find("nope"), nullptr);
    EXPECT_EQ(f->metadata().at("format"), "pt");
    EXPECT_EQ(std::string(st_dtype_name(StDtype::BF16)), "BF16");
    EXPECT_EQ(st_dtype_size(StDtype::F64), 8u);
}

TEST(Safetensors, HostileFilesAreNamedErrors) {
    const std::string t1 = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
    struct Case {
        std::vector<uint8_t> bytes;
        std::string expect;
    } cases[] = {
        {{1, 2, 3}, "truncated: 3 bytes"},
        {[] {
             std::vector<uint8_t> b(16, 0);
             b[7] = 0x80;  // 2^63
             return b;
         }(),
         "the header length 9223372036854775808 exceeds the 8 bytes after it"},
        {file("[1, 2]", {}), "the header is not a JSON object"},
        {file("{not json", {}), "the header is not valid JSON"},
        {file("{" + t1 + ", " + t1 + "}", std::vector<uint8_t>(8)), "names 'a' twice"},
        {file(R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})",
              std::vector<uint8_t>(8)),
         "tensor 'a': unknown dtype 'Q4' (known: BOOL"},
        {file(R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", std::vector<uint8_t>(8)),
         "tensor 'a': no string 'dtype'"},
        {file(R"({"a": {"dtype": "F32", "data_offsets": [0, 8]}})", std::vector<uint8_t>(8)),
         "tensor 'a': no array 'shape'"},
        {file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})",
              std::vector<uint8_t>(8)),
         "'data_offsets' is not an array of two offsets"},
        {file(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})",
              std::vector<uint8_t>(8)),
         "shape entry -2 is not a size"},
        {file(R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})",
              std::vector<uint8_t>(8)),
         "shape entry 2.5 is not a size"},
        {file(
             R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
             {}),
         "the shape's element count overflows"},
        {file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
              std::vector<uint8_t>(8)),
         "shape and dtype F32 need 3 x 4 bytes, data_offsets give 8"},
        {file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4611686018427387904]}})",
              std::vector<uint8_t>(8)),
         "do not lie within the 8 data bytes"},
        {file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})",
              std::vector<uint8_t>(8)),
         "do not lie within"},
        {file(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
              R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
              std::vector<uint8_t>(6)),
         "tensor 'b' starts at data byte 2, inside the tensor before it"},
        {file(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
              std::vector<uint8_t>(4)),
         "tensor 'a' starts at data byte 2, leaving a gap after byte 0"},
        {file("{" + t1 + "}", std::vector<uint8_t>(12)),
         "the tensors end at data byte 8 but the file has 12 data bytes"},
        {file(R"({"__metadata__": {"n": 3}})", {}), "'__metadata__' entry 'n' is not a string"},
        {file(R"({"__metadata__": [1]})", {}), "'__metadata__' is not an object"},
        {file(R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", {1}),
         "a tensor has an empty name"},
    };
    for (const auto& c : cases) {
        const std::string e = error_of(c.bytes);
        EXPECT_NE(e.find("safetensors file 't.safetensors': "), std::string::npos) << e;
        EXPECT_NE(e.find(c.expect), std::string::npos) << "want '" << c.expect << "', got: " << e;
    }
}

TEST(Safetensors, OpensAFileAndNamesAMissingOne) {
    EXPECT_THROW(SafetensorsFile::open("/nonexistent.safetensors"), Error);
}
