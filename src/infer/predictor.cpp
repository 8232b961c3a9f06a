#include "infer/predictor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "core/check.h"
#include "data/af3_json.h"
#include "data/features.h"
#include "data/reference_atoms.h"
#include "core/autocast.h"
#include "model/scoring.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "core/memory.h"

namespace megafold::infer {
namespace {

config::TrainConfig checkpoint_config(const megafold::CheckpointReader& reader, const std::string& path,
                                     const PredictOptions& opts) {
  config::TrainConfig cfg = config::parse_config(reader.meta().config_json, path, opts.set);
  MF_CHECK(cfg.model.diffusion.samples > 0, path,
           ": this checkpoint has no diffusion module (trained with model.diffusion.samples = 0), so it "
           "cannot predict structures; train with a config that enables it (e.g. cpu-diffusion)");
  if (opts.sampler_steps > 0) cfg.model.diffusion.sampler_steps = opts.sampler_steps;
  return cfg;
}

}  // namespace

Predictor::Predictor(const std::string& checkpoint, const PredictOptions& opts)
    : Predictor(megafold::CheckpointReader(checkpoint), checkpoint, opts) {}

Predictor::Predictor(megafold::CheckpointReader reader, const std::string& checkpoint, const PredictOptions& opts)
    : cfg_(checkpoint_config(reader, checkpoint, opts)), device_(megafold::resolve_device(opts.device)) {
  autocast_ = device_.is_cuda() && cfg_.bf16;
  model_ = model::MegaFold(cfg_.model);
  reader.load_weights(*model_, opts.ema);
  step_ = reader.meta().step;
  model_->to(device_);
  model_->eval();
}

PredictedEntry Predictor::predict(const data::Entry& e, int64_t samples, uint64_t seed) {
  MF_CHECK(samples >= 1, "predict: samples must be >= 1, got ", samples);
  // What the trunk cannot do without, checked before anything is allocated: the pair
  // representation [N, N, c_z] in fp32, its initial value and one update held at once. A lower
  // bound (the ops' transients come on top), so it refuses only what cannot run.
  const double n = e.n_tokens(), pair_bytes = n * n * static_cast<double>(cfg_.model.c_z) * 4.0;
  const double need = 3.0 * pair_bytes, available = static_cast<double>(available_memory(device_));
  if (need > available) {
    char text[320];
    std::snprintf(text, sizeof(text),
                  "%s: %d tokens need at least %.1f GB on %s (3 x the pair representation [N, N, c_z = %lld] in fp32, "
                  "%.1f GB each), %.1f GB are available: predict on a device with more memory, or split the input "
                  "(chains, domains)",
                  e.name.c_str(), e.n_tokens(), need / 1e9, device_.str().c_str(),
                  static_cast<long long>(cfg_.model.c_z), pair_bytes / 1e9, available / 1e9);
    throw Error(text);
  }
  at::NoGradGuard no_grad;
  const data::Batch batch = this->batch(e, seed);
  model::Prediction p;
  {
    AutocastScope ac(at::kCUDA, autocast_, at::kBFloat16);
    const model::TrunkOutput out = model_->forward(batch, 0);
    p = model_->predict(batch, out, samples, seed);
  }
  PredictedEntry r;
  r.coords = p.coords.to(at::kCPU, at::kFloat);
  if (p.plddt.defined()) {
    r.plddt = p.plddt.to(at::kCPU, at::kFloat);
    const std::vector<uint8_t> m = predicted_atom_mask(e);
    const at::Tensor mask = at::tensor(std::vector<float>(m.begin(), m.end()));
    const at::Tensor mean = (r.plddt * mask).sum(1) / mask.sum().clamp_min(1);
    for (int64_t k = 0; k < samples; ++k) r.plddt_mean.push_back(mean[k].item<double>());
    r.pae = p.pae.to(at::kCPU, at::kFloat);
    r.ptm = p.ptm, r.iptm = p.iptm, r.chain_pair_iptm = p.chain_pair_iptm;
    r.has_clash = p.has_clash, r.fraction_disordered = p.fraction_disordered, r.ranking_score = p.ranking_score;
  }
  r.contact_probs = p.contact_probs[0].to(at::kCPU, at::kFloat);
  if (std::any_of(e.atom_mask.begin(), e.atom_mask.end(), [](uint8_t m) { return m != 0; })) {
    const model::StructureScores sc = model::score_structures(p.coords, batch);
    for (int64_t k = 0; k < samples; ++k) {
      r.lddt_ca.push_back(sc.lddt_ca[k].item<double>());
      r.lddt_all.push_back(sc.lddt_all[k].item<double>());
      std::array<double, data::kNumMolTypes> by_type{};
      for (int m = 0; m < data::kNumMolTypes; ++m) by_type[m] = sc.lddt_by_type[k][m].item<double>();
      r.lddt_by_type.push_back(by_type);
      std::vector<double> rmsd;
      for (int64_t l = 0; l < sc.ligand_rmsd.size(1); ++l) rmsd.push_back(sc.ligand_rmsd[k][l].item<double>());
      r.ligand_rmsd.push_back(rmsd);
      r.mirrored.push_back(sc.mirrored[k].item<float>() > 0);
    }
  }
  return r;
}

data::Batch Predictor::batch(const data::Entry& e, uint64_t seed) const {
  // The training run's MSA depth; the rows drawn depend on the seed as everything else does.
  // Templates: each chain's top data.max_templates (AF3 SI 2.4 at inference).
  return data::make_batch({&e}, {{}}, 0, {cfg_.data.msa_rows, seed}, {cfg_.data.max_templates, false, 0}).to(device_);
}

std::vector<model::HandProbeRow> Predictor::probe_hand(const data::Entry& e, const std::vector<double>& noise,
                                                       int64_t draws, uint64_t seed) {
  MF_CHECK(std::any_of(e.atom_mask.begin(), e.atom_mask.end(), [](uint8_t m) { return m != 0; }),
           e.name, ": the hand probe needs a structure's coordinates (mmCIF/PDB input), not sequences");
  at::NoGradGuard no_grad;
  const data::Batch b = batch(e, seed);
  const AutocastScope ac(at::kCUDA, autocast_, at::kBFloat16);
  const model::TrunkOutput out = model_->forward(b, 0);
  const model::TrunkContext ctx{&b, out.s_inputs, out.s, out.z};
  return model::probe_hand(model_->diffusion(), ctx, noise, draws, seed);
}

std::vector<uint8_t> predicted_atom_mask(const data::Entry& e) {
  const data::ReferenceTable& ref = data::reference_atoms();
  std::vector<uint8_t> mask(static_cast<size_t>(e.n_tokens()) * data::kMaxAtomsPerToken, 0);
  for (int i = 0; i < e.n_tokens(); ++i)
    for (int a = 0; a < data::kMaxAtomsPerToken; ++a)
      mask[static_cast<size_t>(i) * data::kMaxAtomsPerToken + a] =
          e.per_atom(i) ? a == 0 : ref[e.restype[i]][a].element > 0 ? 1 : 0;
  return mask;
}

data::Entry load_input(const std::string& path, std::vector<int64_t>* seeds) {
  MF_CHECK(data::is_fasta_file(path) || data::is_structure_file(path) || data::is_json_file(path), path,
           ": unknown input type; expected a structure (.cif .mmcif .pdb .ent, optionally .gz), a FASTA file "
           "(.fasta .fa .faa .fas) or AlphaFold 3 JSON (.json)");
  data::Entry e;
  if (data::is_json_file(path)) {
    data::Af3Input in = data::load_af3_json(path);
    e = std::move(in.entry);
    if (seeds) *seeds = in.seeds;
  } else {
    e = data::is_fasta_file(path) ? data::load_fasta(path) : data::load_entry(path);
  }
  for (const std::string& w : e.warnings) std::cerr << "warning: " << w << "\n";
  return e;
}

}  // namespace megafold::infer
