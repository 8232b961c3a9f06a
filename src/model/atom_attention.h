#pragma once
// Atom level of the AF3 diffusion module (SI Alg. 5-7): sequence-local atom attention, the
// atom transformer, and the atom attention encoder (atoms -> tokens) and decoder (tokens ->
// atom position updates).
//
// Atoms are listed as AF3 lists them (AtomLayout): only the atoms the tokens have, token by
// token (a protein token ~8 of its 24 slots, a ligand token 1), padded per batch. Atom pairs
// exist only inside the windows: queries in blocks of 32, each attending to the 128 atoms
// centred on its block, so pair tensors are [B, n_blocks, 32, 128, c], not A x A.
#include <torch/nn/module.h>

#include "data/features.h"
#include "model/config.h"
#include "model/diffusion.h"

namespace megafold::model {

// The compact atom list of a batch (data::Batch::atom_index / atom_token / atom_exists) and the
// moves between it, the tokens and the dense [N * kMaxAtomsPerToken] layout. Rows may be
// samples of the examples (R = B * S, example-major). Every move is bitwise repeatable: the
// token <-> atom moves go through the dense layout (see atom_attention.cpp).
struct AtomLayout {
  at::Tensor index;   // [B, A] int64 dense slot (token * kMaxAtomsPerToken + slot)
  at::Tensor token;   // [B, A] int64 token of each atom
  at::Tensor exists;  // [B, A] float, 0 for padding
  int64_t tokens = 0;

  explicit AtomLayout(const data::Batch& batch);
  int64_t atoms() const { return index.size(1); }
  // dense [R, N * kMaxAtomsPerToken, ...] -> [R, A, ...]
  at::Tensor from_dense(const at::Tensor& dense) const;
  // [R, A, ...] -> dense [R, N * kMaxAtomsPerToken, ...], zeros where no atom is
  at::Tensor to_dense(const at::Tensor& x) const;
  // per-token rows [R, N, ...] -> each atom's token's row [R, A, ...]
  at::Tensor from_tokens(const at::Tensor& x) const;
  // [R, A, c] -> [R, N, c]: the mean over each token's atoms where mask [R, A] is 1
  at::Tensor token_mean(const at::Tensor& x, const at::Tensor& mask) const;

 private:
  at::Tensor rows(int64_t R, const at::Tensor& per_example) const;  // [B, A] -> [R, A]
};

// Index bookkeeping of the 32 x 128 windows for A atoms.
struct AtomWindows {
  static constexpr int64_t kQueries = 32, kKeys = 128;
  int64_t atoms = 0, blocks = 0;
  at::Tensor keys;   // [blocks, kKeys] int64, key atom index in [0, A); A (a zero row) outside
  at::Tensor valid;  // [blocks, kKeys] bool, the key lies in [0, A)
  // [A, 4] int64: the flat key positions (block * kKeys + key) holding each atom, at most four
  // (128 keys / 32 queries); blocks * kKeys (a zero row) where an atom has fewer. keys_of's
  // backward sums an atom's gradient over them in this order, so it needs no atomic adds.
  at::Tensor holders;

  AtomWindows(int64_t atoms, const at::Device& device);
  // x [B, A, ...] -> [B, blocks, kQueries, ...], zero rows past A.
  at::Tensor queries(const at::Tensor& x) const;
  // x [B, A, ...] -> [B, blocks, kKeys, ...], zero rows for keys outside [0, A) (mask them with
  // valid). Its gradient is bitwise repeatable on any device.
  at::Tensor keys_of(const at::Tensor& x) const;
  // [B, blocks, kQueries, ...] -> [B, A, ...] (drops the padding rows).
  at::Tensor unblock(const at::Tensor& x) const;
};

// AF3 SI Alg. 24 in the atom transformer's windowed form: AdaLN on q, pair bias from the
// window pair tensor p, keys outside the window or without an atom masked, sigmoid gates as
// in ConditionedAttention. Plain ATen (the shared attention core needs equal query and key
// counts and one bias for all rows). Returns the branch only.
class WindowedAttentionImpl : public ConditionedAttentionBase {
 public:
  WindowedAttentionImpl(int64_t c_q, int64_t c_p, int64_t heads);
  // The window pair bias [B, blocks, 32, 128, H] (fp32) from p [B, blocks, 32, 128, c_p]: it
  // does not depend on the noise, so one trunk pass computes it for every sample.
  at::Tensor bias(const at::Tensor& p);
  // q, c [B * S, A, c_q] (S samples per example, example-major); bias from bias();
  // mask [B * S, A] -> [B * S, A, c_q]
  at::Tensor forward(const at::Tensor& q, const at::Tensor& c, const at::Tensor& bias, const at::Tensor& mask,
                     const AtomWindows& w);
};
TORCH_MODULE(WindowedAttention);

// AF3 SI Alg. 7: blocks of q += windowed attention(q, c, bias); q += transition(q, c).
class AtomTransformerImpl : public torch::nn::Module {
 public:
  // recompute_blocks: as for DiffusionTransformer.
  AtomTransformerImpl(int64_t c_q, int64_t c_p, int64_t blocks, int64_t heads, bool recompute_blocks = false);
  // Every block's window pair bias from p (see WindowedAttention::bias).
  std::vector<at::Tensor> pair_biases(const at::Tensor& p);
  at::Tensor forward(at::Tensor q, const at::Tensor& c, const std::vector<at::Tensor>& biases, const at::Tensor& mask,
                     const AtomWindows& w);
 private:
  bool recompute_blocks_;
  std::vector<WindowedAttention> attn_;
  std::vector<ConditionedTransition> transition_;
};
TORCH_MODULE(AtomTransformer);

struct AtomEncoding {
  at::Tensor a;       // [B * S, N, c_token] token activations: mean over each token's atoms
  at::Tensor q_skip;  // [B * S, A, c_atom]
  at::Tensor c_skip;  // [B * S, A, c_atom]
};

// The atom single and window pair conditioning of Alg. 5 (lines 1-7 and 9-14): everything
// but the noisy positions, so one trunk pass computes it once for all noise levels and
// samples.
struct AtomConditioning {
  at::Tensor c;  // [B, A, c_atom]
  at::Tensor p;  // [B, blocks, 32, 128, c_atompair]
};

// AF3 SI Alg. 5, in two parts.
class AtomAttentionEncoderImpl : public torch::nn::Module {
 public:
  // recompute_blocks: of its atom transformer (see DiffusionTransformer). c_s, c_z: the trunk's
  // widths for the diffusion module's encoder; both 0 for the input embedder's (Alg. 2), which
  // sees neither the trunk nor positions.
  AtomAttentionEncoderImpl(const DiffusionConfig& cfg, int64_t c_s, int64_t c_z, bool recompute_blocks = false);
  // ref: reference features of the tokens (dense layout); s_trunk [B, N, c_s] and z
  // [B, N, N, c_z] both given (diffusion) or both undefined (the trunk's input embedder use).
  AtomConditioning condition(const data::ReferenceFeatures& ref, const at::Tensor& s_trunk, const at::Tensor& z,
                             const AtomLayout& layout, const AtomWindows& w);
  // Its atom transformer's window pair biases from the conditioning's p (once per trunk pass).
  std::vector<at::Tensor> pair_biases(const at::Tensor& p) { return transformer_->pair_biases(p); }
  // c [B * S, A, c_atom] the conditioning's c for each sample; biases from pair_biases();
  // atom_mask [B * S, A] (atoms that exist); r [B * S, A, 3] scaled noisy positions, given
  // exactly when the conditioning saw s_trunk and z.
  AtomEncoding forward(const at::Tensor& c, const std::vector<at::Tensor>& biases, const at::Tensor& atom_mask,
                       const at::Tensor& r, const AtomLayout& layout, const AtomWindows& w);
 private:
  int64_t c_token_;
  at::Tensor w_feat_, w_d_, w_inv_, w_v_, ln_s_w_, ln_s_b_, w_s_, ln_z_w_, ln_z_b_, w_z_, w_r_, w_cl_, w_cm_,
      w_mlp1_, w_mlp2_, w_mlp3_, w_a_;
  AtomTransformer transformer_{nullptr};
};
TORCH_MODULE(AtomAttentionEncoder);

// AF3 SI Alg. 6: token activations back to atoms, the atom transformer, position updates.
class AtomAttentionDecoderImpl : public torch::nn::Module {
 public:
  explicit AtomAttentionDecoderImpl(const DiffusionConfig& cfg, bool recompute_blocks = false);
  std::vector<at::Tensor> pair_biases(const at::Tensor& p) { return transformer_->pair_biases(p); }
  // a [B * S, N, c_token], biases from pair_biases() -> r_update [B * S, A, 3]
  at::Tensor forward(const at::Tensor& a, const AtomEncoding& skip, const std::vector<at::Tensor>& biases,
                     const at::Tensor& atom_mask, const AtomLayout& layout, const AtomWindows& w);
 private:
  at::Tensor w_a_, ln_w_, ln_b_, w_out_;
  AtomTransformer transformer_{nullptr};
};
TORCH_MODULE(AtomAttentionDecoder);

}  // namespace megafold::model
