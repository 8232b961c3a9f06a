// dropout_mask's reference: the factor's two values, the kept fraction and the independence of
// neighbouring draws and of neighbouring seeds within binomial bounds, the mask shared along its
// axis, a row shard's mask equal to its rows of the unsharded one, and errors that name the
// argument.
#include "ops/dropout_mask/dropout_mask.h"

#include <ATen/ops/zeros.h>

#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <random>

#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

// Whether |observed - expected| lies within 5 standard deviations of a sum of n Bernoulli(p)
// draws (a bound a correct draw misses with probability ~6e-7).
void expect_binomial(double observed_count, int64_t n, double p, const char* what) {
  const double sigma = std::sqrt(double(n) * p * (1 - p));
  EXPECT_LE(std::abs(observed_count - double(n) * p), 5 * sigma + 1) << what << ": n = " << n << ", p = " << p;
}

TEST(DropoutMask, KeepsOneMinusRateAndRescales) {
  const int64_t seed = static_cast<int64_t>(fresh_seed());
  const at::Tensor like = at::zeros({2, 7, 301, 33});
  for (double rate : {0.1, 0.25, 0.5, 0.9}) {
    const at::Tensor m = dropout_mask_ref(like, rate, 0, seed, -1, 0);
    ASSERT_EQ(m.sizes(), (std::vector<int64_t>{2, 1, 301, 33}));
    const float keep = static_cast<float>(1.0 / (1.0 - rate));
    const at::Tensor kept = m == keep;
    // Every value is 0 or 1 / (1 - rate).
    EXPECT_TRUE(kept.logical_or(m == 0).all().item<bool>()) << rate;
    expect_binomial(kept.sum().item<double>(), m.numel(), 1 - rate, "kept count");
    // Neighbouring positions (the fastest counter) and neighbouring seeds draw independently:
    // both keep at rate (1 - rate)^2.
    const at::Tensor flat = kept.flatten();
    const int64_t n = flat.numel() - 1;
    expect_binomial(flat.narrow(0, 0, n).logical_and(flat.narrow(0, 1, n)).sum().item<double>(), n,
                    (1 - rate) * (1 - rate), "neighbouring positions both kept");
    const at::Tensor next = dropout_mask_ref(like, rate, 0, seed + 1, -1, 0) == keep;
    expect_binomial(kept.logical_and(next).sum().item<double>(), m.numel(), (1 - rate) * (1 - rate),
                    "neighbouring seeds both kept");
  }
  // rate 0 keeps everything at factor 1.
  EXPECT_TRUE((dropout_mask_ref(like, 0.0, 1, seed, -1, 0) == 1).all().item<bool>());
}

TEST(DropoutMask, SameSeedSameMaskAndShardsAgree) {
  const int64_t seed = static_cast<int64_t>(fresh_seed());
  const at::Tensor like = at::zeros({2, 45, 45, 8});
  const at::Tensor cols = dropout_mask_ref(like, 0.25, 1, seed, -1, 0);
  ASSERT_EQ(cols.sizes(), (std::vector<int64_t>{2, 45, 1, 8}));
  EXPECT_TRUE(cols.equal(dropout_mask_ref(like, 0.25, 1, seed, -1, 0)));
  EXPECT_FALSE(cols.equal(dropout_mask_ref(like, 0.25, 1, seed ^ 1, -1, 0)));
  // Rows [offset, offset + n) of a row-sharded pair tensor get those rows of the unsharded mask;
  // the rowwise mask does not depend on the shard at all.
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int k = 0; k < 4; ++k) {
    const int64_t n = 1 + rng() % 20, offset = rng() % (45 - n + 1);
    const at::Tensor shard = at::zeros({2, n, 45, 8});
    EXPECT_TRUE(dropout_mask_ref(shard, 0.25, 1, seed, 45, offset).equal(cols.narrow(1, offset, n)))
        << "rows " << offset << " + " << n;
    EXPECT_TRUE(dropout_mask_ref(shard, 0.25, 0, seed, 45, offset).equal(dropout_mask_ref(like, 0.25, 0, seed, -1, 0)));
  }
}

void expect_throws_with(const std::function<void()>& f, const std::string& text) {
  const std::string message = error_of<c10::Error>(f);
  EXPECT_NE(message.find("megafold::dropout_mask"), std::string::npos) << message;
  EXPECT_NE(message.find(text), std::string::npos) << message;
}

TEST(DropoutMask, ErrorsNameTheArgument) {
  const at::Tensor like = at::zeros({1, 4, 4, 2});
  expect_throws_with([&] { dropout_mask_ref(like, 1.0, 0, 1, -1, 0); }, "rate must lie in [0, 1)");
  expect_throws_with([&] { dropout_mask_ref(like, 0.25, 2, 1, -1, 0); }, "axis must be 0 (rowwise) or 1");
  expect_throws_with([&] { dropout_mask_ref(like, 0.25, 1, 1, 6, 3); }, "do not lie within rows_total 6");
  expect_throws_with([&] { dropout_mask_ref(at::zeros({4, 4, 2}), 0.25, 0, 1, -1, 0); }, "argument 'like' has shape [4, 4, 2]");
}

}  // namespace
}  // namespace megafold::ops
