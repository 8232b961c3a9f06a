#include "cli/workload.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "core/autocast.h"
#include "core/check.h"
#include "core/seed.h"
#include "data/dataset.h"
#include "data/residue_constants.h"
#include "data/structure.h"
#include "model/pairformer.h"
#include "train/ema.h"
#include "train/optimizer.h"

namespace megafold::cli {
namespace {

// The bundled entry the whole-model workload crops (the longest: 1652 tokens).
constexpr const char* kEntry = "3kpr";

int64_t count(const std::vector<at::Tensor>& params) {
  int64_t n = 0;
  for (const at::Tensor& p : params) n += p.numel();
  return n;
}

// AdamW and EMA as the trainer keeps them, one step of them after each backward.
struct Optimiser {
  Optimiser(const std::vector<at::Tensor>& p, const config::OptimConfig& o)
      : params(p), optim(o), adam(p, train::adamw_options(o)), ema(p, o.ema_decay) {}
  void step() {
    train::clip_gradients(params, optim);
    adam.step();
    ema.update(params);
    adam.zero_grad();
  }
  std::vector<at::Tensor> params;
  config::OptimConfig optim;
  torch::optim::AdamW adam;
  train::Ema ema;
};

Workload trunk48(int64_t n, const std::string& memory, const c10::Device& device) {
  Workload w;
  w.name = "trunk48";
  w.n = n;
  w.device = device;
  w.cfg.model.memory = memory;
  w.cfg.model.checkpoint_blocks = true;  // 48 blocks: per-block recomputation in every mode
  w.inputs = "random single and pair inputs";
  at::manual_seed(0);
  auto stack = std::make_shared<model::PairformerStack>(w.cfg.model);
  (*stack)->to(device);
  (*stack)->train();
  const auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
  // The inputs take gradients, as the embedder's outputs would.
  const at::Tensor s0 = at::randn({1, n, w.cfg.model.c_s}, f32).requires_grad_();
  const at::Tensor z0 = at::randn({1, n, n, w.cfg.model.c_z}, f32).requires_grad_();
  const at::Tensor token_mask = at::ones({1, n}, f32), pair_mask = at::ones({1, n, n}, f32);
  w.trunk = *stack;
  const std::vector<at::Tensor> params = (*stack)->parameters();
  w.parameters = count(params);
  auto opt = std::make_shared<Optimiser>(params, w.cfg.optim);
  const bool autocast = device.is_cuda();
  w.step = [stack, opt, s0, z0, token_mask, pair_mask, autocast](int64_t step) {
    at::Tensor loss;
    {
      const AutocastScope ac(at::kCUDA, autocast, at::kBFloat16);
      const model::PairformerState out =
          (*stack)->forward({s0, z0}, token_mask, pair_mask, mix_seed(0x7472756e6b, static_cast<uint64_t>(step)));
      loss = out.z.square().mean() + out.s.square().mean();
    }
    loss.backward();
    opt->step();
    s0.mutable_grad() = at::Tensor();
    z0.mutable_grad() = at::Tensor();
    return loss.item<double>();
  };
  return w;
}

// `count` templates of b's protein tokens made from their own residues: type, and N, CA, C and
// CB (CA for glycine) where resolved. The bundled entries have no template hits; the template
// embedder's cost depends on the shapes only.
void add_self_templates(data::Batch& b, int64_t count) {
  const at::Tensor protein = (b.mol_type == static_cast<int64_t>(data::MolType::kProtein)) * (b.token_mask > 0);
  const at::Tensor gly = b.restype == data::residue_type(data::MolType::kProtein, "GLY");
  const at::Tensor cb_slot = at::where(gly, data::kAtomCA, data::kAtomCB);  // [B, N]
  const at::Tensor slots = at::stack({at::full_like(cb_slot, data::kAtomN), at::full_like(cb_slot, data::kAtomCA),
                                      at::full_like(cb_slot, data::kAtomC), cb_slot}, -1);  // [B, N, 4]
  const at::Tensor coords = b.atom_coords.gather(2, slots.unsqueeze(-1).expand({-1, -1, -1, 3}));
  const at::Tensor mask = b.atom_mask.gather(2, slots) * protein.unsqueeze(-1).to(b.atom_mask.dtype());
  const at::Tensor restype = at::where(protein, b.restype, data::kGapToken);
  b.template_restype = restype.unsqueeze(1).expand({-1, count, -1}).contiguous();
  b.template_coords = (coords * mask.unsqueeze(-1)).unsqueeze(1).expand({-1, count, -1, -1, -1}).contiguous();
  b.template_mask = mask.unsqueeze(1).expand({-1, count, -1, -1}).contiguous();
}

// The first n tokens of the bundled entry, padded to n, with `rows` MSA rows (the query and
// random ones: token types, deletions over the real tokens) and `templates` self-templates.
data::Batch whole_model_batch(const std::string& data_dir, int64_t n, int64_t rows, int64_t templates) {
  data::Entry e;
  for (const std::string& path : data::list_structure_files(data_dir))
    if (data::entry_name(path) == kEntry) e = data::load_entry(path);
  MF_CHECK(!e.name.empty(), "megafold fit: the bundled entry ", kEntry, " is not in ", data_dir,
           " (pass --data with the bundled structures, data/pdb)");
  std::vector<int32_t> crop(std::min<int64_t>(n, static_cast<int64_t>(e.restype.size())));
  std::iota(crop.begin(), crop.end(), 0);
  data::Batch b = data::make_batch({&e}, {crop}, static_cast<int>(n), {1, 0}, {/*max_templates=*/0});
  if (rows > 1) {
    at::manual_seed(1);
    const at::Tensor real = b.token_mask.unsqueeze(1);  // [1, 1, n]
    const at::Tensor other = at::randint(0, data::kNumTokenTypes, {1, rows - 1, n}, b.msa.options());
    b.msa = at::cat({b.msa.narrow(1, 0, 1), other * real.to(at::kLong) +
                                                 (1 - real.to(at::kLong)) * b.msa.narrow(1, 0, 1)}, 1);
    b.msa_deletion = at::cat({b.msa_deletion.narrow(1, 0, 1),
                              at::randint(0, 4, {1, rows - 1, n}, b.msa_deletion.options()) * real}, 1);
    b.msa_mask = real.expand({1, rows, n}).contiguous();
  }
  if (templates > 0) add_self_templates(b, templates);
  return b;
}

Workload whole_model(int64_t n, const std::string& memory, const std::string& data_dir, const c10::Device& device,
                     const std::vector<std::string>& assignments) {
  Workload w;
  w.name = "af3-full";
  w.n = n;
  w.device = device;
  w.cfg = config::load_config("af3-full", assignments);
  w.cfg.model.memory = memory;
  w.cfg.data.crop_size = n;
  w.cfg.model.confidence.every = 1;
  const int64_t rows = w.cfg.data.msa_rows;
  w.inputs = std::string(kEntry) + ": first " + std::to_string(std::min<int64_t>(n, 1652)) + " tokens" +
             (n > 1652 ? " padded to " + std::to_string(n) : "") + ", " + std::to_string(rows) +
             " MSA rows (query + random)" +
             (w.cfg.model.templates.n_blocks > 0 ? ", " + std::to_string(w.cfg.data.max_templates) + " self-templates" : "");
  at::manual_seed(0);
  w.model = std::make_shared<model::MegaFold>(w.cfg.model);
  (*w.model)->to(device);
  (*w.model)->train();
  w.trunk = (*w.model)->pairformer();
  const int64_t templates = w.cfg.model.templates.n_blocks > 0 ? w.cfg.data.max_templates : 0;
  w.batch = std::make_shared<data::Batch>(whole_model_batch(data_dir, n, rows, templates).to(device));
  const std::vector<at::Tensor> params = (*w.model)->parameters();
  w.parameters = count(params);
  auto opt = std::make_shared<Optimiser>(params, w.cfg.optim);
  const bool autocast = device.is_cuda();
  const int64_t passes = w.cfg.model.recycles;
  w.step = [model = w.model, batch = w.batch, opt, autocast, passes](int64_t step) {
    at::Tensor loss;
    {
      const AutocastScope ac(at::kCUDA, autocast, at::kBFloat16);
      const auto seed = static_cast<uint64_t>(step);
      const model::TrunkOutput out = (*model)->forward(*batch, mix_seed(0x64726f70, seed), passes);
      loss = (*model)->loss(*batch, out, mix_seed(0x6e6f6973, seed), /*confidence=*/true).total;
    }
    loss.backward();
    opt->step();
    return loss.item<double>();
  };
  return w;
}

}  // namespace

Workload make_workload(const std::string& name, int64_t n, const std::string& memory, const std::string& data_dir,
                       const c10::Device& device, const std::vector<std::string>& assignments) {
  MF_CHECK(n >= 1, "--n must be >= 1, got ", n);
  model::parse_memory_mode(memory);  // names a bad mode before anything is built
  if (name == "trunk48") {
    MF_CHECK(assignments.empty(), "--set changes the af3-full workload's config; trunk48 has none");
    return trunk48(n, memory, device);
  }
  if (name == "af3-full") return whole_model(n, memory, data_dir, device, assignments);
  throw Error("--model must be trunk48 or af3-full, not '" + name + "'");
}

}  // namespace megafold::cli
