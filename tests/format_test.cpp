// Tests of the GGUF reader and writer, including crafted truncated, corrupted and hostile files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "util/error.h"

using namespace llada;
using namespace llada::format;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

GgufWriter sample_writer() {
    GgufWriter w;
    w.set_string("general.architecture", "llada");
    w.set_u8("t.u8", 200);
    w.set_i8("t.i8", -5);
    w.set_u16("t.u16", 60000);
    w.set_i16("t.i16", -30000);
    w.set_u32("t.u32", 4000000000u);
    w.set_i32("t.i32", -2000000000);
    w.set_u64("t.u64", 1ull << 40);
    w.set_i64("t.i64", -(1ll << 40));
    w.set_f32("t.f32", 1.5f);
    w.set_f64("t.f64", -2.25);
    w.set_bool("t.bool", true);
    w.set_array_string("t.strs", {"a", "", "hello"});
    w.set_array_i32("t.ints", {1, -2, 3});
    w.set_array_f32("t.floats", {0.5f, 2.0f});
    w.add_tensor("w", TensorType::F32, {4, 2}, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
    w.add_tensor("q", TensorType::Q8_0, {32, 1}, std::vector<uint8_t>(34, 1));
    return w;
}

// Parses bytes and returns the error message ("" when it parsed).
std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        GgufFile::from_memory(bytes.data(), bytes.size(), "crafted.gguf");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// Offset of the first occurrence of `needle` in the file.
size_t find_bytes(const std::vector<uint8_t>& hay, const std::string& needle) {
    auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
    return static_cast<size_t>(it - hay.begin());
}

}  // namespace

TEST(Gguf, RoundTripEveryValueType) {
    auto bytes = sample_writer().to_bytes();
    auto f = GgufFile::from_memory(bytes.data(), bytes.size());
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->get_string("general.architecture"), "llada");
    EXPECT_EQ(f->get_uint("t.u8"), 200u);
    EXPECT_EQ(*f->opt_int("t.i8"), -5);
    EXPECT_EQ(f->get_uint("t.u16"), 60000u);
    EXPECT_EQ(*f->opt_int("t.i16"), -30000);
    EXPECT_EQ(f->get_uint("t.u32"), 4000000000u);
    EXPECT_EQ(*f->opt_int("t.i32"), -2000000000);
    EXPECT_EQ(f->get_uint("t.u64"), 1ull << 40);
    EXPECT_EQ(*f->opt_int("t.i64"), -(1ll << 40));
    EXPECT_EQ(f->get_float("t.f32"), 1.5);
    EXPECT_EQ(f->get_float("t.f64"), -2.25);
    EXPECT_EQ(*f->opt_bool("t.bool"), true);
    EXPECT_EQ(f->get_string_array("t.strs"), (std::vector<std::string_view>{"a", "", "hello"}));
    EXPECT_EQ(f->get_int_array("t.ints"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f->get_float_array("t.floats"), (std::vector<double>{0.5, 2.0}));
    ASSERT_EQ(f->tensors().size(), 2u);
    const GgufTensor* w = f->find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->type, TensorType::F32);
    EXPECT_EQ(w->n_dims, 2u);
    EXPECT_EQ(w->ne[0], 4u);
    EXPECT_EQ(w->ne[1], 2u);
    EXPECT_EQ(w->n_bytes, 32u);
    float x[8];
    std::memcpy(x, w->data, 32);
    EXPECT_EQ(x[7], 8.0f);
    EXPECT_EQ(f->find_tensor("q")->n_bytes, 34u);
    EXPECT_EQ(f->data_offset() % 32, 0u);
}

TEST(Gguf, CustomAlignmentIsHonoured) {
    GgufWriter w = sample_writer();
    w.set_alignment(64);
    auto bytes = w.to_bytes();
    auto f = GgufFile::from_memory(bytes.data(), bytes.size());
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    EXPECT_EQ(f->find_tensor("q")->offset % 64, 0u);
}

TEST(Gguf, AccessorsNameTheKeyOnMissingOrWrongType) {
    auto bytes = sample_writer().to_bytes();
    auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "x.gguf");
    try {
        f->get_uint("llada.block_count");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'llada.block_count' is missing"), std::string::npos);
    }
    try {
        f->get_uint("general.architecture");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has type STRING"), std::string::npos);
    }
    EXPECT_THROW(f->get_string_array("t.ints"), Error);
    EXPECT_THROW(f->opt_uint("t.i8"), Error);  // negative value where unsigned is needed
}

TEST(Gguf, RejectsBadMagicAndVersion) {
    auto bytes = sample_writer().to_bytes();
    auto b = bytes;
    b[0] = 'X';
    EXPECT_NE(parse_error(b).find("magic"), std::string::npos);
    b = bytes;
    b[4] = 1;
    EXPECT_NE(parse_error(b).find("v1 is not supported"), std::string::npos);
    b = bytes;
    b[4] = 7;
    EXPECT_NE(parse_error(b).find("unsupported GGUF version 7"), std::string::npos);
    b = bytes;
    b[4] = 2;  // v2 has the same layout as v3
    EXPECT_EQ(parse_error(b), "");
}

TEST(Gguf, EveryTruncationIsAnErrorNeverACrash) {
    auto bytes = sample_writer().to_bytes();
    // Bytes past the end of the last tensor's data are alignment padding, so a file cut inside
    // them is still whole; every shorter cut must be reported.
    auto full = GgufFile::from_memory(bytes.data(), bytes.size());
    size_t needed = 0;
    for (const auto& t : full->tensors()) {
        needed = std::max<size_t>(needed, full->data_offset() + t.offset + t.n_bytes);
    }
    for (size_t n = 0; n < needed; ++n) {
        std::vector<uint8_t> b(bytes.begin(), bytes.begin() + n);
        std::string err = parse_error(b);
        EXPECT_NE(err, "") << "truncated to " << n << " bytes parsed";
    }
}

TEST(Gguf, HostileCountsAndLengths) {
    auto bytes = sample_writer().to_bytes();
    // Huge metadata count.
    auto b = bytes;
    uint64_t big = 1ull << 60;
    std::memcpy(&b[16], &big, 8);
    EXPECT_NE(parse_error(b).find("metadata count"), std::string::npos);
    // Huge tensor count.
    b = bytes;
    std::memcpy(&b[8], &big, 8);
    EXPECT_NE(parse_error(b).find("tensor count"), std::string::npos);
    // A string length that runs past the end: the key of the first entry.
    b = bytes;
    uint64_t huge_len = ~0ull - 3;
    std::memcpy(&b[24], &huge_len, 8);
    EXPECT_NE(parse_error(b).find("string length"), std::string::npos);
    // An array count that overflows count * element size.
    b = bytes;
    size_t at = find_bytes(b, "t.ints") + 6 + 4 + 4;  // key, value type, element type
    uint64_t n = (1ull << 62) + 1;
    std::memcpy(&b[at], &n, 8);
    std::string err = parse_error(b);
    EXPECT_NE(err.find("'t.ints'"), std::string::npos) << err;
    EXPECT_NE(err.find("exceeds the file"), std::string::npos) << err;
    // An invalid value type.
    b = bytes;
    at = find_bytes(b, "t.u8") + 4;
    uint32_t bad_type = 77;
    std::memcpy(&b[at], &bad_type, 4);
    err = parse_error(b);
    EXPECT_NE(err.find("'t.u8'"), std::string::npos) << err;
    EXPECT_NE(err.find("value type 77"), std::string::npos) << err;
}

TEST(Gguf, TensorInfoChecks) {
    auto bytes = sample_writer().to_bytes();
    size_t name_at = find_bytes(bytes, std::string("\x01\0\0\0\0\0\0\0w", 9)) + 9;
    // Unsupported type: Q5_K is ggml type 13.
    auto b = bytes;
    size_t type_at = name_at + 4 + 2 * 8;
    uint32_t q5k = 13;
    std::memcpy(&b[type_at], &q5k, 4);
    std::string err = parse_error(b);
    EXPECT_NE(err.find("tensor 'w'"), std::string::npos) << err;
    EXPECT_NE(err.find("Q5_K"), std::string::npos) << err;
    // Too many dimensions.
    b = bytes;
    uint32_t dims = 9;
    std::memcpy(&b[name_at], &dims, 4);
    EXPECT_NE(parse_error(b).find("9 dimensions"), std::string::npos);
    // Data offset beyond the file.
    b = bytes;
    uint64_t off = 1 << 20;
    std::memcpy(&b[type_at + 4], &off, 8);
    err = parse_error(b);
    EXPECT_NE(err.find("tensor 'w'"), std::string::npos) << err;
    EXPECT_NE(err.find("outside the data section"), std::string::npos) << err;
    // Misaligned offset.
    off = 3;
    std::memcpy(&b[type_at + 4], &off, 8);
    EXPECT_NE(parse_error(b).find("not a multiple of the alignment"), std::string::npos);
    // Dimension product overflow.
    b = bytes;
    uint64_t d = 1ull << 40;
    std::memcpy(&b[name_at + 4], &d, 8);
    std::memcpy(&b[name_at + 12], &d, 8);
    EXPECT_NE(parse_error(b).find("overflows"), std::string::npos);
}

TEST(Gguf, DuplicateKeysAndTensorsAreRejected) {
    GgufWriter w;
    w.set_raw("a", GgufType::UINT8, {1});
    auto bytes = w.to_bytes();
    // Duplicate by hand: append a second identical entry and bump the count.
    std::vector<uint8_t> entry(bytes.begin() + 24, bytes.begin() + 24 + 8 + 1 + 4 + 1);
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + 24);
    b.insert(b.end(), entry.begin(), entry.end());
    b.insert(b.end(), entry.begin(), entry.end());
    b[16] = 2;
    EXPECT_NE(parse_error(b).find("duplicate key"), std::string::npos);
}

// The structural checks beyond counts and offsets, each on a file that breaks only it.
TEST(Gguf, EveryStructuralCheckNamesItsProblem) {
    auto u32 = [](std::vector<uint8_t>& b, uint32_t v) {
        for (int i = 0; i < 4; ++i)
            b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    auto u64 = [](std::vector<uint8_t>& b, uint64_t v) {
        for (int i = 0; i < 8; ++i)
            b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    auto error_of = [](const GgufWriter& w) { return parse_error(w.to_bytes()); };
    const std::vector<uint8_t> f32x32(32 * 4, 0);
    {
        GgufWriter w;
        w.set_raw("flag", GgufType::BOOL, {2});
        EXPECT_NE(error_of(w).find("bool value 2 is neither 0 nor 1"), std::string::npos);
    }
    {
        // Arrays of arrays nine deep; eight is the limit.
        std::vector<uint8_t> body;
        for (int d = 0; d < 9; ++d) {
            u32(body, static_cast<uint32_t>(GgufType::ARRAY));
            u64(body, 1);
        }
        u32(body, static_cast<uint32_t>(GgufType::UINT8));
        u64(body, 0);
        GgufWriter w;
        w.set_raw("deep", GgufType::ARRAY, body);
        EXPECT_NE(error_of(w).find("arrays nested too deeply"), std::string::npos) << error_of(w);
    }
    {
        std::vector<uint8_t> body;
        u32(body, 13);  // one past FLOAT64
        u64(body, 1);
        GgufWriter w;
        w.set_raw("odd", GgufType::ARRAY, body);
        EXPECT_NE(error_of(w).find("array element type 13 is not a GGUF type"), std::string::npos);
    }
    {
        // The writer refuses a second "a": write "a" and "b", then rename "b" in the bytes.
        GgufWriter w;
        w.add_tensor("a", TensorType::F32, {32}, f32x32);
        w.add_tensor("b", TensorType::F32, {32}, f32x32);
        auto b = w.to_bytes();
        const uint8_t name_b[] = {1, 0, 0, 0, 0, 0, 0, 0, 'b'};
        auto at = std::search(b.begin(), b.end(), std::begin(name_b), std::end(name_b));
        ASSERT_NE(at, b.end());
        at[8] = 'a';
        EXPECT_NE(parse_error(b).find("duplicate tensor name"), std::string::npos)
            << parse_error(b);
    }
    {
        GgufWriter w;
        w.add_tensor("z", TensorType::F32, {32, 0}, std::vector<uint8_t>{});
        EXPECT_NE(error_of(w).find("dimension 1 is zero"), std::string::npos) << error_of(w);
    }
    {
        // 16 columns of Q4_0, whose blocks hold 32 (the writer refuses it: one block of 32,
        // its first dimension patched to 16 in the bytes).
        GgufWriter w;
        w.add_tensor("q", TensorType::Q4_0, {32}, std::vector<uint8_t>(18, 0));
        auto b = w.to_bytes();
        const uint8_t info[] = {1, 0, 0, 0, 0, 0, 0, 0, 'q', 1, 0, 0, 0, 32};
        auto at = std::search(b.begin(), b.end(), std::begin(info), std::end(info));
        ASSERT_NE(at, b.end());
        at[13] = 16;
        EXPECT_NE(parse_error(b).find("first dimension 16 is not a multiple of"), std::string::npos)
            << parse_error(b);
    }
    {
        // The writer sets general.alignment itself, as a UINT32 power of two: these files carry
        // "general.alignmenT", renamed in the bytes.
        auto with_alignment = [](const std::function<void(GgufWriter&)>& set) {
            GgufWriter w;
            set(w);
            auto b = w.to_bytes();
            const std::string key = "general.alignmenT";
            auto at = std::search(b.begin(), b.end(), key.begin(), key.end());
            EXPECT_NE(at, b.end());
            if (at != b.end()) at[key.size() - 1] = 't';
            return parse_error(b);
        };
        std::string e =
            with_alignment([](GgufWriter& w) { w.set_string("general.alignmenT", "32"); });
        EXPECT_NE(e.find("'general.alignment' has type STRING, expected UINT32"), std::string::npos)
            << e;
        e = with_alignment([](GgufWriter& w) { w.set_u32("general.alignmenT", 24); });
        EXPECT_NE(e.find("'general.alignment' = 24 is not a power of two"), std::string::npos) << e;
        e = with_alignment([](GgufWriter& w) { w.set_u32("general.alignmenT", 0); });
        EXPECT_NE(e.find("= 0 is not a power of two"), std::string::npos) << e;
    }
}

TEST(Gguf, OpenReportsMissingFile) {
    try {
        GgufFile::open("/nonexistent/model.gguf");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
    }
}

TEST(Gguf, WriteThenOpenFromDisk) {
    auto path = std::filesystem::temp_directory_path() / "llada_format_test.gguf";
    sample_writer().write(path.string());
    auto f = GgufFile::open(path.string());
    EXPECT_EQ(f->tensors().size(), 2u);
    EXPECT_EQ(f->file_size(), std::filesystem::file_size(path));
    std::filesystem::remove(path);
}

TEST(Gguf, ReadsLlamaCppFixtures) {
    std::filesystem::path dir = std::filesystem::path(LLADA_SHARED_FIXTURES) / "llamacpp";
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << "../shared/fixtures is absent: skipped";
    for (const char* set : {"llada-tiny-f32", "llada-tiny-f16", "llada-tiny-q8_0",
                            "llada-tiny-q4_0", "dream-tiny-f32"}) {
        auto f = GgufFile::open((dir / set / "model.gguf").string());
        EXPECT_GT(f->tensors().size(), 10u) << set;
        EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
        EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 300u);
        EXPECT_EQ(f->get_uint("tokenizer.ggml.mask_token_id"), 299u);
    }
}

TEST(Gguf, CopyKvReproducesEveryEntry) {
    auto bytes = sample_writer().to_bytes();
    auto f = GgufFile::from_memory(bytes.data(), bytes.size());
    GgufWriter w;
    for (const auto& kv : f->kvs())
        w.copy_kv(kv);
    auto copy = w.to_bytes();
    auto g = GgufFile::from_memory(copy.data(), copy.size());
    ASSERT_EQ(g->kvs().size(), f->kvs().size());
    for (size_t i = 0; i < f->kvs().size(); ++i) {
        const auto& a = f->kvs()[i].value;
        const auto& b = g->kvs()[i].value;
        EXPECT_EQ(g->kvs()[i].key, f->kvs()[i].key);
        EXPECT_EQ(a.type, b.type);
        EXPECT_EQ(a.u, b.u);
        EXPECT_EQ(a.i, b.i);
        EXPECT_EQ(a.f, b.f);
        EXPECT_EQ(a.str, b.str);
        EXPECT_EQ(a.count, b.count);
    }
    EXPECT_EQ(g->get_string_array("t.strs"), f->get_string_array("t.strs"));
}
