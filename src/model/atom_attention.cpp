#include "model/atom_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/functional/activation.h>

#include <cmath>
#include <string>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/layers.h"
#include "model/recompute.h"

namespace megafold::model {
namespace {

using data::kMaxAtomsPerToken;
constexpr int64_t kElements = 128, kNameChars = 4, kCharClasses = 64;
// AF3 SI Alg. 5 line 1: ref_pos (3), ref_charge (1), ref_mask (1), ref_element (128 one-hot),
// ref_atom_name_chars (4 x 64 one-hot).
constexpr int64_t kAtomFeatures = 3 + 1 + 1 + kElements + kNameChars * kCharClasses;

at::Tensor ones(int64_t n) { return torch::ones({n}); }
at::Tensor zeros(int64_t n) { return torch::zeros({n}); }

// z[b, tok_q, tok_k] for every window pair: zp [B, N, N, c], tok_q [B, bl, 32], tok_k [B, bl,
// 128] -> [B, bl, 32, 128, c]. Many atom pairs share a token pair, so the backward accumulates
// duplicates; ATen does that by sorted index on the GPU but with parallel atomic adds on the
// CPU unless deterministic mode is on, which the backward turns on around its one call.
struct GatherTokenPairs : public torch::autograd::Function<GatherTokenPairs> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& zp, const at::Tensor& tok_q,
                            const at::Tensor& tok_k) {
    ctx->save_for_backward({tok_q, tok_k});
    ctx->saved_data["shape"] = zp.sizes().vec();
    return zp.index({batch_index(tok_q), tok_q.unsqueeze(-1), tok_k.unsqueeze(2)});
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &tok_q = saved[0], &tok_k = saved[1];
    at::Tensor dz = at::zeros(ctx->saved_data["shape"].toIntVector(), grad[0].options());
    auto& context = at::globalContext();
    const bool was = context.deterministicAlgorithms(), warn_only = context.deterministicAlgorithmsWarnOnly();
    if (dz.is_cpu()) context.setDeterministicAlgorithms(true, true);
    dz.index_put_({batch_index(tok_q), tok_q.unsqueeze(-1), tok_k.unsqueeze(2)}, grad[0], /*accumulate=*/true);
    if (dz.is_cpu()) context.setDeterministicAlgorithms(was, warn_only);
    return {dz, at::Tensor(), at::Tensor()};
  }
  static at::Tensor batch_index(const at::Tensor& tok_q) {
    return at::arange(tok_q.size(0), tok_q.options()).view({-1, 1, 1, 1});
  }
};

// x [B, A, ...] -> x[:, keys] with index A reading a zero row. index_select's backward adds
// with atomics on the GPU, and every atom is a key of up to four blocks; this backward instead
// sums each atom's (at most) four key gradients in a fixed order.
struct GatherWindowKeys : public torch::autograd::Function<GatherWindowKeys> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& keys,
                            const at::Tensor& holders) {
    ctx->save_for_backward({holders});
    return with_zero_row(x).index_select(1, keys);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const at::Tensor holders = ctx->get_saved_variables()[0];
    const at::Tensor g = with_zero_row(grad[0]);
    at::Tensor dx = g.index_select(1, holders.select(1, 0));
    for (int64_t k = 1; k < holders.size(1); ++k) dx = dx + g.index_select(1, holders.select(1, k));
    return {dx, at::Tensor(), at::Tensor()};
  }
  static at::Tensor with_zero_row(const at::Tensor& x) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[1] = 1;
    return at::cat({x, at::zeros(shape, x.options())}, 1);
  }
};

}  // namespace

AtomLayout::AtomLayout(const data::Batch& batch)
    : index(batch.atom_index), token(batch.atom_token), exists(batch.atom_exists), tokens(batch.n_tokens()) {}

at::Tensor AtomLayout::rows(int64_t R, const at::Tensor& per_example) const {
  const int64_t B = per_example.size(0);
  MF_CHECK(R % B == 0, "AtomLayout: ", R, " rows are not samples of ", B, " examples");
  return R == B ? per_example : per_example.repeat_interleave(R / B, 0);
}

at::Tensor AtomLayout::from_dense(const at::Tensor& dense) const {
  const int64_t R = dense.size(0);
  const at::Tensor r = at::arange(R, index.options()).unsqueeze(1);
  return dense.index({r, rows(R, index.to(dense.device()))});
}

at::Tensor AtomLayout::to_dense(const at::Tensor& x) const {
  const int64_t R = x.size(0);
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] = tokens * kMaxAtomsPerToken;
  const at::Tensor r = at::arange(R, index.options()).unsqueeze(1).to(x.device());
  at::Tensor keep = rows(R, exists.to(x.device())).to(x.scalar_type());
  for (int64_t d = 2; d < x.dim(); ++d) keep = keep.unsqueeze(-1);
  // Padding atoms all point at a slot no residue has, and carry zeros.
  return at::zeros(shape, x.options()).index_put({r, rows(R, index.to(x.device()))}, x * keep, /*accumulate=*/true);
}

// Through the dense layout, so that every accumulation is exact: the list's real atoms are
// distinct dense slots, and padding atoms carry zeros (in values and in gradients), so no
// float sum depends on the order of a parallel accumulation (CPU index_put switches to atomic
// adds for large tensors) and results are bitwise repeatable on any device.
at::Tensor AtomLayout::from_tokens(const at::Tensor& x) const {
  std::vector<int64_t> shape = x.sizes().vec();
  at::Tensor keep = rows(x.size(0), exists.to(x.device())).to(x.scalar_type());
  for (int64_t d = 2; d < x.dim(); ++d) keep = keep.unsqueeze(-1);
  return from_dense(x.repeat_interleave(kMaxAtomsPerToken, 1)) * keep;
}

at::Tensor AtomLayout::token_mean(const at::Tensor& x, const at::Tensor& mask) const {
  const int64_t R = x.size(0), c = x.size(2);
  const at::Tensor m = mask.to(x.scalar_type());
  const at::Tensor sum = to_dense(x * m.unsqueeze(-1)).view({R, tokens, kMaxAtomsPerToken, c}).sum(2);
  const at::Tensor count = to_dense(m.unsqueeze(-1)).view({R, tokens, kMaxAtomsPerToken}).sum(2);
  return sum / count.clamp_min(1).unsqueeze(-1);
}

AtomWindows::AtomWindows(int64_t n_atoms, const at::Device& device) : atoms(n_atoms) {
  MF_CHECK(n_atoms > 0, "AtomWindows: no atoms");
  blocks = (n_atoms + kQueries - 1) / kQueries;
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  // Keys of block b: the 128 atoms centred on the block's 32 queries, [32b - 48, 32b + 80).
  constexpr int64_t kLead = kKeys / 2 - kQueries / 2;  // 48 keys before the first query
  const at::Tensor idx = (at::arange(blocks, i64) * kQueries - kLead).unsqueeze(1) + at::arange(kKeys, i64);
  valid = (idx >= 0) & (idx < n_atoms);
  keys = at::where(valid, idx, n_atoms);
  // Atom a is key a - 32b + 48 of the blocks b with 32b in (a - 80, a + 48]: the last of them
  // is (a + 48) / 32, the others the three before it where they exist.
  const at::Tensor a = at::arange(n_atoms, i64).unsqueeze(1);
  const at::Tensor b = at::floor_divide(a + kLead, kQueries) - at::arange(kKeys / kQueries, i64);
  const at::Tensor position = a - b * kQueries + kLead;
  holders = at::where((b >= 0) & (b < blocks) & (position < kKeys), b * kKeys + position, blocks * kKeys);
}

at::Tensor AtomWindows::queries(const at::Tensor& x) const {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] = blocks * kQueries - atoms;
  const at::Tensor padded = shape[1] > 0 ? at::cat({x, at::zeros(shape, x.options())}, 1) : x;
  shape = x.sizes().vec();
  shape[1] = kQueries;
  shape.insert(shape.begin() + 1, blocks);
  return padded.view(shape);
}

at::Tensor AtomWindows::keys_of(const at::Tensor& x) const {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] = kKeys;
  shape.insert(shape.begin() + 1, blocks);
  return GatherWindowKeys::apply(x, keys.reshape({-1}), holders).view(shape);
}

at::Tensor AtomWindows::unblock(const at::Tensor& x) const { return x.flatten(1, 2).narrow(1, 0, atoms); }

WindowedAttentionImpl::WindowedAttentionImpl(int64_t c_q, int64_t c_p, int64_t heads)
    : ConditionedAttentionBase(c_q, c_q, c_p, heads, "p") {}

at::Tensor WindowedAttentionImpl::bias(const at::Tensor& p) { return pair_bias(p); }

at::Tensor WindowedAttentionImpl::forward(const at::Tensor& q, const at::Tensor& c, const at::Tensor& bias,
                                          const at::Tensor& mask, const AtomWindows& w) {
  const int64_t R = q.size(0), A = q.size(1), c_q = q.size(2), H = heads_, d = c_q / H;
  const int64_t B = bias.size(0), S = R / B, K = AtomWindows::kKeys;
  MF_CHECK(S * B == R, "windowed attention: ", R, " rows are not samples of ", B, " examples");
  const at::Tensor proj = project_qkvg(q, c).view({R, A, 4, H, d});
  const at::Tensor qs = w.queries(proj.select(2, 0));  // [R, blocks, 32, H, d]
  const at::Tensor ks = w.keys_of(proj.select(2, 1)), vs = w.keys_of(proj.select(2, 2));  // [R, blocks, 128, H, d]
  at::Tensor logits = at::einsum("bnqhd,bnkhd->bnhqk", {qs, ks}) / std::sqrt(static_cast<double>(d));
  // Every sample of an example reads the example's bias [B, blocks, 32, 128, H].
  const at::Tensor pair = bias.permute({0, 1, 4, 2, 3}).unsqueeze(1).to(logits.scalar_type());
  logits = (logits.reshape({B, S, w.blocks, H, AtomWindows::kQueries, K}) + pair)
               .view({R, w.blocks, H, AtomWindows::kQueries, K});
  // Keys outside [0, A) or without an atom are masked; every real atom sees at least itself.
  const at::Tensor key_ok = w.valid.unsqueeze(0) & (w.keys_of(mask) > 0);  // [R, blocks, 128]
  logits = logits.masked_fill(key_ok.logical_not().view({R, w.blocks, 1, 1, K}), -1e9);
  const at::Tensor probs = at::softmax(logits, -1, at::promote_types(logits.scalar_type(), at::kFloat));
  const at::Tensor o = w.unblock(at::einsum("bnhqk,bnkhd->bnqhd", {probs.to(vs.scalar_type()), vs}));  // [R, A, H, d]
  const at::Tensor gated = (at::sigmoid(proj.select(2, 3)) * o).reshape({R, A, c_q});
  return gated_output(gated, c);
}

AtomTransformerImpl::AtomTransformerImpl(int64_t c_q, int64_t c_p, int64_t blocks, int64_t heads,
                                         bool recompute_blocks)
    : recompute_blocks_(recompute_blocks) {
  for (int64_t i = 0; i < blocks; ++i) {
    attn_.push_back(register_module("attn_" + std::to_string(i), WindowedAttention(c_q, c_p, heads)));
    transition_.push_back(register_module("transition_" + std::to_string(i), ConditionedTransition(c_q, c_q, 2)));
  }
}

std::vector<at::Tensor> AtomTransformerImpl::pair_biases(const at::Tensor& p) {
  std::vector<at::Tensor> biases;
  for (auto& attn : attn_) biases.push_back(attn->bias(p));
  return biases;
}

at::Tensor AtomTransformerImpl::forward(at::Tensor q, const at::Tensor& c, const std::vector<at::Tensor>& biases,
                                        const at::Tensor& mask, const AtomWindows& w) {
  MF_CHECK(biases.size() == attn_.size(), "atom transformer: ", biases.size(), " pair biases for ", attn_.size(),
           " blocks");
  const bool recompute = recompute_blocks_ && is_training() && at::GradMode::is_enabled();
  for (size_t i = 0; i < attn_.size(); ++i) {
    // The windows by value: a recomputation may run after the caller's windows are gone.
    auto block = [this, i, mask, w](const std::vector<at::Tensor>& x) {
      const at::Tensor b = x[0] + attn_[i](x[0], x[1], x[2], mask, w);
      return std::vector<at::Tensor>{b + transition_[i](b, x[1])};
    };
    q = recompute ? checkpointed(block, {q, c, biases[i]})[0] : block({q, c, biases[i]})[0];
  }
  return q;
}

AtomAttentionEncoderImpl::AtomAttentionEncoderImpl(const DiffusionConfig& cfg, int64_t c_s, int64_t c_z,
                                                   bool recompute_blocks)
    : c_token_(cfg.c_token) {
  const int64_t ca = cfg.c_atom, cp = cfg.c_atompair;
  w_feat_ = register_parameter("w_feat", lecun_normal(ca, kAtomFeatures));
  w_d_ = register_parameter("w_d", lecun_normal(cp, 3));
  w_inv_ = register_parameter("w_inv", lecun_normal(cp, 1));
  w_v_ = register_parameter("w_v", lecun_normal(cp, 1));
  MF_CHECK((c_s > 0) == (c_z > 0), "AtomAttentionEncoder: c_s and c_z are both > 0 (diffusion) or both 0 (input)");
  if (c_s > 0) {  // the diffusion module's encoder: trunk conditioning and noisy positions
    ln_s_w_ = register_parameter("ln_s_weight", ones(c_s));
    ln_s_b_ = register_parameter("ln_s_bias", zeros(c_s));
    w_s_ = register_parameter("w_s", lecun_normal(ca, c_s));
    ln_z_w_ = register_parameter("ln_z_weight", ones(c_z));
    ln_z_b_ = register_parameter("ln_z_bias", zeros(c_z));
    w_z_ = register_parameter("w_z", lecun_normal(cp, c_z));
    w_r_ = register_parameter("w_r", lecun_normal(ca, 3));
  }
  w_cl_ = register_parameter("w_cl", lecun_normal(cp, ca));
  w_cm_ = register_parameter("w_cm", lecun_normal(cp, ca));
  w_mlp1_ = register_parameter("w_mlp1", lecun_normal(cp, cp));
  w_mlp2_ = register_parameter("w_mlp2", lecun_normal(cp, cp));
  w_mlp3_ = register_parameter("w_mlp3", torch::zeros({cp, cp}));
  w_a_ = register_parameter("w_a", lecun_normal(cfg.c_token, ca));
  transformer_ =
      register_module("transformer", AtomTransformer(ca, cp, cfg.atom_blocks, cfg.atom_heads, recompute_blocks));
}

AtomConditioning AtomAttentionEncoderImpl::condition(const data::ReferenceFeatures& ref, const at::Tensor& s_trunk,
                                                    const at::Tensor& z, const AtomLayout& layout, const AtomWindows& w) {
  const int64_t B = ref.pos.size(0), N = ref.pos.size(1), A = layout.atoms();
  MF_CHECK(w.atoms == A, "AtomAttentionEncoder: windows for ", w.atoms, " atoms, the layout has ", A);
  const auto opts = w_feat_.options();
  // Line 1: atom single features, of the atoms the tokens have.
  const int64_t D = N * kMaxAtomsPerToken;
  const at::Tensor feat = at::cat({ref.pos.to(opts), ref.charge.unsqueeze(-1).to(opts), ref.mask.unsqueeze(-1).to(opts),
                                   at::one_hot(ref.element, kElements).to(opts),
                                   at::one_hot(ref.name_chars, kCharClasses).flatten(-2).to(opts)},
                                  -1);
  at::Tensor c = at::linear(layout.from_dense(feat.view({B, D, kAtomFeatures})), w_feat_);  // [B, A, c_atom]
  // Lines 2-6: pair features inside the windows, only between atoms of one reference conformer
  // (ref_space_uid: a residue token's atoms, or all atoms of one ligand residue).
  const at::Tensor pos = layout.from_dense(ref.pos.to(opts).view({B, D, 3}));  // [B, A, 3]
  const at::Tensor d = w.queries(pos).unsqueeze(3) - w.keys_of(pos).unsqueeze(2);  // [B, bl, 32, 128, 3]
  const at::Tensor atom_token = layout.token.to(pos.device());
  const at::Tensor tok_q = w.queries(atom_token), tok_k = w.keys_of(atom_token);  // [B, bl, 32], [B, bl, 128]
  const at::Tensor uid = layout.from_tokens(ref.space_uid.to(pos.device()));      // [B, A]
  const at::Tensor real = layout.exists.to(pos.device()) > 0;
  const at::Tensor same = ((w.queries(uid).unsqueeze(3) == w.keys_of(uid).unsqueeze(2)) & w.valid.unsqueeze(1) &
                           w.queries(real).unsqueeze(3) & w.keys_of(real).unsqueeze(2))
                              .to(opts)
                              .unsqueeze(-1);  // [B, bl, 32, 128, 1]
  at::Tensor p = (at::linear(d, w_d_) + at::linear(1 / (1 + d.pow(2).sum(-1, true)), w_inv_) + at::linear(same, w_v_)) *
                 same;  // [B, bl, 32, 128, c_atompair]
  MF_CHECK(s_trunk.defined() == w_s_.defined(), "AtomAttentionEncoder: the trunk's s and z are given exactly to the "
           "diffusion module's encoder");
  if (s_trunk.defined()) {  // lines 9-11: the trunk's conditioning
    c = c + layout.from_tokens(at::linear(at::layer_norm(s_trunk, {s_trunk.size(-1)}, ln_s_w_, ln_s_b_), w_s_));
    const at::Tensor zp = at::linear(at::layer_norm(z, {z.size(-1)}, ln_z_w_, ln_z_b_), w_z_);  // [B, N, N, cp]
    p = p + GatherTokenPairs::apply(zp, tok_q, tok_k);
  }
  // Lines 13-14.
  p = p + at::linear(at::relu(w.queries(c)), w_cl_).unsqueeze(3) + at::linear(at::relu(w.keys_of(c)), w_cm_).unsqueeze(2);
  p = p + at::linear(at::relu(at::linear(at::relu(at::linear(at::relu(p), w_mlp1_)), w_mlp2_)), w_mlp3_);
  return {c, p};
}

AtomEncoding AtomAttentionEncoderImpl::forward(const at::Tensor& c, const std::vector<at::Tensor>& biases,
                                               const at::Tensor& atom_mask, const at::Tensor& r,
                                               const AtomLayout& layout, const AtomWindows& w) {
  const int64_t R = c.size(0), A = c.size(1);
  MF_CHECK(atom_mask.dim() == 2 && atom_mask.size(0) == R && atom_mask.size(1) == A,
           "AtomAttentionEncoder: atom_mask must be [R, A] = [", R, ", ", A, "], got ", atom_mask.sizes());
  // Line 8: the noisy positions.
  MF_CHECK(r.defined() == w_r_.defined(), "AtomAttentionEncoder: noisy positions are given exactly to the diffusion "
           "module's encoder");
  const at::Tensor q = transformer_(r.defined() ? c + at::linear(r, w_r_) : c, c, biases, atom_mask, w);
  // Line 15: mean over each token's atoms.
  return {layout.token_mean(at::relu(at::linear(q, w_a_)), atom_mask), q, c};
}

AtomAttentionDecoderImpl::AtomAttentionDecoderImpl(const DiffusionConfig& cfg, bool recompute_blocks) {
  w_a_ = register_parameter("w_a", lecun_normal(cfg.c_atom, cfg.c_token));
  ln_w_ = register_parameter("ln_weight", ones(cfg.c_atom));
  ln_b_ = register_parameter("ln_bias", zeros(cfg.c_atom));
  w_out_ = register_parameter("w_out", torch::zeros({3, cfg.c_atom}));
  transformer_ = register_module(
      "transformer", AtomTransformer(cfg.c_atom, cfg.c_atompair, cfg.atom_blocks, cfg.atom_heads, recompute_blocks));
}

at::Tensor AtomAttentionDecoderImpl::forward(const at::Tensor& a, const AtomEncoding& skip,
                                             const std::vector<at::Tensor>& biases, const at::Tensor& atom_mask,
                                             const AtomLayout& layout, const AtomWindows& w) {
  at::Tensor q = layout.from_tokens(at::linear(a, w_a_)) + skip.q_skip;
  q = transformer_(q, skip.c_skip, biases, atom_mask, w);
  return at::linear(at::layer_norm(q, {q.size(-1)}, ln_w_, ln_b_), w_out_);
}

}  // namespace megafold::model
