#include "ops/attention_pair_bias/attention_pair_bias.h"

#include <cmath>

#include "ops/layernorm_linear/layernorm_linear.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

struct Params {
  at::Tensor ln_s_w, ln_s_b, w_qkvg, b_q, ln_z_w, ln_z_b, w_z, w_o;
};

Params random_params(int64_t c_s, int64_t c_z, int64_t H, int64_t d) {
  const auto o = at::TensorOptions().dtype(at::kDouble);
  return {1 + 0.1 * at::randn({c_s}, o), 0.1 * at::randn({c_s}, o),
          at::randn({4 * H * d, c_s}, o) / std::sqrt(double(c_s)), 0.1 * at::randn({H * d}, o),
          1 + 0.1 * at::randn({c_z}, o), 0.1 * at::randn({c_z}, o), at::randn({H, c_z}, o),
          at::randn({c_s, H * d}, o) / std::sqrt(double(H * d))};
}

// AF3 SI Alg. 24 written out per head with explicit loops over heads.
at::Tensor naive(const at::Tensor& s, const at::Tensor& z, const at::Tensor& mask, const Params& p,
                 int64_t H) {
  const int64_t d = p.w_qkvg.size(0) / (4 * H);
  const at::Tensor a = at::layer_norm(s, {s.size(-1)}, p.ln_s_w, p.ln_s_b, kLayerNormEps);
  const at::Tensor zn = at::layer_norm(z, {z.size(-1)}, p.ln_z_w, p.ln_z_b, kLayerNormEps);
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    auto rows = [&](int64_t block) { return p.w_qkvg.narrow(0, block * H * d + h * d, d); };
    const at::Tensor q = at::matmul(a, rows(0).t()) + p.b_q.narrow(0, h * d, d);
    const at::Tensor k = at::matmul(a, rows(1).t()), v = at::matmul(a, rows(2).t());
    const at::Tensor g = at::sigmoid(at::matmul(a, rows(3).t()));
    at::Tensor logits = at::matmul(q, k.transpose(1, 2)) / std::sqrt(double(d)) +
                        at::matmul(zn, p.w_z[h]);  // [B, N, N]
    logits = at::where(mask.ne(0).unsqueeze(1), logits, -INFINITY);
    heads.push_back(g * at::matmul(at::softmax(logits, -1), v));
  }
  return at::matmul(at::cat(heads, -1), p.w_o.t());
}

at::Tensor call(const at::Tensor& s, const at::Tensor& z, const at::Tensor& mask, const Params& p, int64_t H) {
  return attention_pair_bias(s, z, mask, p.ln_s_w, p.ln_s_b, p.w_qkvg, p.b_q, p.ln_z_w, p.ln_z_b,
                             p.w_z, p.w_o, H);
}

TEST(AttentionPairBias, MatchesPerHeadNaive) {
  fresh_seed();
  for (int64_t N : {1, 17}) {
    const int64_t H = 4;
    const Params p = random_params(32, 8, H, 6);
    const at::Tensor s = at::randn({2, N, 32}, at::kDouble), z = at::randn({2, N, N, 8}, at::kDouble);
    at::Tensor mask = at::ones({2, N}, at::kDouble);
    if (N > 3) mask.narrow(1, N - 3, 3).fill_(0);
    EXPECT_LT(rel_error(call(s, z, mask, p, H), naive(s, z, mask, p, H)), 1e-12) << "N=" << N;
  }
}

TEST(AttentionPairBias, GradientsMatchFiniteDifferences) {
  fresh_seed();
  const int64_t H = 2;
  Params p = random_params(4, 3, H, 2);
  std::vector<at::Tensor> in = {at::randn({1, 3, 4}, at::kDouble), at::randn({1, 3, 3, 3}, at::kDouble),
                                p.w_qkvg, p.b_q, p.w_z, p.w_o, p.ln_s_w, p.ln_z_b};
  for (auto& t : in) t.requires_grad_(true);
  const at::Tensor mask = at::tensor({1.0, 1.0, 0.0}, at::kDouble).view({1, 3});
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) {
        return attention_pair_bias(x[0], x[1], mask, x[6], p.ln_s_b, x[2], x[3], p.ln_z_w, x[7], x[4], x[5], H);
      },
      in);
}

}  // namespace
}  // namespace megafold::ops
