#pragma once
// Token-level parts of the AF3 diffusion module (SI Sec. 3.7): noise-level embedding,
// diffusion conditioning, adaptive LayerNorm, the conditioned transition and attention with
// pair bias, and the diffusion transformer that stacks them. The atom-level encoder/decoder
// (Alg. 5-7) and the module's assembly (Alg. 20) build on these.
#include <torch/nn/module.h>

#include <string>

#include "model/config.h"
#include "model/layers.h"

namespace megafold::model {

// AF3 SI Alg. 22: cos(2 pi (t w + b)) with w, b drawn once from N(0, 1) (buffers, so a
// checkpoint carries them). t [...] -> [..., dim].
class FourierEmbeddingImpl : public torch::nn::Module {
 public:
  explicit FourierEmbeddingImpl(int64_t dim);
  at::Tensor forward(const at::Tensor& t);
 private:
  at::Tensor w_, b_;
};
TORCH_MODULE(FourierEmbedding);

// AF3 SI Alg. 26: a' = sigmoid(Linear(LN_s(s))) * LN(a) + LinearNoBias(LN_s(s)), where LN(a)
// has no affine parameters and LN_s only a scale. a [..., c_a], s [..., c_s].
class AdaptiveLayerNormImpl : public torch::nn::Module {
 public:
  AdaptiveLayerNormImpl(int64_t c_a, int64_t c_s);
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s);
 private:
  at::Tensor ln_s_w_, w_gain_, b_gain_, w_shift_;
};
TORCH_MODULE(AdaptiveLayerNorm);

// AF3 SI Alg. 25: AdaLN, SwiGLU (n * c_a hidden), output gated by sigmoid(Linear(s)) with the
// gate bias at -2 so that a fresh block starts near the identity. Returns the branch only.
class ConditionedTransitionImpl : public torch::nn::Module {
 public:
  ConditionedTransitionImpl(int64_t c_a, int64_t c_s, int64_t n);
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s);
 private:
  AdaptiveLayerNorm ada_{nullptr};
  at::Tensor w_ab_, w_out_, w_gate_, b_gate_;
};
TORCH_MODULE(ConditionedTransition);

// What AF3's conditioned attentions share (Alg. 24 at token level, its windowed atom-level
// form in Alg. 7): AdaLN of the queries by a conditioning, one q/k/v/gate projection with a
// bias on q only, a per-head bias from LinearNoBias(LN(pair)), and the output projection gated
// by sigmoid(Linear(conditioning)) with the gate bias at -2 (a fresh block starts near the
// identity). The attention itself (windows or full rows) is the subclass's.
class ConditionedAttentionBase : public torch::nn::Module {
 protected:
  // c_x: query channels, c_cond: conditioning, c_pair: pair channels; `pair` names the pair
  // parameters ("ln_<pair>_weight", "w_<pair>") in checkpoints.
  ConditionedAttentionBase(int64_t c_x, int64_t c_cond, int64_t c_pair, int64_t heads, const std::string& pair);
  at::Tensor project_qkvg(const at::Tensor& x, const at::Tensor& cond);  // [..., 4 c_x]: q, k, v, g
  at::Tensor pair_bias(const at::Tensor& pair);                          // [..., heads], fp32 or wider
  at::Tensor gated_output(const at::Tensor& o, const at::Tensor& cond);  // o [..., c_x]
  int64_t heads_;

 private:
  AdaptiveLayerNorm ada_{nullptr};
  at::Tensor w_qkvg_, b_q_, ln_pair_w_, ln_pair_b_, w_pair_, w_o_, w_gate_, b_gate_;
};

// AF3 SI Alg. 24 with conditioning: AdaLN on a, pair bias LinearNoBias(LN(z)), sigmoid gate
// from a, output gated by sigmoid(Linear(s)) (bias -2). Runs the shared attention core
// (ops::triangle_attention) with the samples of an example as its rows, all of them reading
// one pair bias. Returns the branch only.
class ConditionedAttentionImpl : public ConditionedAttentionBase {
 public:
  ConditionedAttentionImpl(int64_t c_a, int64_t c_s, int64_t c_z, int64_t heads);
  // The pair bias [B, H, N, N] (fp32) from z [B, N, N, c_z]: it does not depend on the noise,
  // so one trunk pass computes it once for all samples and noise levels.
  at::Tensor bias(const at::Tensor& z);
  // a [B * S, N, c_a] and s [B * S, N, c_s] (S samples per example, example-major), bias from
  // bias() (plus any additive bias of the same shape), mask [B, N] -> [B * S, N, c_a]
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s, const at::Tensor& bias, const at::Tensor& mask);
};
TORCH_MODULE(ConditionedAttention);

// AF3 SI Alg. 23: blocks of a += attention(a, s, bias); a += transition(a, s). (The SI's
// pseudo-code omits the first residual; Protenix and Boltz add it, as here.)
class DiffusionTransformerImpl : public torch::nn::Module {
 public:
  // recompute_blocks: each block keeps only its inputs for backward and is recomputed there
  // (the memory modes past fast; per sample that is N c_a fp32 per block instead of ~20x that).
  DiffusionTransformerImpl(int64_t c_a, int64_t c_s, int64_t c_z, int64_t blocks, int64_t heads, int64_t n,
                           bool recompute_blocks = false);
  // Every block's pair bias [B, H, N, N] (fp32) from z [B, N, N, c_z]: 4 H N^2 bytes per block,
  // once per trunk pass instead of once per sample.
  std::vector<at::Tensor> pair_biases(const at::Tensor& z);
  // a, s [B * S, N, c] (example-major samples), biases from pair_biases, mask [B, N].
  at::Tensor forward(at::Tensor a, const at::Tensor& s, const std::vector<at::Tensor>& biases, const at::Tensor& mask);
 private:
  bool recompute_blocks_;
  std::vector<ConditionedAttention> attn_;
  std::vector<ConditionedTransition> transition_;
};
TORCH_MODULE(DiffusionTransformer);

// AF3 SI Alg. 21: pair conditioning from the trunk pair and relative positions, single
// conditioning from the trunk and input singles plus the Fourier embedding of the noise level
// 1/4 log(t / sigma_data), each refined by two transitions.
struct Conditioning {
  at::Tensor s;  // [B, N, c_s]
  at::Tensor z;  // [B, N, N, c_z]
};
class DiffusionConditioningImpl : public torch::nn::Module {
 public:
  DiffusionConditioningImpl(const DiffusionConfig& cfg, int64_t c_s, int64_t c_s_inputs, int64_t c_z);
  // t [B] noise levels (Angstrom); s_inputs [B, N, c_s_inputs]; s_trunk [B, N, c_s];
  // z_trunk, relpos [B, N, N, c_z].
  Conditioning forward(const at::Tensor& t, const at::Tensor& s_inputs, const at::Tensor& s_trunk,
                       const at::Tensor& z_trunk, const at::Tensor& relpos);
  // The parts: the pair and the projected single (single_base) do not depend on t, so one
  // trunk pass computes them once for all noise levels and samples; single() adds the noise
  // level to single_base's result.
  at::Tensor pair(const at::Tensor& z_trunk, const at::Tensor& relpos);
  at::Tensor single_base(const at::Tensor& s_inputs, const at::Tensor& s_trunk);
  at::Tensor single(const at::Tensor& t, const at::Tensor& s_base);
 private:
  double sigma_data_;
  at::Tensor ln_z_w_, ln_z_b_, w_z_, ln_s_w_, ln_s_b_, w_s_, ln_n_w_, ln_n_b_, w_n_;
  FourierEmbedding fourier_{nullptr};
  Transition z_trans_[2] = {nullptr, nullptr}, s_trans_[2] = {nullptr, nullptr};
};
TORCH_MODULE(DiffusionConditioning);

}  // namespace megafold::model
