#pragma once
// The training workloads that `megafold fit` and `megafold memory` measure, each one whole
// optimiser step as the trainer takes it (bf16 autocast on a GPU, AdamW, EMA):
//   trunk48   the 48-block Pairformer stack (AF3 widths: c_s 384, c_z 128), one pass, on random
//             single and pair inputs; loss = mean(z^2) + mean(s^2) of its output.
//   af3-full  the whole model of configs/af3-full.json (input embedder, 4-block MSA module,
//             48-block trunk with its most recycling passes, distogram head, diffusion module
//             with 48 samples, pLDDT head every step, the template embedder) on a bundled
//             structure's first n tokens (3kpr, 1652 tokens; longer crops pad it, which has the
//             shapes and cost of n real tokens) with data.msa_rows MSA rows (the query and random
//             rows) and data.max_templates templates made from its own residues (the bundled
//             entries carry no MSAs or template hits).
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/features.h"
#include "model/model.h"
#include "config/config.h"

namespace megafold::cli {

struct Workload {
  std::string name;          // trunk48 | af3-full
  int64_t n = 0;             // tokens
  config::TrainConfig cfg;    // the model's config (af3-full: the built-in one, memory mode and crop set)
  std::string inputs;        // what the inputs are, for result rows
  c10::Device device{c10::kCPU};
  // One optimiser step (forward, loss, backward, AdamW, EMA); returns the loss.
  std::function<double(int64_t step)> step;
  // The trunk's Pairformer stack (both workloads): where its offloaded block inputs are.
  model::PairformerStack trunk{nullptr};
  // The whole model and its batch (af3-full only), for the per-module profile.
  std::shared_ptr<model::MegaFold> model;
  std::shared_ptr<data::Batch> batch;
  int64_t parameters = 0;    // number of trained parameters
};

// name, tokens, memory mode; data_dir holds the bundled structures (af3-full).
// assignments: "key=value" config overrides of af3-full (as `train --set`; e.g.
// model.templates.n_blocks=0 for the model without templates), applied before the memory mode
// and the crop, which --memory and --n set.
Workload make_workload(const std::string& name, int64_t n, const std::string& memory, const std::string& data_dir,
                       const c10::Device& device, const std::vector<std::string>& assignments = {});

}  // namespace megafold::cli
