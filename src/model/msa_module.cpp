#include "model/msa_module.h"

#include <torch/nn/functional/embedding.h>

#include <numbers>
#include <string>

#include "core/check.h"
#include "core/seed.h"
#include "data/residue_constants.h"
#include "model/dropout.h"
#include "model/embedder.h"
#include "model/recompute.h"

namespace megafold::model {
namespace F = torch::nn::functional;

namespace {
// MSA features per row and token: token type one-hot, has_deletion, deletion_value (AF3 SI
// Table 5: 2/pi arctan(d / 3)).
constexpr int64_t kMsaFeatures = data::kNumTokenTypes + 2;
}  // namespace

OuterProductMeanImpl::OuterProductMeanImpl(int64_t c_m, int64_t c, int64_t c_z) : c_(c) {
  ln_w_ = register_parameter("ln_weight", torch::ones({c_m}));
  ln_b_ = register_parameter("ln_bias", torch::zeros({c_m}));
  w_ab_ = register_parameter("w_ab", lecun_normal(2 * c, c_m));
  w_o_ = register_parameter("w_o", torch::zeros({c_z, c * c}));
  b_o_ = register_parameter("b_o", torch::zeros({c_z}));
}

at::Tensor OuterProductMeanImpl::forward(const at::Tensor& m, const at::Tensor& msa_mask, int64_t row_chunk) {
  const int64_t N = m.size(2);
  const at::Tensor mask = msa_mask.to(m.scalar_type()).unsqueeze(-1);
  // Rows present at both tokens (counted in float64, which autocast leaves alone, so that
  // counts above 256 stay exact); a token pair no row covers (padding) gets 0 from the zero sum.
  const at::Tensor present = msa_mask.to(at::kDouble);
  const at::Tensor rows = torch::einsum("bsi,bsj->bij", {present, present}).to(at::kFloat);
  auto ab = [&](const at::Tensor& x, const at::Tensor& x_mask) {
    return torch::linear(torch::layer_norm(x, {x.size(-1)}, ln_w_, ln_b_), w_ab_) * x_mask;
  };
  if (row_chunk <= 0 || row_chunk >= N) {
    const at::Tensor a_b = ab(m, mask);
    return project(a_b.narrow(-1, 0, c_), a_b.narrow(-1, c_, c_), rows);
  }
  // Chunks of rows i: m's token axis i is chunked through its transpose [B, N, S, c_m]; b (all
  // tokens j) is recomputed from the whole m for each chunk (S N c_m work, next to S N^2 c^2).
  auto chunk = [this, ab, mask, rows](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>& whole,
                                      int64_t start) {
    const int64_t n = x[0].size(1);
    const at::Tensor a = ab(x[0].transpose(1, 2), mask.narrow(2, start, n)).narrow(-1, 0, c_);
    const at::Tensor b = ab(whole[0], mask).narrow(-1, c_, c_);
    return std::vector<at::Tensor>{project(a, b, rows.narrow(1, start, n))};
  };
  return chunked_checkpoint(chunk, {m.transpose(1, 2)}, {m}, 1, row_chunk)[0];
}

at::Tensor OuterProductMeanImpl::project(const at::Tensor& a, const at::Tensor& b, const at::Tensor& rows) {
  const int64_t B = a.size(0), n = a.size(2), N = b.size(2);
  const at::Tensor outer = torch::einsum("bsic,bsjd->bijcd", {a, b}).reshape({B, n, N, c_ * c_});
  const at::Tensor mean = outer / rows.clamp_min(1.0).unsqueeze(-1).to(outer.scalar_type());
  return torch::linear(mean, w_o_, b_o_);
}

MsaPairWeightedAveragingImpl::MsaPairWeightedAveragingImpl(int64_t c_m, int64_t c_z, int64_t heads, int64_t head_dim)
    : heads_(heads), head_dim_(head_dim) {
  ln_m_w_ = register_parameter("ln_m_weight", torch::ones({c_m}));
  ln_m_b_ = register_parameter("ln_m_bias", torch::zeros({c_m}));
  w_vg_ = register_parameter("w_vg", lecun_normal(2 * heads * head_dim, c_m));  // values, then gates
  ln_z_w_ = register_parameter("ln_z_weight", torch::ones({c_z}));
  ln_z_b_ = register_parameter("ln_z_bias", torch::zeros({c_z}));
  w_b_ = register_parameter("w_b", lecun_normal(heads, c_z));
  w_o_ = register_parameter("w_o", torch::zeros({c_m, heads * head_dim}));
}

at::Tensor MsaPairWeightedAveragingImpl::forward(const at::Tensor& m, const at::Tensor& z,
                                                 const at::Tensor& token_mask) {
  const int64_t B = m.size(0), S = m.size(1), N = m.size(2), H = heads_, c = head_dim_;
  const at::Tensor vg = torch::linear(torch::layer_norm(m, {m.size(-1)}, ln_m_w_, ln_m_b_), w_vg_);
  const at::Tensor v = vg.narrow(-1, 0, H * c).reshape({B, S, N, H, c});
  const at::Tensor g = torch::sigmoid(vg.narrow(-1, H * c, H * c)).reshape({B, S, N, H, c});
  // Weights over keys j in fp32; padded keys get none (a large negative logit, not -inf, so a
  // batch row of padding only still yields finite values).
  const at::Tensor bias = torch::linear(torch::layer_norm(z, {z.size(-1)}, ln_z_w_, ln_z_b_), w_b_);
  const at::ScalarType wide = at::promote_types(bias.scalar_type(), at::kFloat);
  const at::Tensor logits = bias.to(wide) + (token_mask.to(wide) - 1.0).mul(1e9).view({B, 1, N, 1});
  const at::Tensor w = torch::softmax(logits, 2).to(v.scalar_type());  // [B, N(i), N(j), H]
  const at::Tensor o = torch::einsum("bijh,bsjhc->bsihc", {w, v}) * g;
  return torch::linear(o.reshape({B, S, N, H * c}), w_o_);
}

MsaBlockImpl::MsaBlockImpl(const ModelConfig& cfg, bool last) : dropout_(cfg.msa.dropout), plan_(memory_plan(cfg)) {
  opm_ = register_module("opm", OuterProductMean(cfg.msa.c_m, cfg.msa.opm_hidden, cfg.c_z));
  if (!last) {
    pwa_ = register_module("pwa", MsaPairWeightedAveraging(cfg.msa.c_m, cfg.c_z, cfg.msa.heads, cfg.msa.head_dim));
    transition_ = register_module("transition", Transition(cfg.msa.c_m, cfg.transition_factor));
  }
  pair_ = register_module("pair", PairStack(cfg));
}

void MsaBlockImpl::forward(at::Tensor& m, at::Tensor& z, const at::Tensor& msa_mask, const at::Tensor& token_mask,
                           const at::Tensor& pair_mask, uint64_t dropout_seed) {
  // AF3 SI Alg. 8 lines 5-13.
  const bool chunk = plan_.chunk_pairs > 0 && is_training() && at::GradMode::is_enabled();
  z = z + opm_->forward(m, msa_mask, chunk ? plan_.chunk_rows(z.size(1)) : 0);
  if (!pwa_.is_empty()) {
    m = m + shared_dropout(pwa_->forward(m, z, token_mask), dropout_, DropoutAxis::kRowwise, is_training(),
                           mix_seed(dropout_seed, 0x707761));  // "pwa"
    m = m + transition_->forward(m);
  }
  z = pair_->forward(z, pair_mask, dropout_seed);
}

MsaModuleImpl::MsaModuleImpl(const ModelConfig& cfg) : plan_(memory_plan(cfg)) {
  MF_CHECK(cfg.msa.n_blocks >= 1, "MsaModule: model.msa.n_blocks must be >= 1");
  w_m_ = register_parameter("w_m", lecun_normal(cfg.msa.c_m, kMsaFeatures));
  w_s_ = register_parameter("w_s", lecun_normal(cfg.msa.c_m, s_inputs_width(cfg)));
  for (int64_t i = 0; i < cfg.msa.n_blocks; ++i)
    blocks_.push_back(register_module("block_" + std::to_string(i), MsaBlock(cfg, i + 1 == cfg.msa.n_blocks)));
}

at::Tensor MsaModuleImpl::forward(const data::Batch& batch, const at::Tensor& s_inputs, const at::Tensor& z_in,
                                  const at::Tensor& pair_mask, uint64_t dropout_seed) {
  // AF3 SI Alg. 8 lines 1-4 (the rows were drawn by the loader).
  const at::Tensor d = batch.msa_deletion;
  const at::Tensor features =
      torch::cat({F::one_hot(batch.msa, data::kNumTokenTypes).to(at::kFloat), (d > 0).to(at::kFloat).unsqueeze(-1),
                  (torch::atan(d / 3.0) * (2.0 / std::numbers::pi)).unsqueeze(-1)},
                 -1)
          .to(w_m_.scalar_type());
  at::Tensor m = torch::linear(features, w_m_) + torch::linear(s_inputs, w_s_).unsqueeze(1);
  // Block boundaries round z as the Pairformer's do (the module's input included).
  auto boundary = [&](const at::Tensor& t) { return plan_.bf16_boundary ? t.to(at::kBFloat16) : t; };
  const at::ScalarType dtype = z_in.scalar_type();
  at::Tensor z = boundary(z_in);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const uint64_t seed = mix_seed(dropout_seed, i);
    MsaBlockImpl& block = *blocks_[i];
    if (!(plan_.checkpoint_blocks && is_training() && at::GradMode::is_enabled())) {
      z = z.to(dtype);
      block.forward(m, z, batch.msa_mask, batch.token_mask, pair_mask, seed);
      z = boundary(z);
      continue;
    }
    // Recomputed in backward like the Pairformer blocks; the last block leaves m as it is, so
    // only z comes out of it.
    const bool last = i + 1 == blocks_.size();
    auto run = [&block, msa_mask = batch.msa_mask, token_mask = batch.token_mask, pair_mask, seed, last,
                dtype](const std::vector<at::Tensor>& x) {
      at::Tensor bm = x[0], bz = x[1].to(dtype);
      block.forward(bm, bz, msa_mask, token_mask, pair_mask, seed);
      return last ? std::vector<at::Tensor>{bz} : std::vector<at::Tensor>{bm, bz};
    };
    const std::vector<at::Tensor> out = checkpointed(run, {m, z});
    if (last) {
      z = boundary(out[0]);
    } else {
      m = out[0];
      z = boundary(out[1]);
    }
  }
  return z.to(dtype);
}

}  // namespace megafold::model
