// Pair-stack layers against the AF3 algorithms written out index by index: the layers route
// through fused ops, split projections and transposed views, so a wrong view or index
// convention shows up here rather than only as a worse training curve.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "model/layers.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;

// AF3 SI Alg. 14 (starting node) / 15 (ending node) with the usual key mask, in float64:
//   starting: a_ijk = softmax_k(q_ij . k_ik / sqrt(d) + b_jk), o_ij = sum_k a_ijk v_ik,
//             key k masked for row i where mask_ik = 0;
//   ending:   a_ijk = softmax_k(q_ij . k_kj / sqrt(d) + b_ki), o_ij = sum_k a_ijk v_kj,
//             key k masked for column j where mask_kj = 0;
// output = (sigmoid(g_ij) * o_ij) @ w_o^T.
at::Tensor triangle_attention_by_algorithm(const at::Tensor& z, const at::Tensor& mask, const at::Tensor& ln_w,
                                           const at::Tensor& ln_b, const at::Tensor& w_proj, const at::Tensor& w_o,
                                           int64_t H, int64_t d, bool starting) {
  const int64_t B = z.size(0), N = z.size(1);
  const at::Tensor zn = at::layer_norm(z, {z.size(-1)}, ln_w, ln_b, 1e-5);
  auto part = [&](int64_t i) { return at::linear(zn, w_proj.narrow(0, i * H * d, H * d)).view({B, N, N, H, d}); };
  const at::Tensor q = part(0), k = part(1), v = part(2), g = part(3);
  const at::Tensor b = at::linear(zn, w_proj.narrow(0, 4 * H * d, H));  // [B, N, N, H]
  at::Tensor logits, a, o;
  const at::Tensor masked = mask == 0;
  if (starting) {
    logits = at::einsum("bijhc,bikhc->bhijk", {q, k}) / std::sqrt(static_cast<double>(d)) +
             b.permute({0, 3, 1, 2}).unsqueeze(2);  // b_jk
    logits = logits.masked_fill(masked.view({B, 1, N, 1, N}), -INFINITY);  // mask_ik
    a = at::softmax(logits, -1);
    o = at::einsum("bhijk,bikhc->bijhc", {a, v});
  } else {
    logits = at::einsum("bijhc,bkjhc->bhijk", {q, k}) / std::sqrt(static_cast<double>(d)) +
             b.permute({0, 3, 2, 1}).unsqueeze(3);  // b_ki
    logits = logits.masked_fill(masked.transpose(1, 2).view({B, 1, 1, N, N}), -INFINITY);  // mask_kj
    a = at::softmax(logits, -1);
    o = at::einsum("bhijk,bkjhc->bijhc", {a, v});
  }
  return at::linear((at::sigmoid(g) * o).reshape({B, N, N, H * d}), w_o);
}

TEST(TriangleAttentionLayer, StartingAndEndingNodesFollowAlgorithms14And15WithGradients) {
  fresh_seed();
  const int64_t B = 2, N = 7, c_z = 6, H = 2, d = 3;
  for (const bool starting : {true, false}) {
    SCOPED_TRACE(starting ? "starting node" : "ending node");
    TriangleAttention layer(c_z, H, d, starting);
    layer->to(at::kDouble);
    randomise_parameters(*layer);
    const at::Tensor z = at::randn({B, N, N, c_z}, at::kDouble).requires_grad_(true);
    // A quarter of the pairs masked, the diagonal kept so that no query has every key masked.
    const at::Tensor mask = ((at::rand({B, N, N}, at::kDouble) > 0.25) | at::eye(N, at::kBool)).to(at::kFloat);

    const at::Tensor out = layer->forward(z, mask);
    const auto p = layer->named_parameters();
    const at::Tensor expected = triangle_attention_by_algorithm(
        z, mask, p["ln_weight"], p["ln_bias"], p["w_proj"], p["w_o"], H, d, starting);
    ASSERT_EQ(out.sizes(), expected.sizes());
    EXPECT_LT(rel_error(out, expected), 1e-12);

    // Gradients of both with respect to z and every parameter (the projection's gradient is
    // assembled from five views in the layer).
    const at::Tensor w = at::randn_like(out);
    std::vector<at::Tensor> wrt{z};
    for (const auto& kv : p) wrt.push_back(kv.value());
    const auto ours = torch::autograd::grad({(out * w).sum()}, wrt);
    const auto theirs = torch::autograd::grad({(expected * w).sum()}, wrt);
    for (size_t i = 0; i < wrt.size(); ++i)
      EXPECT_LT(rel_error(ours[i], theirs[i]), 1e-12) << (i == 0 ? "z" : p.keys()[i - 1]);
  }
}

}  // namespace
}  // namespace megafold::model
