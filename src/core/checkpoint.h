#pragma once
// Checkpoints: one file per saved step, written atomically (temporary file, fsync, rename,
// fsync of the directory), so a run killed at any moment leaves either the previous
// checkpoint or the new one, never a torn file. Each has a CRC-32 beside it
// (step_<step>.pt.crc32, written first), checked before every load; a full disk is an error
// naming the path, the partial file removed and the previous checkpoints kept.
//
// Contents: model parameters, EMA parameters (by parameter name; checkpoints that stored them
// by position still load), optimiser state, the step, the run seed and the config JSON. Data order and dropout masks are pure functions of (seed, step), so the step
// and the seed are the whole RNG/data-order state (core/seed.h).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megafold {

struct CheckpointMeta {
  int64_t step = 0;  // number of optimiser steps done
  uint64_t seed = 0;
  std::string config_json;
};

// Writes <dir>/step_<step>.pt atomically and deletes all but the newest `keep` checkpoints.
std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                            torch::nn::Module& model, const std::vector<at::Tensor>& ema,
                            torch::optim::Optimizer& optimizer, int64_t keep);

// Path of the newest checkpoint in dir, if any (leftover temporary files are ignored).
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Every checkpoint in dir, newest first (a resume falls back along this list).
std::vector<std::string> checkpoints_newest_first(const std::string& dir);

// Throws megafold::Error naming the file when its bytes do not match the checksum written
// with it (checkpoints written before checksums pass).
void verify_checkpoint(const std::string& path);

// Reads only the step, seed and config of a checkpoint (to check a resume before loading).
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Loads a checkpoint into model, ema and optimizer (already constructed with the same
// config). Throws megafold::Error naming the file on a corrupt or mismatched checkpoint.
CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               std::vector<at::Tensor>& ema, torch::optim::Optimizer& optimizer);

// A checkpoint read once: its meta (whose config builds the model), then the weights. For
// callers that need both, or both weight sets (export), without reading the file again.
class CheckpointReader {
 public:
  // Throws megafold::Error naming the file when it cannot be read.
  explicit CheckpointReader(const std::string& path);
  const CheckpointMeta& meta() const { return meta_; }
  // The training weights (ema false) or their EMA into `model`, built with meta()'s config.
  void load_weights(torch::nn::Module& model, bool ema);

 private:
  std::string path_;
  torch::serialize::InputArchive archive_;
  CheckpointMeta meta_;
};

// Loads only the model's weights for inference: the EMA weights when `ema` (what validation
// reports and prediction uses), else the raw training weights. The model must be built with
// the checkpoint's config (read_checkpoint_meta). Throws megafold::Error naming the file.
CheckpointMeta load_weights(const std::string& path, torch::nn::Module& model, bool ema);

}  // namespace megafold
