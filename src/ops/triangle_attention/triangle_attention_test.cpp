#include "ops/triangle_attention/triangle_attention.h"

#include <cmath>

#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

// Independent formulation: einsum and a -inf mask, NaN rows zeroed afterwards.
at::Tensor naive(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& bias, const at::Tensor& mask, const at::Tensor& gate) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor logits = at::einsum("brihd,brjhd->brhij", {q, k}) * scale + bias.unsqueeze(1);
  const at::Tensor key = mask.ne(0).unsqueeze(2).unsqueeze(3);  // [B, R, 1, 1, N]
  logits = at::where(key, logits, -INFINITY);
  const at::Tensor p = at::nan_to_num(at::softmax(logits, -1), 0.0);
  return at::einsum("brhij,brjhd->brihd", {p, v}) * at::sigmoid(gate);
}

struct Inputs {
  at::Tensor q, k, v, bias, mask, gate;
};

Inputs random_inputs(int64_t B, int64_t R, int64_t N, int64_t H, int64_t d, at::ScalarType dt) {
  const auto o = at::TensorOptions().dtype(dt);
  Inputs in{at::randn({B, R, N, H, d}, o), at::randn({B, R, N, H, d}, o),
            at::randn({B, R, N, H, d}, o), at::randn({B, H, N, N}, o),
            (at::rand({B, R, N}) > 0.3).to(dt), at::randn({B, R, N, H, d}, o)};
  in.mask.select(1, 0).fill_(0);  // a fully masked row
  if (N > 1) in.mask.select(2, N - 1).fill_(0);  // a padded key for every row
  return in;
}

TEST(TriangleAttention, MatchesNaiveInFloat64AtAwkwardSizes) {
  fresh_seed();
  for (int64_t N : {1, 17, 37}) {
    const Inputs in = random_inputs(2, 3, N, 2, 8, at::kDouble);
    const at::Tensor out = triangle_attention(in.q, in.k, in.v, in.bias, in.mask, in.gate);
    const at::Tensor ref = naive(in.q, in.k, in.v, in.bias, in.mask, in.gate);
    EXPECT_LT(rel_error(out, ref), 1e-12) << "N=" << N;
    EXPECT_EQ(out.select(1, 0).abs().max().item<double>(), 0.0) << "fully masked row must be 0";
  }
}

TEST(TriangleAttention, Float32WithinDerivedTolerance) {
  fresh_seed();
  const Inputs in = random_inputs(1, 4, 37, 4, 16, at::kFloat);
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const at::Tensor ref64 = naive(d(in.q), d(in.k), d(in.v), d(in.bias), d(in.mask), d(in.gate));
  const at::Tensor naive32 = naive(in.q, in.k, in.v, in.bias, in.mask, in.gate);
  const at::Tensor out = triangle_attention(in.q, in.k, in.v, in.bias, in.mask, in.gate);
  expect_within_derived_tolerance(out, naive32, ref64, 1e-6, "fp32 triangle_attention");
}

TEST(TriangleAttention, HalfPrecisionWithMasksStaysFinite) {
  // The mask fill must not overflow fp16 (max 65504).
  fresh_seed();
  const Inputs in = random_inputs(1, 3, 17, 2, 8, at::kHalf);
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const at::Tensor out = triangle_attention(in.q, in.k, in.v, in.bias, in.mask, in.gate);
  const at::Tensor ref64 = naive(d(in.q), d(in.k), d(in.v), d(in.bias), d(in.mask), d(in.gate));
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
  EXPECT_LT(rel_error(out, ref64), 1e-2);  // fp16 inputs: ~1e-3 relative
}

TEST(TriangleAttention, GradientsMatchFiniteDifferencesWithMaskedRow) {
  fresh_seed();
  Inputs in = random_inputs(1, 2, 4, 2, 3, at::kDouble);
  for (at::Tensor* t : {&in.q, &in.k, &in.v, &in.bias, &in.gate}) t->requires_grad_(true);
  expect_gradients_match_finite_differences(
      [&](const std::vector<at::Tensor>& x) {
        return triangle_attention(x[0], x[1], x[2], x[3], in.mask, x[4]);
      },
      {in.q, in.k, in.v, in.bias, in.gate});
}

TEST(TriangleAttention, FullyMaskedRowGivesFiniteZeroGradients) {
  fresh_seed();
  Inputs in = random_inputs(1, 3, 9, 2, 4, at::kFloat);
  in.q.requires_grad_(true);
  in.k.requires_grad_(true);
  triangle_attention(in.q, in.k, in.v, in.bias, in.mask, in.gate).sum().backward();
  EXPECT_TRUE(at::isfinite(in.q.grad()).all().item<bool>());
  EXPECT_TRUE(at::isfinite(in.k.grad()).all().item<bool>());
  EXPECT_EQ(in.q.grad().select(1, 0).abs().max().item<float>(), 0.f);
}

TEST(TriangleAttention, StridedViewsEqualContiguousCopies) {
  // The ending-node variant passes transposed views; results must not depend on strides.
  fresh_seed();
  const int64_t B = 1, N = 13, H = 2, d = 4;
  const at::Tensor proj = at::randn({B, N, N, 4, H, d}, at::kDouble);
  const at::Tensor bias = at::randn({B, N, N, H}, at::kDouble).permute({0, 3, 2, 1});
  const at::Tensor mask = (at::rand({B, N, N}) > 0.2).to(at::kDouble).transpose(1, 2);
  auto view = [&](int i) { return proj.select(3, i).transpose(1, 2); };
  const at::Tensor strided = triangle_attention(view(0), view(1), view(2), bias, mask, view(3));
  const at::Tensor copied = triangle_attention(
      view(0).contiguous(), view(1).contiguous(), view(2).contiguous(), bias.contiguous(),
      mask.contiguous(), view(3).contiguous());
  EXPECT_LT(rel_error(strided, copied), 1e-14);
}

// The projected form against naive() on explicit copies of each part: columns q, k, v, gate
// (heads outer), the bias, padding; around the starting node (rows of proj) and the ending
// node (rows of proj^T, bias b'[h, i, k] = b_ki), with the projection's own bias or a given one.
TEST(TriangleAttention, ProjectedReadsTheProjectionsColumns) {
  fresh_seed();
  const int64_t N = 11, H = 2, d = 8, W = 4 * H * d + H + 3;
  const at::Tensor proj = at::randn({2, N, N, W}, at::kDouble);
  const at::Tensor given = at::randn({2, H, N, N}, at::kDouble);
  for (const bool transposed : {false, true}) {
    for (const bool own : {false, true}) {
      SCOPED_TRACE(std::string(transposed ? "ending" : "starting") + (own ? ", given bias" : ", own bias"));
      const at::Tensor P = (transposed ? proj.transpose(1, 2) : proj).contiguous();
      auto part = [&](int64_t i) { return P.narrow(-1, i * H * d, H * d).reshape({2, N, N, H, d}); };
      const at::Tensor bias = own ? given : P.narrow(-1, 4 * H * d, H).permute({0, 3, 1, 2}).contiguous();
      const at::Tensor mask = (at::rand({2, N, N}) > 0.3).to(at::kDouble);
      const at::Tensor ref = naive(part(0), part(1), part(2), bias, mask, part(3));
      const at::Tensor out = triangle_attention_projected(proj, own ? std::optional(given) : std::nullopt, mask, H, d,
                                                          transposed);
      EXPECT_LT(rel_error(out, ref), 1e-12);
    }
  }
}

TEST(TriangleAttention, ProjectedTooNarrowIsAClearError) {
  try {
    triangle_attention_projected(at::randn({1, 5, 5, 4 * 2 * 8}), std::nullopt, std::nullopt, 2, 8, false);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("q, k, v, gate and bias need 66"), std::string::npos) << e.what();
  }
}

TEST(TriangleAttention, BadShapesNameTheArgument) {
  const at::Tensor q = at::randn({1, 2, 5, 2, 4});
  try {
    triangle_attention(q, q, q, at::randn({1, 2, 5, 4}), std::nullopt, std::nullopt);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bias'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace megafold::ops
