// llada-cli: generate text from a diffusion language model, showing the denoising live.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "decode/policy.h"
#include "decode/registry.h"
#include "format/output_file.h"
#include "runtime/device.h"
#include "tools/common.h"
#include "tools/display.h"
#include "util/error.h"

using namespace llada;

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        std::string model_path, prompt, prompt_file, prompt_tokens, trace_out;
        bool chat = false, json = false, no_display = false;
        int threads = 0;
        tools::DecodeFlags dec;
        tools::DeviceFlags devf;
        tools::ArgTable args(
            "llada-cli",
            "Generates text with a diffusion language model (LLaDA architecture, GGUF).\n"
            "Without -m it runs the bundled tiny model, e.g.  llada-cli -p \"0012+0035=\"");
        args.section("Model and prompt");
        tools::add_model_flag(args, &model_path, tools::kDefaultModel);
        args.string({"-p", "--prompt"}, "TEXT", "the prompt", &prompt);
        args.string({"-f", "--file"}, "FILE", "read the prompt from a file (raw bytes)",
                    &prompt_file);
        args.string({"--prompt-tokens"}, "\"ID ID ...\"",
                    "the prompt as token ids, used exactly as given (no BOS, no template)",
                    &prompt_tokens);
        args.flag({"--chat"}, "wrap the prompt in the model's chat format (LLaDA's headers)",
                  &chat);
        dec.add_to(args);
        devf.add_to(args);
        args.section("Output");
        args.flag({"--json"}, "print one JSON object (text, tokens, steps, nfe, wall_s, per-step)",
                  &json);
        args.string({"--trace-out"}, "FILE",
                    "write the generation's decision trace (rows by state, commits, drafts per\n"
                    "step) for llada-bench --replay",
                    &trace_out);
        args.flag({"--no-display"}, "no live view of the canvas (also off when not a terminal)",
                  &no_display);
        tools::add_threads_flag(args, &threads);
        if (!args.parse(argc, argv)) return 0;

        const int n_sources = !prompt.empty() + !prompt_file.empty() + !prompt_tokens.empty();
        if (n_sources > 1) throw Error("give only one of -p, -f and --prompt-tokens");
        if (n_sources == 0 && !args.given("-p") && !args.given("--prompt")) {
            throw Error("no prompt: give -p TEXT, -f FILE or --prompt-tokens \"ID ...\"");
        }
        if (chat && !prompt_tokens.empty()) {
            throw Error("--chat cannot be combined with --prompt-tokens (ids are used as given)");
        }
        if (model_path.empty()) model_path = tools::find_default_model(argv[0]);
        if (!trace_out.empty())
            format::refuse_overwriting_input(trace_out, {model_path, prompt_file});
        tools::LoadedModel lm = tools::load_model(model_path);
        dec.finish(args, *lm.model);

        std::vector<int32_t> ids;
        if (!prompt_tokens.empty()) {
            ids = tools::parse_token_ids(prompt_tokens, "--prompt-tokens");
        } else {
            std::string text = prompt_file.empty() ? prompt : tools::read_file(prompt_file);
            ids = chat ? tools::chat_encode(*lm.tok, text)
                       : lm.tok->encode(text, lm.tok->add_bos_default(), false);
        }

        runtime::ThreadPool pool(threads);
        auto device = devf.make(pool);
        dec.set_calibration_file(model_path, threads);
        auto policy = decode::make_policy(dec.policy, *lm.model, *device, dec.opt, lm.ids);
        if (dec.tts != 0) {
            // Test-time scaling: N candidates in one batch, one chosen.
            const int n = tools::resolve_tts(dec, *lm.model, *device, static_cast<int>(ids.size()));
            const auto c = decode::generate_candidates(dec.policy, *lm.model, *device, dec.opt,
                                                       lm.ids, ids, n);
            const auto t =
                tools::choose_candidate(c, *lm.tok, lm.ids, dec.select, [](const std::string& s) {
                    const auto b = s.find_first_not_of(" \t\n");
                    const auto e = s.find_last_not_of(" \t\n");
                    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
                });
            if (json) {
                nlohmann::json j = tools::tts_json(t, dec.select);
                j["model"] = model_path;
                j["policy"] = policy->name();
                j["text"] = t.texts[t.chosen];
                j["nfe"] = c.forwards;
                j["rows"] = c.rows;
                j["wall_s"] = c.wall_s;
                if (const runtime::DeviceReport* rep = device->report()) {
                    j["device"] = tools::device_report_json(*rep);  // projected on npu-sim
                }
                std::printf(
                    "%s\n",
                    j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
            } else {
                std::printf("%s\n", t.texts[t.chosen].c_str());
                std::fprintf(stderr,
                             "llada-cli: %d candidates in %lld forward passes, %.3f s; chose %d "
                             "by %s\n",
                             n, static_cast<long long>(c.forwards), c.wall_s, t.chosen,
                             dec.select.c_str());
            }
            return 0;
        }

        const bool display = !no_display && !json && isatty(fileno(stdout));
        tools::CanvasView view(*lm.tok, lm.ids, stdout);
        decode::StepCallback on_step;
        if (display) {
            on_step = [&](const decode::StepEvent& ev) { view.draw(ev); };
        }
        decode::GenerateResult res = policy->generate(ids, on_step);
        if (display) view.finish();

        if (!trace_out.empty()) {
            format::OutputFile f(trace_out);
            const std::string line =
                tools::trace_json(res, dec.opt, model_path, policy->name()).dump() + "\n";
            f.write(line.data(), line.size());
            f.commit();
        }
        const std::vector<int32_t> answer = res.answer(lm.ids);
        const std::string text = lm.tok->decode(answer, false);
        const double tok_s = res.wall_s > 0 ? dec.opt.gen / res.wall_s : 0.0;
        if (json) {
            nlohmann::json j;
            j["model"] = model_path;
            j["policy"] = policy->name();
            j["prompt_tokens"] = ids.size();
            j["text"] = text;
            j["tokens"] = res.generated();
            j["answer_tokens"] = answer.size();
            j["gen"] = dec.opt.gen;
            j["block"] = dec.opt.block;
            j["steps"] = res.steps.size();
            j["nfe"] = res.stats.forwards;
            j["rows"] = res.stats.rows;
            j["lm_head_rows"] = res.stats.lm_head_rows;
            j["rows_device"] = res.rows_device;
            j["drafts"] = {{"proposed", res.drafts_proposed},
                           {"accepted", res.drafts_accepted},
                           {"accepted_early", res.drafts_accepted_early},
                           {"rejected", res.drafts_rejected}};
            if (decode::policy_info(policy->name()).pipeline) {
                j["ahead"] = {{"committed", res.ahead_committed},
                              {"verified", res.ahead_verified},
                              {"rejected", res.ahead_rejected}};
            }
            // Progressive revision, and LLaDA2.1's token editing (its edits are revisions).
            if (dec.opt.revise.on || dec.opt.editing_threshold >= 0.0)
                j["revision"] = tools::revision_json(res.revision);
            j["wall_s"] = res.wall_s;
            j["tokens_per_s"] = tok_s;
            j["threads"] = threads;
            nlohmann::json steps = nlohmann::json::array();
            for (const auto& s : res.steps)
                steps.push_back(tools::step_json(s));
            j["per_step"] = steps;
            if (const runtime::DeviceReport* rep = device->report()) {
                j["device"] = tools::device_report_json(*rep);
            }
            std::printf("%s\n",
                        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
            return 0;
        }
        if (!display) std::printf("%s\n", text.c_str());
        std::fprintf(stderr,
                     "\n%s: %zu steps, %lld forward passes, %d positions in %.3f s "
                     "(%.1f tokens/s), policy %s, %d threads\n",
                     "llada-cli", res.steps.size(), static_cast<long long>(res.stats.forwards),
                     dec.opt.gen, res.wall_s, tok_s, policy->name(), threads);
        if (const runtime::DeviceReport* rep = device->report(); rep && rep->projected) {
            std::fprintf(stderr, "%s", rep->summary().c_str());
        }
        return 0;
    });
}
