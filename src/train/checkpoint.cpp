#include "train/checkpoint.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/check.h"
#include "core/files.h"

namespace megafold::train {
namespace fs = std::filesystem;
namespace {

// Checkpoints in dir sorted by step, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::is_directory(dir)) return out;
  static const std::regex pattern(R"(step_(\d+)\.pt)");
  for (const auto& it : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = it.path().filename().string();
    if (std::regex_match(name, m, pattern)) out.emplace_back(std::stoll(m[1]), it.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                            torch::nn::Module& model, const std::vector<at::Tensor>& ema,
                            torch::optim::Optimizer& optimizer, int64_t keep) {
  fs::create_directories(dir);
  torch::serialize::OutputArchive archive, model_archive, ema_archive, optim_archive;
  model.save(model_archive);
  for (size_t i = 0; i < ema.size(); ++i) ema_archive.write(std::to_string(i), ema[i], true);
  optimizer.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("ema", ema_archive);
  archive.write("optimizer", optim_archive);
  archive.write("step", c10::IValue(meta.step));
  archive.write("seed", c10::IValue(static_cast<int64_t>(meta.seed)));
  archive.write("config_json", c10::IValue(meta.config_json));

  char name[64];
  std::snprintf(name, sizeof(name), "step_%08lld.pt", static_cast<long long>(meta.step));
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string tmp_path = final_path + ".tmp";
  archive.save_to(tmp_path);
  publish_file(tmp_path, final_path);

  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i].second);
  return final_path;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

namespace {

CheckpointMeta read_meta(torch::serialize::InputArchive& archive) {
  CheckpointMeta meta;
  c10::IValue v;
  archive.read("step", v);
  meta.step = v.toInt();
  archive.read("seed", v);
  meta.seed = static_cast<uint64_t>(v.toInt());
  archive.read("config_json", v);
  meta.config_json = v.toStringRef();
  return meta;
}

[[noreturn]] void corrupt(const std::string& path, const std::exception& ex) {
  throw Error(path + ": cannot load checkpoint (corrupt, or written for another model config): " +
              ex.what());
}

}  // namespace

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    return read_meta(archive);
  } catch (const std::exception& ex) {
    corrupt(path, ex);
  }
}

CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               std::vector<at::Tensor>& ema, torch::optim::Optimizer& optimizer) {
  CheckpointMeta meta;
  try {
    torch::serialize::InputArchive archive, model_archive, ema_archive, optim_archive;
    archive.load_from(path);
    archive.read("model", model_archive);
    model.load(model_archive);
    archive.read("ema", ema_archive);
    for (size_t i = 0; i < ema.size(); ++i) {
      at::Tensor t;
      ema_archive.read(std::to_string(i), t, true);
      MF_CHECK(t.sizes() == ema[i].sizes(), "EMA tensor ", i, " has shape ", t.sizes(),
               ", the model expects ", ema[i].sizes());
      ema[i].copy_(t);
    }
    archive.read("optimizer", optim_archive);
    optimizer.load(optim_archive);
    meta = read_meta(archive);
  } catch (const std::exception& ex) {
    corrupt(path, ex);
  }
  return meta;
}

CheckpointMeta load_weights(const std::string& path, torch::nn::Module& model, bool ema) {
  CheckpointMeta meta;
  try {
    torch::serialize::InputArchive archive, model_archive;
    archive.load_from(path, at::Device(at::kCPU));  // a GPU run's checkpoint loads anywhere
    archive.read("model", model_archive);
    model.load(model_archive);
    if (ema) {
      torch::serialize::InputArchive ema_archive;
      archive.read("ema", ema_archive);
      at::NoGradGuard no_grad;
      const std::vector<at::Tensor> params = model.parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor t;
        ema_archive.read(std::to_string(i), t, true);
        MF_CHECK(t.sizes() == params[i].sizes(), "EMA tensor ", i, " has shape ", t.sizes(), ", the model expects ",
                 params[i].sizes());
        params[i].copy_(t);
      }
    }
    meta = read_meta(archive);
  } catch (const std::exception& ex) {
    corrupt(path, ex);
  }
  return meta;
}

}  // namespace megafold::train
