#pragma once
// Parameter holders for the Pairformer sub-layers. Each forward composes megafold ops only
// (src/ops); weights are laid out as those ops expect, so a fused kernel reads them as is.
#include <torch/nn/module.h>

#include <optional>
#include <tuple>

#include "dist/shard.h"
#include "model/config.h"

namespace megafold::model {

// Initialisers (AF3 follows AF2: LeCun normal for hidden projections, zeros for the final
// projection of every residual branch so that each block starts as the identity).
at::Tensor lecun_normal(int64_t out, int64_t in);

// t in fp32, or wider when it is (float64 stays): attention biases that many samples or row
// chunks share are kept so, so that their gradient sums in fp32 under bf16 autocast.
at::Tensor at_least_float32(const at::Tensor& t);

// SwiGLU transition (AF3 Alg. 11) on the last dim.
class TransitionImpl : public torch::nn::Module {
 public:
  TransitionImpl(int64_t c, int64_t n);
  at::Tensor forward(const at::Tensor& x);  // [..., c] -> [..., c]
  // The residual step x + forward(x), x's two gradients summed inside the transition's backward.
  at::Tensor residual_step(const at::Tensor& x);
  // Its result twice (ops::residual_update_forked), for a stream with two readers.
  std::tuple<at::Tensor, at::Tensor> residual_step_forked(const at::Tensor& x);
 private:
  at::Tensor ln_w_, ln_b_, w_in_, w_out_;
};
TORCH_MODULE(Transition);

// Triangular multiplicative update (AF3 Alg. 12 outgoing / 13 incoming).
class TriangleMultiplicationImpl : public torch::nn::Module {
 public:
  TriangleMultiplicationImpl(int64_t c_z, int64_t c, bool outgoing);
  // The pair stack's residual step z + scale * update [B,N,N,c_z] (scale: the dropout factor of
  // model/dropout.h, or none): the output gate, dropout and residual add are one pass
  // (ops::residual_update) after the output projection.
  at::Tensor forward(const at::Tensor& z, const at::Tensor& pair_mask, const std::optional<at::Tensor>& scale);
  // The same result twice (ops::residual_update_forked), for a pair stream whose next op reads
  // it twice (its LayerNorm and its own residual step): the two gradients meet in this step's
  // backward pass instead of a separate addition.
  std::tuple<at::Tensor, at::Tensor> forward_forked(const at::Tensor& z, const at::Tensor& pair_mask,
                                                    const std::optional<at::Tensor>& scale);
  // The same on this rank's rows of z [B, n, N, c_z] (pair_mask: the full [B, N, N]; scale:
  // this rank's rows of it); returns this rank's rows. Outgoing gathers b; incoming works on
  // the rows of z^T.
  at::Tensor forward_rows(const at::Tensor& z, const at::Tensor& pair_mask, const dist::PairShard& shard,
                          const std::optional<at::Tensor>& scale);
  // The same residual step keeping only z, the operands a, b and the contraction t with the
  // gate for backward (~3 z of fp32): the input projection and the output half run on chunks
  // of `rows` rows and are recomputed per chunk in backward (the frontier memory mode).
  at::Tensor forward_chunked(const at::Tensor& z, const at::Tensor& pair_mask, const std::optional<at::Tensor>& scale,
                             int64_t rows);
 private:
  // Unsharded, up to the residual step: z passed through the input projection (whose backward
  // adds the residual's gradient to dz), the contraction t and the output gate.
  struct Contracted {
    at::Tensor z, t, gate;
  };
  Contracted contract(const at::Tensor& z, const at::Tensor& pair_mask);
  // LayerNorm_out(t) @ w_o^T
  at::Tensor output(const at::Tensor& t);
  // z + scale * gate * output(t)
  at::Tensor residual(const at::Tensor& z, const at::Tensor& t, const at::Tensor& gate,
                      const std::optional<at::Tensor>& scale);
  bool outgoing_;
  at::Tensor ln_in_w_, ln_in_b_, w_ab_, w_g_, ln_out_w_, ln_out_b_, w_o_;
};
TORCH_MODULE(TriangleMultiplication);

// Triangle attention around the starting (Alg. 14) or ending (Alg. 15) node. The ending
// node runs on transposed views of the same projections; nothing is copied.
class TriangleAttentionImpl : public torch::nn::Module {
 public:
  TriangleAttentionImpl(int64_t c_z, int64_t heads, int64_t head_dim, bool starting);
  at::Tensor forward(const at::Tensor& z, const at::Tensor& pair_mask);  // [B,N,N,c_z]
  // Starting-node attention on this rank's rows x [B, n, N, c_z] with their key mask
  // [B, n, N], whatever this module's node: the ending node runs it on rows of z^T. The bias
  // (all rows) is gathered.
  at::Tensor forward_rows(const at::Tensor& x, const at::Tensor& row_mask, const dist::PairShard& shard);
  // The residual step z + scale * attention(z) keeping only z and the pair bias ([B, N, N, H],
  // fp32) for backward: chunks of `rows` rows (starting node) or columns (ending node) of z are
  // projected, attended and added, and recomputed one chunk at a time in backward (the
  // frontier memory mode).
  at::Tensor forward_chunked(const at::Tensor& z, const at::Tensor& pair_mask, const std::optional<at::Tensor>& scale,
                             int64_t rows);
 private:
  bool starting_;
  int64_t heads_, head_dim_;
  at::Tensor ln_w_, ln_b_, w_proj_, w_o_;  // w_proj rows: q, k, v, g (H*d each), bias (H)
};
TORCH_MODULE(TriangleAttention);

// Single attention with pair bias (AF3 Alg. 24, trunk form).
class AttentionPairBiasImpl : public torch::nn::Module {
 public:
  AttentionPairBiasImpl(int64_t c_s, int64_t c_z, int64_t heads, int64_t head_dim);
  at::Tensor forward(const at::Tensor& s, const at::Tensor& z, const at::Tensor& token_mask);
  // The same update of the (replicated) single track from this rank's rows of z [B, n, N, c_z]:
  // the bias rows are projected here and joined (dist::join_rows) into the whole bias.
  at::Tensor forward_rows(const at::Tensor& s, const at::Tensor& z_rows, const at::Tensor& token_mask,
                          const dist::PairShard& shard);
  // The parameters applied to rows of z (the pair-bias projection).
  std::vector<at::Tensor> pair_parameters() const { return {ln_z_w_, ln_z_b_, w_z_}; }
 private:
  int64_t heads_;
  at::Tensor ln_s_w_, ln_s_b_, w_qkvg_, b_q_, ln_z_w_, ln_z_b_, w_z_, w_o_;
};
TORCH_MODULE(AttentionPairBias);

}  // namespace megafold::model
