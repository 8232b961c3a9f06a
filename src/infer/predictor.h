#pragma once
// Inference from a training checkpoint: the model rebuilt from the checkpoint's own config
// with its EMA weights, trunk recycling as configured, structures from the diffusion sampler
// and pLDDT from the confidence head. Shared by `megafold predict` and `megafold eval`.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <string>
#include <vector>

#include "data/structure.h"
#include "model/hand_probe.h"
#include "model/model.h"
#include "core/checkpoint.h"
#include "config/config.h"

namespace megafold::infer {

struct PredictOptions {
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t sampler_steps = 0;    // 0 = the checkpoint config's model.diffusion.sampler_steps
  bool ema = true;              // EMA weights (as validation reports); false = raw weights
  std::vector<std::string> set; // config assignments over the checkpoint's (config::apply_assignments)
};

struct PredictedEntry {
  at::Tensor coords;            // [samples, n_token * kMaxAtomsPerToken, 3] float, CPU, Angstrom
  at::Tensor plddt;             // [samples, n_token * kMaxAtomsPerToken] in [0, 100]; undefined
                                // without a confidence head
  std::vector<double> plddt_mean;  // per sample, over the atoms predicted_atom_mask marks; empty
                                   // without a confidence head
  // With a confidence head (undefined without; CPU): per sample, the expected PAE [samples, N, N]
  // Angstrom, pTM, ipTM (NaN with one chain), chain-pair ipTM [samples, C, C], the clash flag, the
  // fraction disordered and the ranking score (model/confidence_scores.h).
  at::Tensor pae, ptm, iptm, chain_pair_iptm, has_clash, fraction_disordered, ranking_score;
  at::Tensor contact_probs;     // [N, N] P(representative atoms within 8 A), from the distogram
  std::vector<double> lddt_ca;  // per sample, against the entry's coordinates; empty when the
  std::vector<double> lddt_all; // entry has none (FASTA input)
  std::vector<std::array<double, data::kNumMolTypes>> lddt_by_type;  // per sample (NaN: no such atoms)
  std::vector<std::vector<double>> ligand_rmsd;  // per sample, per ligand chain (pocket-aligned; NaN:
                                                 // no resolved atom or pocket)
  std::vector<bool> mirrored;   // per sample: the entry's mirror image (model/scoring.h)
};

class Predictor {
 public:
  // Throws megafold::Error naming the checkpoint when it cannot be read or has no diffusion module.
  Predictor(const std::string& checkpoint, const PredictOptions& opts);
  // All tokens of `e` (no crop), `samples` structures, deterministic in `seed`.
  PredictedEntry predict(const data::Entry& e, int64_t samples, uint64_t seed);
  // model/hand_probe.h on all tokens of `e`, with the trunk pass predict() would make.
  std::vector<model::HandProbeRow> probe_hand(const data::Entry& e, const std::vector<double>& noise, int64_t draws,
                                              uint64_t seed);
  const config::TrainConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  const c10::Device& device() const { return device_; }

 private:
  // The batch predict() makes of all tokens of `e` (MSA rows drawn with `seed`), on the device.
  data::Batch batch(const data::Entry& e, uint64_t seed) const;
  // The checkpoint read once for both its config and its weights.
  Predictor(megafold::CheckpointReader reader, const std::string& checkpoint, const PredictOptions& opts);

  config::TrainConfig cfg_;
  int64_t step_ = 0;
  c10::Device device_;
  bool autocast_;
  model::MegaFold model_{nullptr};
};

// Atom slots a prediction has: every heavy atom of each residue token's type, slot 0 of a per-atom token
// ([n_token * kMaxAtomsPerToken], the layout of Entry::atom_mask).
std::vector<uint8_t> predicted_atom_mask(const data::Entry& e);

// Loads a structure (.cif/.pdb, optionally .gz), a FASTA file or AlphaFold 3 JSON by its name,
// printing its warnings; for JSON input `seeds` (when given) receives the job's modelSeeds.
data::Entry load_input(const std::string& path, std::vector<int64_t>* seeds = nullptr);

}  // namespace megafold::infer
