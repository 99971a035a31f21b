// A Hugging Face model directory read as files (JSON and safetensors), every file named in the
// errors it can cause.
#include "format/hf_directory.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

#include "util/error.h"

namespace llada::format {
namespace {

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot read '" + path + "'");
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw Error("'" + path + "' is not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw Error("'" + path + "' is not a JSON object");
    return j;
}

nlohmann::json read_json(const std::string& path) {
    if (!file_exists(path)) throw Error("'" + path + "' is missing");
    return parse_json(read_text(path), path);
}

}  // namespace

bool is_directory(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::unique_ptr<HfDirectory> HfDirectory::open(const std::string& dir) {
    std::unique_ptr<HfDirectory> d(new HfDirectory());
    d->dir_ = dir;
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    d->config_ = read_json(base + "config.json");
    d->tokenizer_ = read_json(base + "tokenizer.json");
    if (file_exists(base + "tokenizer_config.json"))
        d->tokenizer_config_ = read_json(base + "tokenizer_config.json");
    if (file_exists(base + "chat_template.jinja"))
        d->chat_template_ = read_text(base + "chat_template.jinja");

    // The weights: an index naming the shards, or one file.
    std::vector<std::string> files;
    const std::string index_path = base + "model.safetensors.index.json";
    if (file_exists(index_path)) {
        const nlohmann::json index = read_json(index_path);
        const auto map = index.find("weight_map");
        if (map == index.end() || !map->is_object()) {
            throw Error("'" + index_path + "' has no \"weight_map\" object");
        }
        for (const auto& [name, file] : map->items()) {
            if (!file.is_string()) {
                throw Error("'" + index_path + "': the shard of tensor '" + name +
                            "' is not a file name");
            }
            const std::string f = file.get<std::string>();
            if (f.find('/') != std::string::npos || f == "..") {
                throw Error("'" + index_path + "': shard '" + f + "' is not a file in " + dir);
            }
            if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
        }
        if (files.empty()) throw Error("'" + index_path + "' lists no shards");
    } else if (file_exists(base + "model.safetensors")) {
        files.push_back("model.safetensors");
    } else {
        throw Error("'" + dir + "' has neither model.safetensors nor model.safetensors.index.json");
    }
    std::map<std::string, size_t> where;
    for (const std::string& f : files) {
        if (!file_exists(base + f)) {
            throw Error("'" + base + f + "' is missing (listed in model.safetensors.index.json)");
        }
        d->shards_.push_back(SafetensorsFile::open(base + f));
        const size_t shard = d->shards_.size() - 1;
        for (const SafeTensor& t : d->shards_.back()->tensors()) {
            auto [it, fresh] = where.emplace(t.name, shard);
            if (!fresh) {
                throw Error("tensor '" + t.name + "' is in both '" + files[it->second] + "' and '" +
                            f + "'");
            }
        }
    }
    d->index_.assign(where.begin(), where.end());
    return d;
}

std::unique_ptr<HfDirectory> HfDirectory::from_json(const std::string& dir,
                                                    const std::string& config,
                                                    const std::string& tokenizer,
                                                    const std::string& tokenizer_config) {
    std::unique_ptr<HfDirectory> d(new HfDirectory());
    d->dir_ = dir;
    d->config_ = parse_json(config, dir + "/config.json");
    d->tokenizer_ = parse_json(tokenizer, dir + "/tokenizer.json");
    if (!tokenizer_config.empty())
        d->tokenizer_config_ = parse_json(tokenizer_config, dir + "/tokenizer_config.json");
    return d;
}

const SafeTensor* HfDirectory::find(std::string_view name) const {
    auto it = std::lower_bound(index_.begin(), index_.end(), name,
                               [](const auto& e, std::string_view n) { return e.first < n; });
    if (it == index_.end() || it->first != name) return nullptr;
    return shards_[it->second]->find(name);
}

std::string HfDirectory::file_of(std::string_view name) const {
    auto it = std::lower_bound(index_.begin(), index_.end(), name,
                               [](const auto& e, std::string_view n) { return e.first < n; });
    if (it == index_.end() || it->first != name) return "";
    const std::string& p = shards_[it->second]->path();
    return p.substr(p.find_last_of('/') + 1);
}

}  // namespace llada::format
