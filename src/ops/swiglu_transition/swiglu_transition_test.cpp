#include "ops/swiglu_transition/swiglu_transition.h"

#include "ops/layernorm_linear/layernorm_linear.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

at::Tensor naive(const at::Tensor& x, const at::Tensor& g, const at::Tensor& b,
                 const at::Tensor& w_in, const at::Tensor& w_out) {
  const int64_t h = w_in.size(0) / 2;
  const at::Tensor xn = at::layer_norm(x, {x.size(-1)}, g, b, kLayerNormEps);
  const at::Tensor a = at::einsum("...i,oi->...o", {xn, w_in.narrow(0, 0, h)});
  const at::Tensor bb = at::einsum("...i,oi->...o", {xn, w_in.narrow(0, h, h)});
  const at::Tensor hidden = a / (1 + at::exp(-a)) * bb;  // swish(a) * b
  return at::einsum("...i,oi->...o", {hidden, w_out});
}

TEST(SwigluTransition, MatchesNaiveAndDerivedTolerance) {
  fresh_seed();
  const int64_t c = 16, n = 4;
  const at::Tensor x = at::randn({37, 5, c}, at::kDouble);
  const at::Tensor g = at::randn({c}, at::kDouble), b = at::randn({c}, at::kDouble);
  const at::Tensor w_in = at::randn({2 * n * c, c}, at::kDouble) / 4;
  const at::Tensor w_out = at::randn({c, n * c}, at::kDouble) / 8;
  const at::Tensor ref = naive(x, g, b, w_in, w_out);
  EXPECT_LT(rel_error(swiglu_transition(x, g, b, w_in, w_out), ref), 1e-12);
  auto f = [](const at::Tensor& t) { return t.to(at::kFloat); };
  expect_within_derived_tolerance(swiglu_transition(f(x), f(g), f(b), f(w_in), f(w_out)),
                                  naive(f(x), f(g), f(b), f(w_in), f(w_out)), ref, 1e-5,
                                  "fp32 swiglu_transition");
}

TEST(SwigluTransition, GradientsMatchFiniteDifferences) {
  fresh_seed();
  std::vector<at::Tensor> in = {at::randn({3, 4}, at::kDouble), at::randn({4}, at::kDouble),
                                at::randn({4}, at::kDouble), at::randn({16, 4}, at::kDouble),
                                at::randn({4, 8}, at::kDouble)};
  for (auto& t : in) t.requires_grad_(true);
  expect_gradients_match_finite_differences(
      [](const std::vector<at::Tensor>& x) { return swiglu_transition(x[0], x[1], x[2], x[3], x[4]); }, in);
}

// The passthrough form (the residual step): the update, x itself, and x's gradient the sum of
// both paths'.
TEST(SwigluTransition, PassthroughHandsXOnUnchanged) {
  fresh_seed();
  for (const at::ScalarType t : {at::kFloat, at::kDouble}) {
    const auto o = at::TensorOptions().dtype(t);
    const std::vector<at::Tensor> in = {at::randn({6, 5, 8}, o), at::randn({8}, o), at::randn({8}, o),
                                        at::randn({32, 8}, o) / 3, at::randn({8, 16}, o) / 4};
    expect_passthrough_adds_residual_gradient(
        [](const std::vector<at::Tensor>& x) { return swiglu_transition(x[0], x[1], x[2], x[3], x[4]); },
        [](const std::vector<at::Tensor>& x) { return swiglu_transition_passthrough(x[0], x[1], x[2], x[3], x[4]); },
        in, at::randn({6, 5, 8}, o), at::randn({6, 5, 8}, o));
  }
}

TEST(SwigluTransition, OddWeightRowsAreRejected) {
  EXPECT_THROW(swiglu_transition(at::randn({2, 4}), at::ones({4}), at::zeros({4}),
                                 at::randn({7, 4}), at::randn({4, 3})),
               c10::Error);
}

}  // namespace
}  // namespace megafold::ops
