// `megafold memory`: where the memory of a training step of the whole model goes, module by
// module. Each module runs alone on the real inputs of its place in the step (the earlier
// modules' outputs, detached), forward then backward (of its own loss, or of mean squares of
// its outputs), and is measured in tensor bytes on the device (core/memory.h):
//   held_gb           what its forward leaves allocated: its outputs and what it keeps for backward
//   forward_peak_gb   the most its forward had allocated at once
//   backward_peak_gb  the most allocated during its backward (from the same base)
// Then the optimizer state (fp32 parameters, gradients, AdamW moments, EMA) and two whole steps
// (the second's peak: the optimizer state exists by then). One JSON line per row.
#include <ATen/ATen.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/workload.h"
#include "core/autocast.h"
#include "core/check.h"
#include "core/memory.h"
#include "model/memory_plan.h"
#include "core/device.h"

namespace megafold::cli {
namespace {

double gb(int64_t bytes) { return static_cast<double>(bytes) / 1e9; }

// Mean squares of the outputs that carry gradients: a loss whose backward reaches all of them.
at::Tensor squares(const std::vector<at::Tensor>& outs) {
  at::Tensor loss;
  for (const at::Tensor& t : outs) {
    if (!t.defined() || !t.requires_grad()) continue;
    const at::Tensor term = t.to(at::kFloat).square().mean();
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

class Profiler {
 public:
  Profiler(const c10::Device& device, nlohmann::json base) : device_(device), base_(std::move(base)) {}

  // fwd returns the module's loss (a scalar) or its outputs; with grad false only the forward runs.
  void run(const std::string& module, const std::function<std::vector<at::Tensor>()>& fwd, bool grad = true) {
    megafold::synchronize(device_);
    const int64_t start = memory_stats(device_).allocated;
    reset_peak_memory_stats(device_);
    nlohmann::json row = base_;
    row["module"] = module;
    {
      std::vector<at::Tensor> outs;
      {
        at::AutoGradMode mode(grad);
        const AutocastScope ac(at::kCUDA, device_.is_cuda(), at::kBFloat16);
        outs = fwd();
      }
      megafold::synchronize(device_);
      const MemoryStats after = memory_stats(device_);
      row["held_gb"] = gb(after.allocated - start);
      row["forward_peak_gb"] = gb(after.peak - start);
      if (grad) {
        reset_peak_memory_stats(device_);
        const at::Tensor loss = outs.size() == 1 && outs[0].dim() == 0 ? outs[0] : squares(outs);
        if (loss.defined() && loss.requires_grad()) loss.backward();
        megafold::synchronize(device_);
        row["backward_peak_gb"] = gb(memory_stats(device_).peak - start);
      }
    }
    std::cout << row.dump() << std::endl;
  }

  void print(nlohmann::json fields) {
    nlohmann::json row = base_;
    row.update(fields);
    std::cout << row.dump() << std::endl;
  }

 private:
  c10::Device device_;
  nlohmann::json base_;
};

at::Tensor leaf(const at::Tensor& t) { return t.detach().requires_grad_(t.is_floating_point()); }

}  // namespace

int memory_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"n", "N", "crop (tokens, default 384)"},
      {"memory", "fast|balanced|frontier", "memory mode (default fast)"},
      {"data", "DIR", "bundled structures (default data/pdb)"},
      {"device", "auto|cpu|cuda[:i]", "device (default auto)"},
      set_option(),
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("memory",
                       "Per-module memory of one training step of the whole model (configs/af3-full.json, "
                       "as `megafold fit --model af3-full` runs it): for the input embedder, the MSA module, "
                       "a trunk pass without and with gradients, the distogram head, the diffusion module "
                       "and the pLDDT head, what each holds for backward and its forward and backward peaks; "
                       "the optimizer state; the whole step's peak. One JSON line per row.",
                       specs);
    return 0;
  }
  const int64_t n = args.get_int("n", 384);
  const std::string memory = args.get("memory").value_or("fast");
  track_cpu_allocations();
  const c10::Device device = megafold::resolve_device(args.get("device").value_or("auto"));
  megafold::make_current(device);
  Workload w = make_workload("af3-full", n, memory, args.get("data").value_or("data/pdb"), device, args.get_all("set"));
  model::MegaFoldImpl& m = **w.model;
  const data::Batch& batch = *w.batch;
  const model::ModelConfig& cfg = w.cfg.model;
  nlohmann::json base = {{"crop", n}, {"memory_mode", memory}, {"device", device.str()}};
  if (!args.get_all("set").empty()) base["set"] = args.get_all("set");
  Profiler prof(device, base);
  prof.print({{"module", "plan"}, {"plan", model::memory_plan(cfg).describe()}, {"inputs", w.inputs}});

  const at::Tensor pair_mask = batch.token_mask.unsqueeze(2) * batch.token_mask.unsqueeze(1);
  // The real inputs of each module, computed once without a graph.
  model::Embedding emb;
  at::Tensor z_msa;
  model::PairformerState trunk;
  {
    at::NoGradGuard no_grad;
    const AutocastScope ac(at::kCUDA, device.is_cuda(), at::kBFloat16);
    emb = m.embedder()->forward(batch);
    z_msa = m.msa().is_empty() ? emb.z : m.msa()->forward(batch, emb.s_inputs, emb.z, pair_mask, 1);
    trunk = m.pairformer()->forward({emb.s, z_msa}, batch.token_mask, pair_mask, 2);
  }
  prof.run("input embedder", [&] {
    const model::Embedding e = m.embedder()->forward(batch);
    return std::vector<at::Tensor>{e.s, e.z};
  });
  if (!m.templates().is_empty())
    prof.run("template embedder (" + std::to_string(batch.template_mask.size(1)) + " templates)", [&] {
      return std::vector<at::Tensor>{m.templates()->forward(batch, leaf(emb.z), pair_mask, 1)};
    });
  if (!m.msa().is_empty())
    prof.run("MSA module", [&] { return std::vector<at::Tensor>{m.msa()->forward(batch, emb.s_inputs, leaf(emb.z), pair_mask, 1)}; });
  prof.run("trunk pass, no gradients (earlier recycles)", [&] {
    const model::PairformerState out = m.pairformer()->forward({emb.s, z_msa}, batch.token_mask, pair_mask, 2);
    return std::vector<at::Tensor>{out.s, out.z};
  }, /*grad=*/false);
  prof.run("trunk pass (48 blocks)", [&] {
    const model::PairformerState out =
        m.pairformer()->forward({leaf(emb.s), leaf(z_msa)}, batch.token_mask, pair_mask, 2);
    return std::vector<at::Tensor>{out.s, out.z};
  });
  prof.run("distogram head and loss", [&] {
    const at::Tensor logits = m.distogram()->forward(leaf(trunk.z));
    return std::vector<at::Tensor>{model::distogram_loss(logits, batch.rep_coords, batch.rep_mask * batch.token_mask,
                                                         cfg.distogram_min, cfg.distogram_max).loss};
  });
  const model::TrunkContext ctx{&batch, emb.s_inputs, trunk.s, trunk.z};
  if (m.has_diffusion()) {
    const int64_t chunk = model::diffusion_sample_chunk(cfg, n);
    prof.print({{"module", "diffusion sample chunk"}, {"samples", cfg.diffusion.samples}, {"chunk", chunk}});
    prof.run("diffusion module (" + std::to_string(cfg.diffusion.samples) + " samples)", [&] {
      const model::TrunkContext c{&batch, emb.s_inputs, leaf(trunk.s), leaf(trunk.z)};
      return std::vector<at::Tensor>{model::diffusion_loss(m.diffusion(), c, cfg.diffusion.samples, chunk, 3).total};
    });
  }
  if (m.has_confidence()) {
    prof.run("confidence head (rollout and head)", [&] {
      model::SamplerConfig rollout;
      rollout.steps = cfg.confidence.rollout_steps;
      const at::Tensor x = model::sample_structures(m.diffusion(), ctx, 1, rollout, 4);
      const model::ConfidenceLogits logits = m.confidence()(batch, emb.s_inputs, trunk.s, trunk.z, x, 5);
      return std::vector<at::Tensor>{model::confidence_loss(logits, x, batch, cfg.confidence).total};
    });
  }
  m.zero_grad(/*set_to_none=*/true);
  emb = {};
  z_msa = at::Tensor();
  trunk = {};
  // fp32 parameters, gradients, two AdamW moments and the EMA shadow.
  const int64_t param_bytes = w.parameters * 4;
  prof.print({{"module", "optimizer state"}, {"parameters", w.parameters}, {"held_gb", gb(5 * param_bytes)},
              {"parts", "parameters, gradients, AdamW moments (2), EMA"}});
  double peak = 0;
  for (int64_t k = 0; k < 2; ++k) {
    megafold::synchronize(device);
    reset_peak_memory_stats(device);
    w.step(k);
    megafold::synchronize(device);
    peak = gb(memory_stats(device).peak);
  }
  prof.print({{"module", "whole step"}, {"peak_gb", peak}});
  return 0;
}

}  // namespace megafold::cli
