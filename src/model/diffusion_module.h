#pragma once
// The AF3 diffusion module (SI Alg. 20) with EDM preconditioning, its training loss (SI Sec.
// 3.7.1 and 4.2: noise levels, random rigid augmentation, weighted aligned MSE plus smooth
// lDDT) and the inference sampler (Alg. 18, with the augmentation of Alg. 19).
//
// Atoms are the batch's atom list (AtomLayout: the atoms the tokens have, A of them); the
// sampler returns positions in the dense [N * kMaxAtomsPerToken] layout of data::Batch.
// Several diffusion samples of one trunk pass run as a batch of B * S rows, example-major
// (rows b * S .. b * S + S - 1 belong to example b).
#include <torch/nn/module.h>

#include <memory>

#include "data/features.h"
#include "model/atom_attention.h"
#include "model/config.h"
#include "model/diffusion.h"
#include "model/embedder.h"

namespace megafold::model {

// What the diffusion module reads from one trunk pass.
struct TrunkContext {
  const data::Batch* batch = nullptr;
  at::Tensor s_inputs;  // [B, N, c_s_inputs]
  at::Tensor s_trunk;   // [B, N, c_s]
  at::Tensor z_trunk;   // [B, N, N, c_z]
};

class DiffusionModuleImpl : public torch::nn::Module {
 public:
  DiffusionModuleImpl(const DiffusionConfig& cfg, const ModelConfig& trunk, int64_t c_s_inputs);

  // Everything that does not depend on the noise: computed once per trunk pass and shared by
  // every sample. The pair representations themselves (the conditioned z, the atom window
  // pairs) are needed only through the attention biases projected from them, so those are
  // what is kept: per token-transformer block [B, H, N, N], per atom-transformer block
  // [B, blocks, 32, 128, H_atom], all fp32 (their gradients sum over samples and chunks).
  struct Prepared {
    const TrunkContext* ctx = nullptr;
    at::Tensor s_base;                   // [B, N, c_s] projected single before the noise level
    at::Tensor atom_c;                   // [B, A, c_atom] atom single conditioning (Alg. 5)
    std::vector<at::Tensor> token_biases, encoder_biases, decoder_biases;
    at::Tensor atom_mask;                // [B, A] the atoms the network sees: every atom the tokens have
    at::Tensor loss_mask;                // [B, A] the resolved ones, which the losses score
    at::Tensor atom_weight;              // [B, A] AF3's molecule-type weights (atom_loss_weights)
    at::Tensor atom_radius;              // [B, A] smooth-lDDT radii (atom_lddt_radius)
    std::shared_ptr<AtomLayout> layout;
    std::shared_ptr<AtomWindows> windows;
    // The tensors above that carry gradients, in a fixed order (checkpoint inputs), and back.
    std::vector<at::Tensor> tensors() const;
    void set_tensors(const std::vector<at::Tensor>& t);
  };
  Prepared prepare(const TrunkContext& ctx);

  // Denoised positions D(x; t) = c_skip x + c_out F(c_in x; t) (EDM, sigma_data from the
  // config). x_noisy [B * S, A, 3], t [B * S] noise levels in Angstrom.
  at::Tensor forward(const at::Tensor& x_noisy, const at::Tensor& t, const Prepared& p);

  const DiffusionConfig& config() const { return cfg_; }

 private:
  DiffusionConfig cfg_;
  RelativePositionEncoding relpos_{nullptr};
  DiffusionConditioning conditioning_{nullptr};
  AtomAttentionEncoder encoder_{nullptr};
  DiffusionTransformer transformer_{nullptr};
  AtomAttentionDecoder decoder_{nullptr};
  at::Tensor ln_s_w_, ln_s_b_, w_s_, ln_a_w_, ln_a_b_;
};
TORCH_MODULE(DiffusionModule);

// The batch's ground truth in the network's atom layout [B, A, 3] (the batch's dtype), with its
// unresolved atoms (which the network sees, the losses not) at the resolved atoms' centroid
// rather than the file frame's origin, so their noisy copies stay near the molecule.
at::Tensor ground_truth_atoms(const DiffusionModuleImpl::Prepared& p, const data::Batch& b);

// AF3 SI Alg. 19: centre each row on the mean of its masked atoms, rotate it by a uniformly
// random rotation and shift it by s_trans * N(0, I). x [R, A, 3], mask [R, A]. All draws come
// from `gen` (a CPU generator), so results do not depend on the device.
at::Tensor centre_random_augmentation(const at::Tensor& x, const at::Tensor& mask, at::Generator& gen,
                                      double s_trans = 1.0);

struct DiffusionLoss {
  at::Tensor total;        // differentiable scalar: mean over rows of w(t) (MSE + alpha_bond bond) + smooth lDDT
  at::Tensor mse;          // scalar, unweighted mean over rows
  at::Tensor smooth_lddt;  // scalar, mean over rows
  at::Tensor bond;         // scalar, mean over rows of the bond loss (0 for a batch without bonds)
};

// AF3 SI Eq. 5: per row, the mean over bonds of (|x_a - x_b| - |gt_a - gt_b|)^2, x and gt
// [R, A, 3], bond_atoms [R, NB, 2] int64 atom indices, bond_mask [R, NB] -> [R] (0 without bonds).
at::Tensor bond_loss(const at::Tensor& x, const at::Tensor& gt, const at::Tensor& bond_atoms, const at::Tensor& bond_mask);

// AF3 SI Sec. 3.7.1: per example `samples` noisy copies of the augmented ground truth with
// t = sigma_data * exp(-1.2 + 1.5 N(0, 1)); loss weight (t^2 + sigma_data^2) / (t sigma_data)^2
// on the aligned MSE plus alpha_bond times the bond loss (the EDM weight, as Protenix and Boltz
// read AF3's Eq. 6). Deterministic in `seed`. chunk > 0 runs the samples in chunks of that
// many, each recomputed in backward (same loss and gradients, activation memory of one chunk);
// 0 runs them all at once.
DiffusionLoss diffusion_loss(DiffusionModule& module, const TrunkContext& ctx, int64_t samples, int64_t chunk,
                             uint64_t seed);

struct SamplerConfig {
  int64_t steps = 200;
  double gamma0 = 0.8, gamma_min = 1.0, noise_scale = 1.003, step_scale = 1.5;
  double s_max = 160.0, s_min = 4e-4, rho = 7.0;  // noise schedule (AF3 SI Sec. 3.7.1)
  // Reflect samples whose stereocentres mostly have the wrong hand (chirality.h; not in AF3).
  bool reflect_mirror_images = true;
};

// c_tau = sigma_data * (s_max^(1/rho) + tau (s_min^(1/rho) - s_max^(1/rho)))^rho for tau = 0,
// 1/steps, .., 1: [steps + 1] float64, decreasing from sigma_data * s_max.
at::Tensor noise_schedule(const SamplerConfig& cfg, double sigma_data);

// AF3 SI Alg. 18: `samples` structures per example from noise, without gradients, in the dense
// layout [B * samples, N * kMaxAtomsPerToken, 3] (zeros in slots without an atom), mirror images
// reflected when cfg.reflect_mirror_images. Deterministic in `seed`.
at::Tensor sample_structures(DiffusionModule& module, const TrunkContext& ctx, int64_t samples,
                             const SamplerConfig& cfg, uint64_t seed);

}  // namespace megafold::model
