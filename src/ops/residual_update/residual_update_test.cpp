// residual_update's reference: the formula in float64 for shared-row and shared-column dropout
// scales with and without a gate, fp32 sums of 16-bit updates, gradients against finite
// differences, and errors that name the argument.
#include "ops/residual_update/residual_update.h"

#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

TEST(ResidualUpdate, MatchesTheFormulaForBothDropoutAxes) {
  fresh_seed();
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor z = at::randn({2, 5, 5, 3}, o), u = at::randn({2, 5, 5, 3}, o), g = at::rand({2, 5, 5, 3}, o);
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 1, 5, 3}, std::vector<int64_t>{2, 5, 1, 3}}) {
    const at::Tensor keep = at::bernoulli(at::full(shape, 0.75, o)) / 0.75;
    EXPECT_LT(rel_error(residual_update(z, u, g, keep), z + keep * g * u), 1e-15);
    EXPECT_LT(rel_error(residual_update(z, u, std::nullopt, keep), z + keep * u), 1e-15);
  }
  EXPECT_LT(rel_error(residual_update(z, u, std::nullopt, std::nullopt), z + u), 1e-15);
}

TEST(ResidualUpdate, SumsSixteenBitUpdatesInFloat32) {
  fresh_seed();
  const at::Tensor z = at::randn({3, 4, 4, 8}) * 100;
  const at::Tensor u = at::randn({3, 4, 4, 8}).to(at::kBFloat16), g = at::rand({3, 4, 4, 8}).to(at::kBFloat16);
  const at::Tensor out = residual_update(z, u, g, std::nullopt);
  ASSERT_EQ(out.scalar_type(), at::kFloat);
  // The product g * u is not rounded to bf16 (z's magnitude would swallow that error anyway;
  // this checks the product's own rounding is gone): only fp32 rounding of the sum remains.
  const at::Tensor exact = z.to(at::kDouble) + g.to(at::kDouble) * u.to(at::kDouble);
  EXPECT_LE((out.to(at::kDouble) - exact).abs().max().item<double>(),
            exact.abs().max().item<double>() * std::ldexp(1.0, -24));
}

TEST(ResidualUpdate, GradientsMatchFiniteDifferences) {
  fresh_seed();
  const auto o = at::TensorOptions().dtype(at::kDouble);
  std::vector<at::Tensor> in = {at::randn({2, 3, 3, 4}, o), at::randn({2, 3, 3, 4}, o), at::rand({2, 3, 3, 4}, o)};
  for (auto& t : in) t.requires_grad_(true);
  const at::Tensor keep = at::bernoulli(at::full({2, 3, 1, 4}, 0.5, o)) * 2;
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) { return residual_update(x[0], x[1], x[2], keep); }, in);
}

// The forked form (the result twice, for a stream read by two ops): the same result, and z's
// gradient the sum of the two handles' as autograd would form it.
TEST(ResidualUpdate, ForkedFormSumsBothHandlesGradients) {
  fresh_seed();
  for (const at::ScalarType t : {at::kFloat, at::kDouble}) {
    const auto o = at::TensorOptions().dtype(t);
    const at::Tensor keep = at::bernoulli(at::full({2, 1, 3, 4}, 0.75, o)) / 0.75;
    const std::vector<at::Tensor> in = {at::randn({2, 3, 3, 4}, o), at::randn({2, 3, 3, 4}, o),
                                        at::rand({2, 3, 3, 4}, o)};
    expect_forked_sums_gradients(
        [&](const std::vector<at::Tensor>& x) { return residual_update(x[0], x[1], x[2], keep); },
        [&](const std::vector<at::Tensor>& x) { return residual_update_forked(x[0], x[1], x[2], keep); }, in,
        at::randn({2, 3, 3, 4}, o), at::randn({2, 3, 3, 4}, o));
  }
}

TEST(ResidualUpdate, BadArgumentsAreNamed) {
  const at::Tensor z = at::randn({2, 3, 3, 4});
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { residual_update(z, at::randn({2, 3, 4, 4}), std::nullopt, std::nullopt); }).find("'update'"),
            std::string::npos);
  EXPECT_NE(message([&] { residual_update(z, z, at::randn({2, 3, 3}), std::nullopt); }).find("'gate'"),
            std::string::npos);
  EXPECT_NE(message([&] { residual_update(z, z, std::nullopt, at::ones({2, 2, 3, 4})); }).find("'scale'"),
            std::string::npos);
  EXPECT_NE(message([&] { residual_update(z, z, std::nullopt, at::ones({3, 4})); }).find("'scale'"), std::string::npos);
  EXPECT_NE(message([&] { residual_update(at::ones({2, 2}, at::kLong), at::ones({2, 2}), std::nullopt, std::nullopt); })
                .find("'z'"),
            std::string::npos);
}

}  // namespace
}  // namespace megafold::ops
