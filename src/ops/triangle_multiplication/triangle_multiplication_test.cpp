#include "ops/triangle_multiplication/triangle_multiplication.h"

#include "ops/layernorm_linear/layernorm_linear.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

struct Params {
  at::Tensor ln_in_w, ln_in_b, w_ab, w_g, ln_out_w, ln_out_b, w_o;
  std::vector<at::Tensor> list() const { return {ln_in_w, ln_in_b, w_ab, w_g, ln_out_w, ln_out_b, w_o}; }
};

Params random_params(int64_t c_z, int64_t c, at::ScalarType dt) {
  const auto o = at::TensorOptions().dtype(dt);
  return {1 + 0.1 * at::randn({c_z}, o), 0.1 * at::randn({c_z}, o),
          at::randn({4 * c, c_z}, o) / std::sqrt(double(c_z)), at::randn({c_z, c_z}, o) / std::sqrt(double(c_z)),
          1 + 0.1 * at::randn({c}, o), 0.1 * at::randn({c}, o), at::randn({c_z, c}, o) / std::sqrt(double(c))};
}

// Independent formulation: AF3 Alg. 12/13 with einsum over explicit index strings.
at::Tensor naive(const at::Tensor& z, const at::Tensor& mask, const Params& p, bool outgoing) {
  const int64_t c_z = z.size(-1), c = p.w_ab.size(0) / 4;
  auto lin = [](const at::Tensor& x, const at::Tensor& w) { return at::einsum("bijk,ok->bijo", {x, w}); };
  const at::Tensor x = at::layer_norm(z, {c_z}, p.ln_in_w, p.ln_in_b, kLayerNormEps);
  const at::Tensor m = mask.unsqueeze(-1);
  const at::Tensor a = at::sigmoid(lin(x, p.w_ab.narrow(0, 2 * c, c))) * lin(x, p.w_ab.narrow(0, 0, c)) * m;
  const at::Tensor b = at::sigmoid(lin(x, p.w_ab.narrow(0, 3 * c, c))) * lin(x, p.w_ab.narrow(0, c, c)) * m;
  const at::Tensor t = outgoing ? at::einsum("bikc,bjkc->bijc", {a, b}) : at::einsum("bkic,bkjc->bijc", {a, b});
  const at::Tensor o = lin(at::layer_norm(t, {c}, p.ln_out_w, p.ln_out_b, kLayerNormEps), p.w_o);
  return at::sigmoid(lin(x, p.w_g)) * o;
}

at::Tensor call(const at::Tensor& z, const at::Tensor& mask, const Params& p, bool outgoing) {
  return triangle_multiplication(z, mask, p.ln_in_w, p.ln_in_b, p.w_ab, p.w_g, p.ln_out_w,
                                 p.ln_out_b, p.w_o, outgoing);
}

at::Tensor padded_mask(int64_t B, int64_t N, int64_t valid) {
  at::Tensor tok = at::zeros({B, N}, at::kDouble);
  tok.narrow(1, 0, valid).fill_(1);
  return tok.unsqueeze(2) * tok.unsqueeze(1);
}

TEST(TriangleMultiplication, MatchesNaiveBothDirections) {
  fresh_seed();
  for (bool outgoing : {true, false}) {
    for (int64_t N : {1, 37}) {
      const Params p = random_params(16, 8, at::kDouble);
      const at::Tensor z = at::randn({2, N, N, 16}, at::kDouble);
      const at::Tensor mask = padded_mask(2, N, std::max<int64_t>(1, N - 5));
      const at::Tensor ref = naive(z, mask, p, outgoing);
      EXPECT_LT(rel_error(call(z, mask, p, outgoing), ref), 1e-12) << "N=" << N << " outgoing=" << outgoing;
      auto f = [](const at::Tensor& t) { return t.to(at::kFloat); };
      const Params pf{f(p.ln_in_w), f(p.ln_in_b), f(p.w_ab), f(p.w_g), f(p.ln_out_w), f(p.ln_out_b), f(p.w_o)};
      expect_within_derived_tolerance(call(f(z), f(mask), pf, outgoing), naive(f(z), f(mask), pf, outgoing),
                                      ref, 1e-5, "fp32 triangle_multiplication");
    }
  }
}

TEST(TriangleMultiplication, PaddedTokensDoNotChangeRealPairs) {
  fresh_seed();
  for (bool outgoing : {true, false}) {
    const Params p = random_params(8, 4, at::kDouble);
    const int64_t n = 11, pad = 6;
    const at::Tensor z = at::randn({1, n + pad, n + pad, 8}, at::kDouble);
    const at::Tensor full = call(z, padded_mask(1, n + pad, n), p, outgoing);
    const at::Tensor cropped = call(z.narrow(1, 0, n).narrow(2, 0, n).contiguous(), padded_mask(1, n, n), p, outgoing);
    EXPECT_LT(rel_error(full.narrow(1, 0, n).narrow(2, 0, n), cropped), 1e-12);
  }
}

TEST(TriangleMultiplication, GradientsMatchFiniteDifferences) {
  fresh_seed();
  for (bool outgoing : {true, false}) {
    Params p = random_params(3, 2, at::kDouble);
    at::Tensor z = at::randn({1, 3, 3, 3}, at::kDouble);
    const at::Tensor mask = padded_mask(1, 3, 2);
    std::vector<at::Tensor> in = {z};
    for (const auto& t : p.list()) in.push_back(t);
    for (auto& t : in) t.requires_grad_(true);
    expect_gradients_match_finite_differences(
        [&](const std::vector<at::Tensor>& x) {
          return triangle_multiplication(x[0], mask, x[1], x[2], x[3], x[4], x[5], x[6], x[7], outgoing);
        },
        in);
  }
}

// The projection's passthrough form (the residual step after the update): the operands, z
// itself, and z's gradient the sum of both paths'. The operands go along one vector so that
// one gradient covers all three.
TEST(TriangleMultiplication, ProjectionPassthroughHandsZOnUnchanged) {
  fresh_seed();
  for (const at::ScalarType t : {at::kFloat, at::kDouble}) {
    const auto o = at::TensorOptions().dtype(t);
    const int64_t n = 5, c_z = 8, c = 3, c_gate = 8;
    const at::Tensor mask = padded_mask(2, n, 4).to(t);
    const std::vector<at::Tensor> in = {at::randn({2, n, n, c_z}, o), 1 + 0.3 * at::randn({c_z}, o),
                                        0.3 * at::randn({c_z}, o), at::randn({4 * c + c_gate, c_z}, o) / 3};
    auto flat = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& g) {
      return at::cat({a.flatten(), b.flatten(), g.flatten()});
    };
    const int64_t outputs = 2 * n * n * (2 * c + c_gate);
    expect_passthrough_adds_residual_gradient(
        [&](const std::vector<at::Tensor>& x) {
          const auto r = triangle_multiplication_projection(x[0], mask, x[1], x[2], x[3], c);
          return flat(r.a, r.b, r.gate);
        },
        [&](const std::vector<at::Tensor>& x) {
          const auto r = triangle_multiplication_projection_passthrough(x[0], mask, x[1], x[2], x[3], c);
          return std::tuple<at::Tensor, at::Tensor>{flat(r.a, r.b, r.gate), r.z};
        },
        in, at::randn({outputs}, o), at::randn({2, n, n, c_z}, o));
  }
}

}  // namespace
}  // namespace megafold::ops
