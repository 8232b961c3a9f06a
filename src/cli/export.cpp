// megafold export: a checkpoint's weights as safetensors files keyed by parameter name, for
// PyTorch (safetensors.torch.load_file) and other frameworks, with the resolved config.
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/check.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "model/model.h"
#include "core/checkpoint.h"
#include "config/config.h"

namespace megafold::cli {
namespace {

// The module's parameters and buffers by their dotted names.
std::vector<std::pair<std::string, at::Tensor>> named_tensors(torch::nn::Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

}  // namespace

int export_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"checkpoint", "PATH", "checkpoint written by 'megafold train'"},
      {"out", "DIR", "output folder: model.safetensors, ema.safetensors, config.json"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("export",
                       "Write a checkpoint's weights keyed by parameter name (e.g. "
                       "'pairformer.block_0.pair.tri_attn_start.w_proj'): model.safetensors holds the training "
                       "weights, ema.safetensors their exponential moving average (what predict uses), "
                       "config.json the resolved config that builds the model. In Python:\n"
                       "  from safetensors.torch import load_file; weights = load_file('DIR/ema.safetensors')",
                       specs);
    return 0;
  }
  for (const char* required : {"checkpoint", "out"})
    if (!args.has(required)) throw Error(std::string("--") + required + " is required (see --help)");
  const std::string checkpoint = *args.get("checkpoint");
  const std::filesystem::path out = *args.get("out");
  megafold::CheckpointReader reader(checkpoint);  // read once: the config, then both weight sets
  const megafold::CheckpointMeta& meta = reader.meta();
  const config::TrainConfig cfg = config::parse_config(meta.config_json, checkpoint);
  std::filesystem::create_directories(out);
  const std::map<std::string, std::string> info = {
      {"format", "pt"}, {"step", std::to_string(meta.step)}, {"config", cfg.name}, {"source", checkpoint}};
  model::MegaFold model(cfg.model);
  for (const bool ema : {false, true}) {
    reader.load_weights(*model, ema);
    auto meta_of = info;
    meta_of["weights"] = ema ? "ema" : "training";
    write_safetensors((out / (ema ? "ema.safetensors" : "model.safetensors")).string(), named_tensors(*model), meta_of);
  }
  write_file_atomically((out / "config.json").string(), config::to_json(cfg));
  std::cout << "exported step " << meta.step << " of " << checkpoint << ": " << model->parameters().size()
            << " parameters to " << out.string() << "/{model,ema}.safetensors and config.json\n";
  return 0;
}

}  // namespace megafold::cli
