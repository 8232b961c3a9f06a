#include "model/diffusion_module.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/chirality.h"
#include "model/memory_plan.h"
#include "model/recompute.h"
#include "model/structure_losses.h"

namespace megafold::model {
namespace {

using data::kMaxAtomsPerToken;

// Each example's row repeated for its S samples (example-major).
at::Tensor per_sample(const at::Tensor& x, int64_t S) { return S == 1 ? x : x.repeat_interleave(S, 0); }

at::Tensor randn(at::IntArrayRef shape, at::Generator& gen, const at::TensorOptions& to) {
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).to(to);
}

// Uniformly random proper rotations [R, 3, 3]: QR of a Gaussian matrix with the signs fixed
// (Haar measure), then a column flipped where the determinant is -1.
at::Tensor random_rotations(int64_t R, at::Generator& gen, const at::TensorOptions& to) {
  const auto [q, r] = at::linalg_qr(at::randn({R, 3, 3}, gen, at::TensorOptions().dtype(at::kDouble)));
  at::Tensor rot = q * at::sign(at::diagonal(r, 0, -2, -1)).unsqueeze(1);
  rot.select(2, 2).mul_(at::sign(at::linalg_det(rot)).unsqueeze(1));
  return rot.to(to);
}

int64_t samples_of(const at::Tensor& x, const TrunkContext& ctx) {
  const int64_t B = ctx.batch->size();
  MF_CHECK(x.size(0) % B == 0, "diffusion: ", x.size(0), " rows are not a multiple of the batch size ", B);
  return x.size(0) / B;
}

}  // namespace

DiffusionModuleImpl::DiffusionModuleImpl(const DiffusionConfig& cfg, const ModelConfig& trunk, int64_t c_s_inputs)
    : cfg_(cfg) {
  // The memory modes past fast keep only the transformer blocks' inputs per sample.
  const bool recompute = memory_plan(trunk).recompute_diffusion_blocks;
  relpos_ = register_module("relpos", RelativePositionEncoding(trunk.c_z, trunk.relpos_r_max, trunk.relpos_s_max));
  conditioning_ = register_module("conditioning", DiffusionConditioning(cfg, trunk.c_s, c_s_inputs, trunk.c_z));
  encoder_ = register_module("atom_encoder", AtomAttentionEncoder(cfg, trunk.c_s, trunk.c_z, recompute));
  transformer_ = register_module("transformer", DiffusionTransformer(cfg.c_token, trunk.c_s, trunk.c_z, cfg.n_blocks,
                                                                     cfg.heads, cfg.transition_factor, recompute));
  decoder_ = register_module("atom_decoder", AtomAttentionDecoder(cfg, recompute));
  ln_s_w_ = register_parameter("ln_s_weight", torch::ones({trunk.c_s}));
  ln_s_b_ = register_parameter("ln_s_bias", torch::zeros({trunk.c_s}));
  w_s_ = register_parameter("w_s", torch::zeros({cfg.c_token, trunk.c_s}));
  ln_a_w_ = register_parameter("ln_a_weight", torch::ones({cfg.c_token}));
  ln_a_b_ = register_parameter("ln_a_bias", torch::zeros({cfg.c_token}));
}

std::vector<at::Tensor> DiffusionModuleImpl::Prepared::tensors() const {
  std::vector<at::Tensor> t{s_base, atom_c};
  for (const auto* v : {&token_biases, &encoder_biases, &decoder_biases}) t.insert(t.end(), v->begin(), v->end());
  return t;
}

void DiffusionModuleImpl::Prepared::set_tensors(const std::vector<at::Tensor>& t) {
  MF_CHECK(t.size() == 2 + token_biases.size() + encoder_biases.size() + decoder_biases.size(),
           "diffusion: prepared tensors do not match");
  size_t k = 0;
  s_base = t[k++];
  atom_c = t[k++];
  for (auto* v : {&token_biases, &encoder_biases, &decoder_biases})
    for (at::Tensor& x : *v) x = t[k++];
}

DiffusionModuleImpl::Prepared DiffusionModuleImpl::prepare(const TrunkContext& ctx) {
  const data::Batch& b = *ctx.batch;
  Prepared p;
  p.ctx = &ctx;
  const at::Tensor z = conditioning_->pair(ctx.z_trunk, relpos_(b));
  p.s_base = conditioning_->single_base(ctx.s_inputs, ctx.s_trunk);
  const int64_t B = b.size(), D = b.n_tokens() * kMaxAtomsPerToken;
  p.layout = std::make_shared<AtomLayout>(b);
  const AtomLayout& layout = *p.layout;
  // The network sees every atom, resolved or not (as AF3 does); only the losses need the structure.
  p.atom_mask = layout.exists;
  p.loss_mask = layout.from_dense((b.atom_mask * b.token_mask.unsqueeze(-1)).reshape({B, D})) * layout.exists;
  p.atom_weight = layout.from_dense(atom_loss_weights(b.mol_type));
  p.atom_radius = layout.from_dense(atom_lddt_radius(b.mol_type));
  p.windows = std::make_shared<AtomWindows>(layout.atoms(), b.restype.device());
  const AtomConditioning atoms = encoder_->condition(b.ref, ctx.s_trunk, z, layout, *p.windows);
  p.atom_c = atoms.c;
  p.token_biases = transformer_->pair_biases(z);
  p.encoder_biases = encoder_->pair_biases(atoms.p);
  p.decoder_biases = decoder_->pair_biases(atoms.p);
  return p;
}

at::Tensor DiffusionModuleImpl::forward(const at::Tensor& x_noisy, const at::Tensor& t, const Prepared& p) {
  const TrunkContext& ctx = *p.ctx;
  const int64_t S = samples_of(x_noisy, ctx);
  const double sd = cfg_.sigma_data;
  const at::Tensor s = conditioning_->single(t, per_sample(p.s_base, S));
  const at::Tensor atom_mask = per_sample(p.atom_mask, S);
  const at::Tensor t3 = t.view({-1, 1, 1});
  // EDM preconditioning: the network sees positions of unit scale.
  const at::Tensor r_noisy = x_noisy / at::sqrt(t3 * t3 + sd * sd);
  const AtomEncoding enc =
      encoder_(per_sample(p.atom_c, S), p.encoder_biases, atom_mask, r_noisy, *p.layout, *p.windows);
  at::Tensor a = enc.a + at::linear(at::layer_norm(s, {s.size(-1)}, ln_s_w_, ln_s_b_), w_s_);
  a = transformer_(a, s, p.token_biases, ctx.batch->token_mask);
  a = at::layer_norm(a, {a.size(-1)}, ln_a_w_, ln_a_b_);
  const at::Tensor r_update = decoder_(a, enc, p.decoder_biases, atom_mask, *p.layout, *p.windows);
  return sd * sd / (sd * sd + t3 * t3) * x_noisy + sd * t3 / at::sqrt(sd * sd + t3 * t3) * r_update;
}

at::Tensor ground_truth_atoms(const DiffusionModuleImpl::Prepared& p, const data::Batch& b) {
  const at::Tensor gt = p.layout->from_dense(b.atom_coords.reshape({b.size(), b.n_tokens() * kMaxAtomsPerToken, 3}));
  const at::Tensor resolved = p.loss_mask.unsqueeze(-1).to(gt.scalar_type());
  const at::Tensor centroid = (gt * resolved).sum(1, true) / resolved.sum(1, true).clamp_min(1);
  return gt * resolved + centroid * (1 - resolved);
}

at::Tensor centre_random_augmentation(const at::Tensor& x, const at::Tensor& mask, at::Generator& gen,
                                      double s_trans) {
  const at::Tensor m = mask.to(x.scalar_type()).unsqueeze(-1);
  const at::Tensor centre = (x * m).sum(1, true) / m.sum(1, true).clamp_min(1);
  const int64_t R = x.size(0);
  const at::Tensor rot = random_rotations(R, gen, x.options());
  const at::Tensor shift = s_trans * randn({R, 1, 3}, gen, x.options());
  return at::matmul(x - centre, rot.transpose(1, 2)) + shift;
}

namespace {

// Loss terms of some rows of the diffusion batch, summed: weighted MSE + smooth lDDT (the
// differentiable total), and the plain MSE and smooth lDDT sums for the logs.
struct RowTerms {
  at::Tensor x_noisy, t, gt, mask, weight, radius;  // the rows' inputs, targets and per-atom terms
  at::Tensor bond_atoms, bond_mask;                  // the rows' bonds
};

std::vector<at::Tensor> row_loss(DiffusionModule& module, const DiffusionModuleImpl::Prepared& prep,
                                 const RowTerms& r) {
  const double sd = module->config().sigma_data;
  const at::Tensor denoised = module(r.x_noisy, r.t, prep);
  const at::Tensor mse = aligned_mse_loss(denoised, r.gt, r.weight, r.mask);  // [R]
  const at::Tensor lddt = smooth_lddt_loss(denoised, r.gt, r.mask, r.radius);  // [R]
  const at::Tensor weight = (r.t * r.t + sd * sd) / (r.t * sd).pow(2);
  const double alpha_bond = module->config().bond_weight;
  const at::Tensor bond = bond_loss(denoised, r.gt, r.bond_atoms, r.bond_mask);  // [R]
  at::Tensor structure = mse;
  if (alpha_bond > 0) structure = structure + alpha_bond * bond;
  return {(weight * structure).sum() + lddt.sum(), mse.sum().detach(), lddt.sum().detach(), bond.sum().detach()};
}

}  // namespace

DiffusionLoss diffusion_loss(DiffusionModule& module, const TrunkContext& ctx, int64_t samples, int64_t chunk,
                             uint64_t seed) {
  MF_CHECK(samples >= 1, "diffusion_loss: samples must be >= 1, got ", samples);
  const data::Batch& b = *ctx.batch;
  const auto prep = module->prepare(ctx);
  const int64_t B = b.size(), A = prep.atom_mask.size(1), R = B * samples;
  const double sd = module->config().sigma_data;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = ctx.s_trunk.options();
  // Every draw is made for all rows up front, so chunking does not change the loss.
  const at::Tensor mask = per_sample(prep.loss_mask, samples);
  const at::Tensor weight = per_sample(prep.atom_weight.to(opts), samples);
  const at::Tensor radius = per_sample(prep.atom_radius.to(opts), samples);
  const at::Tensor bond_atoms = per_sample(b.bond_atoms, samples), bond_mask = per_sample(b.bond_mask.to(opts), samples);
  const at::Tensor gt = centre_random_augmentation(per_sample(ground_truth_atoms(prep, b).to(opts), samples), mask, gen);
  const at::Tensor t = sd * at::exp(-1.2 + 1.5 * randn({R}, gen, opts));
  const at::Tensor x_noisy = gt + t.view({R, 1, 1}) * randn({R, A, 3}, gen, opts);
  std::vector<at::Tensor> sums;
  if (chunk <= 0 || chunk >= samples) {
    sums = row_loss(module, prep, {x_noisy, t, gt, mask, weight, radius, bond_atoms, bond_mask});
  } else {
    // Chunks of samples (all examples' rows of samples c0..c0+C), each recomputed in
    // backward: activations of one chunk at a time. The checkpoint keeps its own copy of the
    // context and of the batch (tensor handles), so the caller's may be gone by backward (a
    // ground truth permuted for this step only, say).
    const auto batch_copy = std::make_shared<const data::Batch>(b);
    auto ctx_copy = std::make_shared<TrunkContext>(ctx);
    ctx_copy->batch = batch_copy.get();
    const auto i64 = at::TensorOptions().dtype(at::kLong).device(x_noisy.device());
    for (int64_t c0 = 0; c0 < samples; c0 += chunk) {
      const int64_t C = std::min(chunk, samples - c0);
      const at::Tensor rows =
          (at::arange(B, i64).unsqueeze(1) * samples + at::arange(c0, c0 + C, i64).unsqueeze(0)).reshape({-1});
      const RowTerms terms{x_noisy.index_select(0, rows), t.index_select(0, rows), gt.index_select(0, rows),
                           mask.index_select(0, rows),    weight.index_select(0, rows), radius.index_select(0, rows),
                           bond_atoms.index_select(0, rows), bond_mask.index_select(0, rows)};
      auto fn = [module, prep, batch_copy, ctx_copy, terms](const std::vector<at::Tensor>& in) mutable {
        DiffusionModuleImpl::Prepared p = prep;
        p.ctx = ctx_copy.get();
        p.set_tensors(in);
        return row_loss(module, p, terms);
      };
      const auto part = checkpointed(fn, prep.tensors());
      if (sums.empty()) sums = part;
      else for (size_t i = 0; i < sums.size(); ++i) sums[i] = sums[i] + part[i];
    }
  }
  return {sums[0] / R, (sums[1] / R).detach(), (sums[2] / R).detach(), (sums[3] / R).detach()};
}

at::Tensor bond_loss(const at::Tensor& x, const at::Tensor& gt, const at::Tensor& bond_atoms,
                     const at::Tensor& bond_mask) {
  const int64_t R = x.size(0), NB = bond_atoms.size(1);
  if (NB == 0) return at::zeros({R}, x.options());
  // Bond vectors as a product with the signed incidence matrix [R, NB, A]: a gather's backward
  // would accumulate an atom's bonds in parallel, in no fixed order; the product is repeatable.
  const int64_t A = x.size(1);
  const at::Tensor incidence = (at::one_hot(bond_atoms.select(2, 0), A) - at::one_hot(bond_atoms.select(2, 1), A))
                                   .to(x.scalar_type());
  auto length = [&](const at::Tensor& y) {
    return at::matmul(incidence, y).pow(2).sum(-1).clamp_min(1e-12).sqrt();  // [R, NB]
  };
  const at::Tensor m = bond_mask.to(x.scalar_type());
  return (m * (length(x) - length(gt.to(x.scalar_type()))).pow(2)).sum(1) / m.sum(1).clamp_min(1);
}

at::Tensor noise_schedule(const SamplerConfig& cfg, double sigma_data) {
  const at::Tensor tau = at::linspace(0, 1, cfg.steps + 1, at::TensorOptions().dtype(at::kDouble));
  const double hi = std::pow(cfg.s_max, 1 / cfg.rho), lo = std::pow(cfg.s_min, 1 / cfg.rho);
  return sigma_data * at::pow(hi + tau * (lo - hi), cfg.rho);
}

at::Tensor sample_structures(DiffusionModule& module, const TrunkContext& ctx, int64_t samples,
                             const SamplerConfig& cfg, uint64_t seed) {
  MF_CHECK(samples >= 1 && cfg.steps >= 1, "sample_structures: samples and steps must be >= 1");
  c10::AutoGradMode no_grad(false);
  const auto prep = module->prepare(ctx);
  const int64_t R = ctx.batch->size() * samples, A = prep.atom_mask.size(1);
  const auto opts = ctx.s_trunk.options();
  const at::Tensor mask = per_sample(prep.atom_mask, samples);
  const at::Tensor c = noise_schedule(cfg, module->config().sigma_data);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor x = c[0].item<double>() * randn({R, A, 3}, gen, opts);
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    const double c_prev = c[step - 1].item<double>(), c_now = c[step].item<double>();
    x = centre_random_augmentation(x, mask, gen);
    const double gamma = c_now > cfg.gamma_min ? cfg.gamma0 : 0.0;
    const double t_hat = c_prev * (gamma + 1);
    const at::Tensor x_noisy =
        x + cfg.noise_scale * std::sqrt(t_hat * t_hat - c_prev * c_prev) * randn({R, A, 3}, gen, opts);
    const at::Tensor denoised = module(x_noisy, at::full({R}, t_hat, opts), prep);
    x = x_noisy + cfg.step_scale * (c_now - t_hat) * (x_noisy - denoised) / t_hat;
  }
  const at::Tensor dense = prep.layout->to_dense(x);
  if (!cfg.reflect_mirror_images) return dense;
  const data::Batch& b = *ctx.batch;
  return reflect_mirror_images(dense, chiral_centres(b), b.ref.mask.reshape({b.size(), -1})).x;
}

}  // namespace megafold::model
