#include "model/model.h"

#include <ATen/ATen.h>

#include <limits>
#include <optional>

#include "core/check.h"
#include "core/seed.h"
#include "data/residue_constants.h"
#include "dist/process_group.h"
#include "model/confidence_scores.h"
#include "model/memory_plan.h"
#include "model/permutation.h"
#include "model/scoring.h"

namespace megafold::model {
namespace {

// The sampler of a model: `steps` steps (rollout or full), the model's mirror-image setting.
SamplerConfig sampler(const ModelConfig& cfg, int64_t steps) {
  SamplerConfig sc;
  sc.steps = steps;
  sc.reflect_mirror_images = cfg.diffusion.reflect_mirror_images;
  return sc;
}

}  // namespace

MegaFoldImpl::MegaFoldImpl(const ModelConfig& cfg) : cfg_(cfg) {
  MF_CHECK(cfg.recycles >= 1, "model.recycles must be >= 1, got ", cfg.recycles);
  MF_CHECK(cfg.confidence.n_blocks == 0 || cfg.diffusion.samples > 0,
           "model.confidence needs the diffusion module (model.diffusion.samples > 0)");
  embedder_ = register_module("embedder", InputEmbedder(cfg));
  if (cfg.templates.n_blocks > 0) templates_ = register_module("templates", TemplateEmbedder(cfg));
  if (cfg.msa.n_blocks > 0) msa_ = register_module("msa", MsaModule(cfg));
  pairformer_ = register_module("pairformer", PairformerStack(cfg));
  distogram_ = register_module("distogram", DistogramHead(cfg));
  if (cfg.diffusion.samples > 0)
    diffusion_ = register_module("diffusion", DiffusionModule(cfg.diffusion, cfg, s_inputs_width(cfg)));
  if (cfg.confidence.n_blocks > 0)
    confidence_ = register_module("confidence", ConfidenceHead(cfg, s_inputs_width(cfg)));
  if (cfg.recycles > 1) {
    // Zero projections: every pass starts as the first until recycling proves useful.
    ln_z_prev_w_ = register_parameter("ln_z_prev_weight", torch::ones({cfg.c_z}));
    ln_z_prev_b_ = register_parameter("ln_z_prev_bias", torch::zeros({cfg.c_z}));
    w_z_prev_ = register_parameter("w_z_prev", torch::zeros({cfg.c_z, cfg.c_z}));
    ln_s_prev_w_ = register_parameter("ln_s_prev_weight", torch::ones({cfg.c_s}));
    ln_s_prev_b_ = register_parameter("ln_s_prev_bias", torch::zeros({cfg.c_s}));
    w_s_prev_ = register_parameter("w_s_prev", torch::zeros({cfg.c_s, cfg.c_s}));
  }
}

TrunkOutput MegaFoldImpl::forward(const data::Batch& batch, uint64_t dropout_seed, int64_t cycles,
                                  dist::ProcessGroup* pair_group) {
  if (cycles <= 0) cycles = cfg_.recycles;
  MF_CHECK(cycles <= cfg_.recycles, "forward: ", cycles, " trunk passes requested, the model recycles at most ",
           cfg_.recycles);
  const at::Tensor token_mask = batch.token_mask;                            // [B, N]
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);  // [B, N, N]
  const Embedding emb = embedder_->forward(batch);
  std::optional<dist::PairShard> shard;
  if (pair_group != nullptr && pair_group->world() > 1) shard = dist::make_pair_shard(*pair_group, token_mask.size(1));
  PairformerState prev;
  for (int64_t c = 0; c < cycles; ++c) {
    const bool last = c + 1 == cycles;
    // Earlier passes run without a graph: AF3 backpropagates through the last pass only.
    at::AutoGradMode grad(last && at::GradMode::is_enabled());
    PairformerState st{emb.s, emb.z};
    if (c > 0) {
      st.z = st.z + at::linear(at::layer_norm(prev.z, {cfg_.c_z}, ln_z_prev_w_, ln_z_prev_b_), w_z_prev_);
      st.s = st.s + at::linear(at::layer_norm(prev.s, {cfg_.c_s}, ln_s_prev_w_, ln_s_prev_b_), w_s_prev_);
    }
    // The last pass keeps dropout_seed itself, so a single pass draws the masks it always did.
    const uint64_t seed = last ? dropout_seed : mix_seed(dropout_seed, 0x72656379 + c);  // "recy"
    // AF3 SI Alg. 1: the templates, then the MSA, update z before the Pairformer.
    if (!templates_.is_empty()) st.z = templates_->forward(batch, st.z, pair_mask, mix_seed(seed, 0x746d706c));  // "tmpl"
    if (!msa_.is_empty()) st.z = msa_->forward(batch, emb.s_inputs, st.z, pair_mask, mix_seed(seed, 0x6d7361));
    // A crop without padding runs the Pairformer without masks: all ones change nothing, and the
    // attention kernels' unmasked form is faster.
    const at::Tensor trunk_tokens = batch.padded ? token_mask : at::Tensor();
    const at::Tensor trunk_pairs = batch.padded ? pair_mask : at::Tensor();
    if (shard) {
      prev = pairformer_->forward({st.s, dist::split_rows(st.z, *shard)}, trunk_tokens, trunk_pairs, seed, &*shard);
      prev.z = dist::join_rows(prev.z, *shard);
    } else {
      prev = pairformer_->forward(st, trunk_tokens, trunk_pairs, seed);
    }
    if (!last) prev = {prev.s.detach(), prev.z.detach()};
  }
  return {emb.s_inputs, prev.s, prev.z, distogram_->forward(prev.z)};
}

Losses MegaFoldImpl::loss(const data::Batch& batch, const TrunkOutput& out, uint64_t noise_seed, bool confidence) {
  const TrunkContext ctx{&batch, out.s_inputs, out.s, out.z};
  const bool rollout = confidence && has_confidence();
  // AF3 SI Sec. 4.3: the head learns on the model's own structure from a short rollout. AF3 SI
  // Sec. 4.2: the ground truth's interchangeable chains and symmetric atoms are matched to that
  // rollout, and every loss of the step (distogram, diffusion, confidence) sees the matched
  // ground truth; a step without a rollout keeps the file's labelling.
  at::Tensor x;
  std::optional<data::Batch> matched;
  if (rollout) {
    x = sample_structures(diffusion_, ctx, 1, sampler(cfg_, cfg_.confidence.rollout_steps), mix_seed(noise_seed, 1));
    matched = permute_ground_truth(x, batch);
  }
  const data::Batch& gt = matched ? *matched : batch;
  const DistogramMetrics d = distogram_loss(out.distogram_logits, gt.rep_coords, gt.rep_mask * gt.token_mask,
                                            cfg_.distogram_min, cfg_.distogram_max);
  Losses l;
  l.total = l.distogram = d.loss;
  l.distogram_accuracy = d.accuracy;
  if (!has_diffusion()) return l;
  const TrunkContext gt_ctx{&gt, out.s_inputs, out.s, out.z};
  const DiffusionLoss dl = diffusion_loss(diffusion_, gt_ctx, cfg_.diffusion.samples,
                                          diffusion_sample_chunk(cfg_, batch.n_tokens()), noise_seed);
  l.total = l.total + cfg_.diffusion.weight * dl.total;
  l.diffusion_mse = dl.mse;
  l.smooth_lddt = dl.smooth_lddt;
  l.bond = dl.bond;
  if (!rollout) return l;
  const ConfidenceLogits logits = confidence_(batch, out.s_inputs, out.s, out.z, x, mix_seed(noise_seed, 2));
  const ConfidenceLoss cl = confidence_loss(logits, x, gt, cfg_.confidence);
  l.total = l.total + cfg_.confidence.weight * cl.total;
  l.plddt = cl.plddt, l.pae = cl.pae, l.pde = cl.pde, l.resolved = cl.resolved;
  l.plddt_target = cl.plddt_target;
  const at::Tensor centre_mask = gt.centre_mask * gt.token_mask;
  l.rollout_mirrored =
      mirror_images(slot_atoms(x, gt.centre_slot), slot_atoms(gt.atom_coords.reshape_as(x), gt.centre_slot), centre_mask)
          .mean();
  return l;
}

at::Tensor MegaFoldImpl::sample(const data::Batch& batch, const TrunkOutput& out, int64_t samples, uint64_t seed) {
  MF_CHECK(has_diffusion(), "sample: this model has no diffusion module (model.diffusion.samples is 0)");
  const TrunkContext ctx{&batch, out.s_inputs, out.s, out.z};
  return sample_structures(diffusion_, ctx, samples, sampler(cfg_, cfg_.diffusion.sampler_steps), seed);
}

Prediction MegaFoldImpl::predict(const data::Batch& batch, const TrunkOutput& out, int64_t samples, uint64_t seed) {
  at::NoGradGuard no_grad;
  Prediction p;
  p.coords = sample(batch, out, samples, seed);
  p.contact_probs = contact_probabilities(out.distogram_logits, cfg_.distogram_min, cfg_.distogram_max);
  if (!has_confidence()) return p;
  const int64_t B = batch.size(), A = p.coords.size(1), N = batch.n_tokens();
  const int64_t chains = batch.asym_id.max().item<int64_t>() + 1;
  const at::Tensor per_example = p.coords.view({B, samples, A, 3});
  const at::Tensor atom_chain = batch.asym_id.to(at::kCPU).repeat_interleave(data::kMaxAtomsPerToken, 1);
  // The clash check sees polymer atoms only (AF3 leaves ligands and ions out).
  const at::Tensor polymer = (batch.mol_type != static_cast<int64_t>(data::MolType::kLigand)).to(batch.ref.mask.dtype());
  const at::Tensor atom_present =
      (batch.ref.mask * (batch.token_mask * polymer).unsqueeze(-1)).to(at::kCPU).reshape({B, A});
  // The disorder term measures each example's protein residues (AF3 SI Sec. 5.9.3).
  std::vector<ProteinResidues> residues;
  for (int64_t b = 0; b < B; ++b) residues.push_back(protein_residues(batch, b));
  std::vector<at::Tensor> plddt, pae;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  p.ptm = at::empty({B, samples}, f64), p.iptm = at::empty({B, samples}, f64);
  p.fraction_disordered = at::empty({B, samples}, f64), p.ranking_score = at::empty({B, samples}, f64);
  p.has_clash = at::empty({B, samples}, at::kBool);
  p.chain_pair_iptm = at::empty({B, samples, chains, chains}, f64);
  // One sample of every example at a time: the head's pair activations are [B, N, N, c_z].
  for (int64_t k = 0; k < samples; ++k) {
    const at::Tensor x = per_example.select(1, k);
    const ConfidenceLogits logits = confidence_(batch, out.s_inputs, out.s, out.z, x, 0);
    plddt.push_back(plddt_from_logits(logits.plddt));
    pae.push_back(expected_error(logits.pae, cfg_.confidence.error_max));
    for (int64_t b = 0; b < B; ++b) {
      const TmScores tm = tm_scores(logits.pae[b], batch.token_mask[b], batch.frame_mask[b], batch.asym_id[b], chains,
                                    cfg_.confidence.error_max);
      const bool clash = has_clash(x[b], atom_present[b], atom_chain[b], chains);
      p.ptm[b][k] = tm.ptm, p.iptm[b][k] = tm.iptm, p.has_clash[b][k] = clash;
      p.chain_pair_iptm[b][k].copy_(tm.chain_pair_iptm);
      // A diverged sample (non-finite coordinates) has no surface: it scores NaN, and the
      // caller reports the coordinates.
      if (at::isfinite(x[b]).all().item<bool>()) {
        const double disorder = fraction_disordered(x[b], residues[b]);
        p.fraction_disordered[b][k] = disorder;
        p.ranking_score[b][k] = ranking_score(tm, disorder, clash);
      } else {
        p.fraction_disordered[b][k] = std::numeric_limits<double>::quiet_NaN();
        p.ranking_score[b][k] = std::numeric_limits<double>::quiet_NaN();
      }
    }
  }
  p.plddt = at::stack(plddt, 1).reshape({B * samples, A});
  p.pae = at::stack(pae, 1).reshape({B * samples, N, N});
  p.ptm = p.ptm.view({-1}), p.iptm = p.iptm.view({-1}), p.ranking_score = p.ranking_score.view({-1});
  p.fraction_disordered = p.fraction_disordered.view({-1});
  p.has_clash = p.has_clash.view({-1});
  p.chain_pair_iptm = p.chain_pair_iptm.view({B * samples, chains, chains});
  return p;
}

}  // namespace megafold::model
