// A Hugging Face model directory read as files: config.json, tokenizer.json,
// tokenizer_config.json and the weights in one model.safetensors or in shards listed by
// model.safetensors.index.json. What the files mean for a model is model/hf_model.h's business.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "format/safetensors.h"

namespace llada::format {

// Whether `path` names a directory (a Hugging Face model) rather than a file.
bool is_directory(const std::string& path);

class HfDirectory {
  public:
    // Reads the JSON files and maps the weights. Throws llada::Error naming the missing or
    // malformed file, a shard the index names but the directory lacks, or a tensor two shards
    // both hold.
    static std::unique_ptr<HfDirectory> open(const std::string& dir);
    // The JSON files alone, from memory, with no weights (tests and fuzzing of what reads them);
    // an empty tokenizer_config means the file is absent. Errors name `dir` as open() would.
    static std::unique_ptr<HfDirectory> from_json(const std::string& dir, const std::string& config,
                                                  const std::string& tokenizer,
                                                  const std::string& tokenizer_config);

    const std::string& path() const { return dir_; }
    const nlohmann::json& config() const { return config_; }
    const nlohmann::json& tokenizer() const { return tokenizer_; }
    // Empty when the directory has no tokenizer_config.json (it is optional).
    const nlohmann::json& tokenizer_config() const { return tokenizer_config_; }
    // A chat_template.jinja beside tokenizer_config.json, "" when absent.
    const std::string& chat_template_file() const { return chat_template_; }

    // The tensor of that Hugging Face name in whichever shard holds it, or null.
    const SafeTensor* find(std::string_view name) const;
    // The file a tensor came from, for messages ("model-00002-of-00003.safetensors").
    std::string file_of(std::string_view name) const;
    const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

  private:
    HfDirectory() = default;

    std::string dir_;
    nlohmann::json config_, tokenizer_, tokenizer_config_;
    std::string chat_template_;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::vector<std::pair<std::string, size_t>> index_;  // tensor name -> shard, sorted by name
};

}  // namespace llada::format
