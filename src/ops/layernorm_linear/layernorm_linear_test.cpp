#include "ops/layernorm_linear/layernorm_linear.h"

#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

// Independent formulation: LayerNorm written out with biased variance.
at::Tensor naive(const at::Tensor& x, const at::Tensor& g, const at::Tensor& b,
                 const at::Tensor& w, const at::Tensor& bias) {
  const at::Tensor mu = x.mean(-1, true);
  const at::Tensor var = (x - mu).pow(2).mean(-1, true);
  const at::Tensor xn = (x - mu) / at::sqrt(var + kLayerNormEps) * g + b;
  return at::einsum("...i,oi->...o", {xn, w}) + bias;
}

TEST(LayerNormLinear, MatchesNaiveAndDerivedTolerance) {
  fresh_seed();
  for (int64_t rows : {1, 37}) {
    const at::Tensor x = at::randn({rows, 3, 24}, at::kDouble) * 3 + 1;
    const at::Tensor g = at::randn({24}, at::kDouble), b = at::randn({24}, at::kDouble);
    const at::Tensor w = at::randn({40, 24}, at::kDouble), bias = at::randn({40}, at::kDouble);
    const at::Tensor ref = naive(x, g, b, w, bias);
    EXPECT_LT(rel_error(layernorm_linear(x, g, b, w, bias), ref), 1e-12);
    auto f = [](const at::Tensor& t) { return t.to(at::kFloat); };
    expect_within_derived_tolerance(layernorm_linear(f(x), f(g), f(b), f(w), f(bias)),
                                    naive(f(x), f(g), f(b), f(w), f(bias)), ref, 1e-5,
                                    "fp32 layernorm_linear");
  }
}

TEST(LayerNormLinear, GradientsMatchFiniteDifferences) {
  fresh_seed();
  std::vector<at::Tensor> in = {at::randn({2, 3, 5}, at::kDouble), at::randn({5}, at::kDouble),
                                at::randn({5}, at::kDouble), at::randn({4, 5}, at::kDouble),
                                at::randn({4}, at::kDouble)};
  for (auto& t : in) t.requires_grad_(true);
  expect_gradients_match_finite_differences(
      [](const std::vector<at::Tensor>& x) { return layernorm_linear(x[0], x[1], x[2], x[3], x[4]); }, in);
}

TEST(LayerNormLinear, BadShapesNameTheArgument) {
  const at::Tensor x = at::randn({2, 8});
  try {
    layernorm_linear(x, at::ones({8}), at::zeros({7}), at::randn({3, 8}), std::nullopt);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'ln_bias'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megafold::ops
