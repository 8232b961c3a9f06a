// CUDA path of triangle_attention against the float64 reference (runs on a GPU host; skipped
// elsewhere). Outputs and all gradients (q, k, v, bias, gate) must be at most ~2x as far from
// float64 as the reference computed naively in the same low precision.
#include <ATen/Context.h>

#include "ops/reference_mode.h"
#include "ops/triangle_attention/triangle_attention.h"
#include "testing.h"

#ifdef MEGAFOLD_CUDA
#include "ops/triangle_attention/triangle_attention_cuda.h"
#endif

namespace megafold::ops {
namespace {
using namespace megafold::testing;

struct Case {
  at::ScalarType dtype;
  int64_t N, R, H, d;
  bool bias = true, mask = true, gate = true;
  // The mask of a padded crop instead of random keys: row r attends a prefix of the keys (from
  // N / 2 to N long), so most of its 64-key tiles hold no masked key and one holds the edge.
  bool padded = false;
};

// Row 0 fully masked; with `padded`, row r > 0 attends keys [0, n_r), else ~80% of the keys
// at random and never the last two (padding).
at::Tensor test_mask(const Case& c) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  at::Tensor mask;
  if (c.padded) {
    const at::Tensor lengths = at::randint(c.N / 2, c.N + 1, {1, c.R, 1}, o.dtype(at::kLong));
    mask = (at::arange(c.N, o.dtype(at::kLong)).view({1, 1, c.N}) < lengths).to(at::kFloat);
  } else {
    mask = (at::rand({1, c.R, c.N}, o) > 0.2).to(at::kFloat);
    if (c.N > 2) mask.narrow(2, c.N - 2, 2).fill_(0);
  }
  mask.select(1, 0).fill_(0);
  return mask;
}

std::vector<at::Tensor> run(const std::vector<at::Tensor>& in, const at::Tensor& mask,
                            const at::Tensor& grad, at::ScalarType dtype, bool reference) {
  std::vector<at::Tensor> x;
  for (const auto& t : in) x.push_back(t.defined() ? t.to(dtype).detach().requires_grad_(true) : t);
  const at::Tensor out = reference ? triangle_attention_ref(x[0], x[1], x[2], x[3], mask, x[4])
                                   : triangle_attention(x[0], x[1], x[2], x[3], mask, x[4]);
  out.backward(grad.to(dtype));
  std::vector<at::Tensor> r = {out.detach()};
  for (const auto& t : x)
    if (t.defined()) r.push_back(t.grad());
  return r;
}

// Every output and gradient finite and within the derived tolerance of the references (one
// name per tensor).
void expect_finite_and_within_tolerance(const std::vector<at::Tensor>& ours, const std::vector<at::Tensor>& naive,
                                        const std::vector<at::Tensor>& ref64, const std::vector<std::string>& names,
                                        double atol) {
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(ours[i].isfinite().all().item<bool>()) << names[i];
    expect_within_derived_tolerance(ours[i], naive[i], ref64[i], atol, names[i].c_str());
  }
}

// Deterministic: a second backward gives bitwise the same gradients as `ours`.
void expect_bitwise_repeat(const std::vector<at::Tensor>& in, const at::Tensor& mask, const at::Tensor& grad,
                           at::ScalarType dtype, const std::vector<at::Tensor>& ours,
                           const std::vector<std::string>& names) {
  const auto again = run(in, mask, grad, dtype, false);
  for (size_t i = 1; i < ours.size(); ++i) EXPECT_TRUE(at::equal(ours[i], again[i])) << names[i];
}

void check_case(const Case& c) {
  SCOPED_TRACE("dtype " + std::string(c10::toString(c.dtype)) + " N=" + std::to_string(c.N) +
               " R=" + std::to_string(c.R) + " H=" + std::to_string(c.H) + " d=" + std::to_string(c.d) +
               (c.bias ? " bias" : "") + (c.mask ? (c.padded ? " padded mask" : " mask") : "") +
               (c.gate ? " gate" : ""));
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const std::vector<at::Tensor> in = {at::randn({1, c.R, c.N, c.H, c.d}, o), at::randn({1, c.R, c.N, c.H, c.d}, o),
                                      at::randn({1, c.R, c.N, c.H, c.d}, o),
                                      c.bias ? at::randn({1, c.H, c.N, c.N}, o) : at::Tensor(),
                                      c.gate ? at::randn({1, c.R, c.N, c.H, c.d}, o) : at::Tensor()};
  const at::Tensor mask = c.mask ? test_mask(c) : at::Tensor();
  const at::Tensor grad = at::randn({1, c.R, c.N, c.H, c.d}, o);
  const auto ref64 = run(in, mask, grad, at::kDouble, true);
  const auto naive = run(in, mask, grad, c.dtype, true);
  const auto ours = run(in, mask, grad, c.dtype, false);
  std::vector<std::string> names = {"out", "dq", "dk", "dv"};
  if (c.bias) names.push_back("dbias");
  if (c.gate) names.push_back("dgate");
  ASSERT_EQ(ours.size(), names.size());
  // The absolute floor: for fp32, flash-style recomputation takes delta = rowsum(dO * O) from
  // the stored output instead of rowsum(P * dP), a few fp32 ulps of the O(1) gradients.
  const double atol = c.dtype == at::kFloat ? 1e-5 : 1e-3;
  for (size_t i = 0; i < ours.size(); ++i) {
    ASSERT_TRUE(ours[i].defined()) << names[i];
    expect_within_derived_tolerance(ours[i], naive[i], ref64[i], atol, names[i].c_str());
  }
  if (c.mask) {
    EXPECT_EQ(ours[0].select(1, 0).abs().max().item<float>(), 0.f) << "fully masked row";
    for (size_t i = 1; i < ours.size(); ++i) EXPECT_TRUE(ours[i].isfinite().all().item<bool>()) << names[i];
  }
  expect_bitwise_repeat(in, mask, grad, c.dtype, ours, names);
}

class TriangleAttentionCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    fresh_seed();
  }
};

TEST_F(TriangleAttentionCuda, MatchesFloat64AtAwkwardSizes) {
  for (int64_t N : {1, 17, 37, 128, 131}) check_case({at::kBFloat16, N, N, 4, 32});
}

TEST_F(TriangleAttentionCuda, LargeRowsAndTileRemainders) {
  for (int64_t N : {384, 509}) check_case({at::kBFloat16, N, 24, 4, 32});
}

TEST_F(TriangleAttentionCuda, AllDtypesAndHeadDims) {
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16})
    for (int64_t d : {16, 24, 32, 48, 64}) check_case({dt, 37, 9, 2, d});
  check_case({at::kBFloat16, 57, 3, 16, 24});  // single attention with pair bias: 16 heads, d=24
  check_case({at::kBFloat16, 131, 8, 16, 48});  // diffusion transformer: 16 heads, d=48, 8 samples as rows
}

// The portable (mma.sync, sm_80+) kernels on a GPU that has its own: what A100/L40S/RTX users
// run, tested on whatever GPU runs the suite. Each decision is made per call, forward and
// backward alike, so the switch holds for whole fwd+bwd runs.
TEST_F(TriangleAttentionCuda, PortableKernelsOnAnyGpu) {
  const PortableKernelsScope portable;
  for (int64_t N : {17, 131}) check_case({at::kBFloat16, N, 9, 4, 32});
  check_case({at::kHalf, 37, 9, 2, 32});
  check_case({at::kBFloat16, 384, 24, 4, 32});
  check_case({at::kBFloat16, 37, 11, 8, 32, /*bias=*/false, /*mask=*/true, /*gate=*/true});
}

// A masked key whose logits would dwarf every other key's (a bias of 40): the forward leaves it
// out, and its gradients must be zeros, not 0 x inf (its P, recomputed without the mask in the
// key-owning backward, overflows fp16 by far).
TEST_F(TriangleAttentionCuda, MaskedKeysWithHugeLogitsGetZeroGradients) {
  const int64_t N = 70, R = 3, H = 2, d = 32;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  at::Tensor bias = at::randn({1, H, N, N}, o);
  at::Tensor mask = at::ones({1, R, N}, o);
  for (const int64_t key : {5, 66}) {
    bias.select(3, key).fill_(40.f);
    mask.select(2, key).fill_(0.f);
  }
  const std::vector<at::Tensor> in = {at::randn({1, R, N, H, d}, o), at::randn({1, R, N, H, d}, o),
                                      at::randn({1, R, N, H, d}, o), bias, at::randn({1, R, N, H, d}, o)};
  const at::Tensor grad = at::randn({1, R, N, H, d}, o);
  const auto ref64 = run(in, mask, grad, at::kDouble, true);
  const auto naive = run(in, mask, grad, at::kHalf, true);
  const auto ours = run(in, mask, grad, at::kHalf, false);
  const std::vector<std::string> names = {"out", "dq", "dk", "dv", "dbias", "dgate"};
  ASSERT_EQ(ours.size(), names.size());
  expect_finite_and_within_tolerance(ours, naive, ref64, names, 1e-3);
  for (const int64_t key : {5, 66})
    for (size_t i : {2, 3}) EXPECT_EQ(ours[i].select(2, key).abs().max().item<float>(), 0.f) << names[i] << " key " << key;
}

// Biases near and past the range in which the bias gradient takes e^bias out of its sum over
// rows (|bias| <= 40 in every entry of a block of 128 queries x 64 keys). A constant added to
// all keys of a query row changes no output or gradient, so the kernels run on bands of rows
// shifted by -100 and -70 (blocks that must sum with the bias in the scores: factored, e^100
// would overflow) and by -39 and +39 (factored), and are compared against the references on
// the unshifted bias. The bias is kept on multiples of 0.5 so that both shifted and unshifted
// values are exact in bf16 and fp16.
TEST_F(TriangleAttentionCuda, BiasGradientAcrossTheFactoredRange) {
  const int64_t N = 200, R = 5, H = 2, d = 32;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor bias = (at::randn({1, H, N, N}, o) * 4).round().clamp(-2, 2) / 2;
  at::Tensor shift = at::zeros({1, 1, N, 1}, o);
  shift.narrow(2, 0, 64).fill_(-100.f);
  shift.narrow(2, 64, 64).fill_(-70.f);
  shift.narrow(2, 128, 40).fill_(-39.f);
  shift.narrow(2, 168, 32).fill_(39.f);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    std::vector<at::Tensor> in = {at::randn({1, R, N, H, d}, o), at::randn({1, R, N, H, d}, o),
                                  at::randn({1, R, N, H, d}, o), bias, at::Tensor()};
    const at::Tensor grad = at::randn({1, R, N, H, d}, o);
    const auto ref64 = run(in, at::Tensor(), grad, at::kDouble, true);
    const auto naive = run(in, at::Tensor(), grad, dtype, true);
    in[3] = bias + shift;
    ASSERT_TRUE(at::equal(in[3].to(dtype).to(at::kFloat), in[3])) << "shifted bias not exact";
    const auto ours = run(in, at::Tensor(), grad, dtype, false);
    const std::vector<std::string> names = {"out", "dq", "dk", "dv", "dbias"};
    ASSERT_EQ(ours.size(), names.size());
    expect_finite_and_within_tolerance(ours, naive, ref64, names, 1e-3);
    expect_bitwise_repeat(in, at::Tensor(), grad, dtype, ours, names);
  }
}

// A padded crop's mask: the Hopper kernels add it only to the 64-key tiles that hold a masked
// key (the tile at each row's edge and those past it), up to two words of tile bits per row.
TEST_F(TriangleAttentionCuda, PaddedCropMasks) {
  for (int64_t N : {131, 200}) check_case({at::kBFloat16, N, 9, 4, 32, true, true, true, /*padded=*/true});
  check_case({at::kHalf, 2100, 3, 4, 32, true, true, true, /*padded=*/true});
}

// A mask that attends every key is no mask: every tile skips it, and the output and each
// gradient are bitwise those of the call without one (both add nothing to a real key's score).
TEST_F(TriangleAttentionCuda, AllAttendingMaskIsNoMask) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  for (int64_t N : {37, 200}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    const int64_t R = 5, H = 4, d = 32;
    const std::vector<at::Tensor> in = {at::randn({1, R, N, H, d}, o), at::randn({1, R, N, H, d}, o),
                                        at::randn({1, R, N, H, d}, o), at::randn({1, H, N, N}, o),
                                        at::randn({1, R, N, H, d}, o)};
    const at::Tensor grad = at::randn({1, R, N, H, d}, o);
    const auto with = run(in, at::ones({1, R, N}, o), grad, at::kBFloat16, false);
    const auto without = run(in, at::Tensor(), grad, at::kBFloat16, false);
    const char* names[] = {"out", "dq", "dk", "dv", "dbias", "dgate"};
    ASSERT_EQ(with.size(), without.size());
    for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(at::equal(with[i], without[i])) << names[i];
  }
}

// MSA column attention has no bias; single attention with pair bias has one row and no mask;
// an ungated use returns o itself. One row with a bias: its gradient is written in place, no
// chunk partials (both kernel sets: d = 24 and 32).
TEST_F(TriangleAttentionCuda, EveryVariant) {
  for (int64_t N : {1, 37, 131}) {
    check_case({at::kBFloat16, N, 1, 4, 32});
    check_case({at::kBFloat16, N, 11, 8, 32, /*bias=*/false, /*mask=*/true, /*gate=*/true});
    check_case({at::kBFloat16, N, 1, 16, 24, /*bias=*/true, /*mask=*/false, /*gate=*/true});
    check_case({at::kHalf, N, 5, 16, 64, /*bias=*/true, /*mask=*/true, /*gate=*/false});
    check_case({at::kBFloat16, N, 7, 4, 16, /*bias=*/false, /*mask=*/false, /*gate=*/false});
  }
}

// The model's ending-node layout: q, k, v, gate (and the bias) are transposed views into one
// projection [B, N, N, 4*H*d + extra]. extra = 0 (no bias), H or H + 1 makes the row stride
// a multiple of 8, of 4 only, or odd: each global-load width of the kernels and of the
// backward's first pass, at head dims that split its rows into 3 to 64 pieces (the sum over a
// row must not depend on how it is split). Output and every gradient equal those of contiguous
// copies, bitwise.
TEST_F(TriangleAttentionCuda, StridedViewsReadInPlace) {
  const int64_t N = 45, H = 4;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  for (const int64_t d : {24, 32, 48, 64}) {
    for (const int64_t extra : {int64_t{0}, H, H + 1}) {
      SCOPED_TRACE("d " + std::to_string(d) + ", row stride " + std::to_string(4 * H * d + extra));
      const at::Tensor proj = at::randn({1, N, N, 4 * H * d + extra}, o).requires_grad_(true);
      auto views = [&](const at::Tensor& t) {
        const at::Tensor qkvg = t.narrow(-1, 0, 4 * H * d).view({1, N, N, 4, H, d});
        std::vector<at::Tensor> v;
        for (int i = 0; i < 4; ++i) v.push_back(qkvg.select(3, i).transpose(1, 2));
        v.push_back(extra > 0 ? t.narrow(-1, 4 * H * d, H).permute({0, 3, 2, 1}) : at::Tensor());
        return v;
      };
      const std::vector<at::Tensor> in = views(proj);
      std::vector<at::Tensor> copies;
      for (const auto& t : in) copies.push_back(t.defined() ? t.detach().contiguous().requires_grad_(true) : t);
      const at::Tensor mask = (at::rand({1, N, N}, o.dtype(at::kFloat)) > 0.2).to(at::kFloat).transpose(1, 2);
      auto bias_of = [](const at::Tensor& b) { return b.defined() ? std::optional(b) : std::nullopt; };
      const at::Tensor out = triangle_attention(in[0], in[1], in[2], bias_of(in[4]), mask, in[3]);
      const at::Tensor ref = triangle_attention(copies[0], copies[1], copies[2], bias_of(copies[4]),
                                                mask.contiguous(), copies[3]);
      EXPECT_TRUE(at::equal(out, ref));
      const at::Tensor grad = at::randn_like(out);
      out.backward(grad);
      ref.backward(grad);
      const std::vector<at::Tensor> grads = views(proj.grad());
      const char* names[] = {"dq", "dk", "dv", "dgate", "dbias"};
      for (size_t i = 0; i < copies.size(); ++i) {
        if (!copies[i].defined()) continue;
        EXPECT_TRUE(at::equal(grads[i], copies[i].grad())) << names[i];
      }
    }
  }
}

// The projected op hands the kernels views of the projection and of its gradient: output and
// the projection's whole gradient must equal, bitwise, the plain op's on the same views (whose
// gradient autograd assembles from the parts). Widths: the model's (a multiple of 32), a
// multiple of 8 only, none (TMA cannot read rows of 1032 bytes in place: the kernels get
// copies, the gradient still lands in place) and odd (the op takes the plain op's path).
// Padding and, with a given bias, the bias columns get zero gradient (without one, the bias
// gradient's reduction writes the padding: 28, 10 and 4 columns take its 16-, 8- and 4-byte
// stores).
void check_projected(at::ScalarType dtype, int64_t N, int64_t width_extra) {
  const int64_t H = 4, d = 32, W = 4 * H * d + H + width_extra;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(dtype);
  const at::Tensor proj = at::randn({1, N, N, W}, o);
  const at::Tensor given = at::randn({1, H, N, N}, o);
  const at::Tensor mask = (at::rand({1, N, N}, o.dtype(at::kFloat)) > 0.2).to(at::kFloat);
  mask.select(1, 0).fill_(0);  // a fully masked row
  for (const bool transposed : {false, true}) {
    for (const bool own : {false, true}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " N=" + std::to_string(N) + " W=" + std::to_string(W) +
                   (transposed ? " ending" : " starting") + (own ? ", given bias" : ", own bias"));
      const at::Tensor p1 = proj.clone().requires_grad_(true), p2 = proj.clone().requires_grad_(true);
      const at::Tensor b1 = given.clone().requires_grad_(true), b2 = given.clone().requires_grad_(true);
      const at::Tensor out = triangle_attention_projected(p1, own ? std::optional(b1) : std::nullopt, mask, H, d,
                                                          transposed);
      const ProjectedOperands x = projected_operands(p2, H, d, transposed);
      const at::Tensor ref = triangle_attention(x.q, x.k, x.v, own ? b2 : x.bias, mask, x.gate);
      ASSERT_TRUE(at::equal(out, ref));
      if (transposed && W % 2 == 0) {
        EXPECT_TRUE(out.transpose(1, 2).is_contiguous());
      }
      const at::Tensor grad = at::randn_like(ref);
      out.backward(grad);
      ref.backward(grad);
      EXPECT_TRUE(at::equal(p1.grad(), p2.grad())) << "max diff " << (p1.grad() - p2.grad()).abs().max().item<float>();
      const int64_t zero_from = 4 * H * d + (own ? 0 : H);
      if (W > zero_from) {
        EXPECT_EQ(p1.grad().narrow(-1, zero_from, W - zero_from).abs().max().item<float>(), 0.f);
      }
      if (own) {
        EXPECT_TRUE(at::equal(b1.grad(), b2.grad()));
      }
      // Deterministic: again, bitwise.
      const at::Tensor p3 = proj.clone().requires_grad_(true);
      triangle_attention_projected(p3, own ? std::optional(given) : std::nullopt, mask, H, d, transposed).backward(grad);
      EXPECT_TRUE(at::equal(p1.grad(), p3.grad()));
    }
  }
}

TEST_F(TriangleAttentionCuda, ProjectedWritesTheProjectionGradientWhole) {
  for (const int64_t extra : {int64_t{28}, int64_t{10}, int64_t{4}, int64_t{0}, int64_t{1}})
    check_projected(at::kBFloat16, 37, extra);
  check_projected(at::kBFloat16, 130, 4);
  check_projected(at::kHalf, 70, 4);
  check_projected(at::kFloat, 37, 4);
}

TEST_F(TriangleAttentionCuda, ProjectedOnThePortableKernels) {
  const PortableKernelsScope portable;
  check_projected(at::kBFloat16, 37, 4);
  check_projected(at::kHalf, 130, 0);
}

}  // namespace
}  // namespace megafold::ops

namespace megafold::ops {
namespace {

// `megafold dev block --ops reference` relies on this: with the switch on, the op entry point is the
// ATen reference (bitwise), and off again it is the kernel (which rounds differently).
TEST_F(TriangleAttentionCuda, ReferenceSwitchRoutesToTheReference) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({1, 37, 37, 4, 32}, o), k = at::randn_like(q), v = at::randn_like(q);
  const at::Tensor bias = at::randn({1, 4, 37, 37}, o);
  const at::Tensor ref = triangle_attention_ref(q, k, v, bias, std::nullopt, std::nullopt);
  set_reference_only(true);
  const at::Tensor switched = triangle_attention(q, k, v, bias, std::nullopt, std::nullopt);
  set_reference_only(false);
  const at::Tensor kernel = triangle_attention(q, k, v, bias, std::nullopt, std::nullopt);
  EXPECT_TRUE(at::equal(switched, ref));
  EXPECT_FALSE(at::equal(kernel, ref));
}

}  // namespace
}  // namespace megafold::ops

#ifdef MEGAFOLD_CUDA
namespace megafold::ops {
namespace {

// The bias gradient's row chunks (host arithmetic, no GPU needed): every row in exactly one
// non-empty chunk, the partials within their cap beyond one chunk, none without a bias or for
// the fp32 kernels (which write the gradient directly), and the same count for the same shape
// (the sum's order, hence the gradient's bits, must not depend on anything else).
TEST(TriangleAttentionChunks, EveryRowInOneNonEmptyChunkWithinTheCap) {
  cuda::TriangleAttentionParams p{};
  const float dummy = 0.f;
  p.bias = &dummy;
  p.dtype = cuda::DType::kBFloat16;
  p.d = 32;
  for (const int64_t B : {1, 2})
    for (const int64_t H : {1, 4, 16})
      for (const int64_t N : {1, 2, 63, 64, 65, 131, 200, 384, 513, 768, 1024, 1536, 2048, 3001})
        for (const int64_t R : {int64_t{1}, int64_t{2}, int64_t{7}, N}) {
          p.B = B, p.H = H, p.N = N, p.R = R;
          const int64_t chunks = cuda::dbias_partials(p);
          SCOPED_TRACE("B=" + std::to_string(B) + " H=" + std::to_string(H) + " N=" + std::to_string(N) +
                       " R=" + std::to_string(R) + " chunks=" + std::to_string(chunks));
          ASSERT_GE(chunks, 1);
          ASSERT_LE(chunks, R);
          const int64_t rows_per = (R + chunks - 1) / chunks;
          EXPECT_LT((chunks - 1) * rows_per, R);  // the last chunk holds a row
          EXPECT_GE(chunks * rows_per, R);        // and every row is in one
          EXPECT_TRUE(chunks == 1 || chunks * B * H * N * N <= (int64_t{1} << 25));
          EXPECT_EQ(cuda::dbias_partials(p), chunks);
        }
  p.B = 1, p.H = 4, p.N = 384, p.R = 384;
  EXPECT_GT(cuda::dbias_partials(p), 1);  // a crop's rows are split (rounds of whole blocks)
  p.dtype = cuda::DType::kFloat32;
  EXPECT_EQ(cuda::dbias_partials(p), 0);
  p.dtype = cuda::DType::kBFloat16;
  p.bias = nullptr;
  EXPECT_EQ(cuda::dbias_partials(p), 0);
}

}  // namespace
}  // namespace megafold::ops
#endif
