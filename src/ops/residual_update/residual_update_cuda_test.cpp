// CUDA path of residual_update against the float64 reference (runs on a GPU host; skipped
// elsewhere): the output and the gradients of z, update and gate within the derived tolerance
// of the same-precision reference, repeated runs bitwise equal, for N in {1, 37, 131}, channel
// widths taking the 4-wide path (128, 36) and the scalar path (7), shared-row and
// shared-column dropout scales (the latter a strided slice, as the row-sharded stack passes
// it), with and without a gate, fp32 z with 16-bit or fp32 updates and 16-bit z.
#include <ATen/Context.h>

#include "ops/reference_mode.h"
#include "ops/residual_update/residual_update.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

enum class Scale { kNone, kRows, kColumns };

struct Case {
  int64_t B, N, c;
  at::ScalarType z_dtype, u_dtype;
  bool gate;
  Scale scale;
};

std::vector<at::Tensor> run(const std::vector<at::Tensor>& in, const at::Tensor& scale, const at::Tensor& grad,
                            at::ScalarType z_dtype, at::ScalarType u_dtype, bool gate, bool reference) {
  const at::Tensor z = in[0].to(z_dtype).detach().requires_grad_(true);
  const at::Tensor u = in[1].to(u_dtype).detach().requires_grad_(true);
  const at::Tensor g = in[2].to(u_dtype).detach().requires_grad_(true);
  set_reference_only(reference);
  const at::Tensor out = residual_update(z, u, gate ? std::optional<at::Tensor>(g) : std::nullopt,
                                         scale.defined() ? std::optional<at::Tensor>(scale) : std::nullopt);
  out.backward(grad.to(out.scalar_type()));
  set_reference_only(false);
  std::vector<at::Tensor> r = {out.detach(), z.grad(), u.grad()};
  if (gate) r.push_back(g.grad());
  return r;
}

void check_case(const Case& c) {
  SCOPED_TRACE("B=" + std::to_string(c.B) + " N=" + std::to_string(c.N) + " c=" + std::to_string(c.c) + " z " +
               c10::toString(c.z_dtype) + " update " + c10::toString(c.u_dtype) + (c.gate ? " gated" : "") +
               (c.scale == Scale::kRows ? " row-shared scale" : c.scale == Scale::kColumns ? " column-shared scale" : ""));
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const std::vector<int64_t> shape = {c.B, c.N, c.N, c.c};
  const std::vector<at::Tensor> in = {at::randn(shape, o) * 3 + 1, at::randn(shape, o), at::rand(shape, o)};
  at::Tensor scale;
  if (c.scale == Scale::kRows) scale = at::bernoulli(at::full({c.B, 1, c.N, c.c}, 0.75, o)) / 0.75;
  // Drawn for more rows than z has and sliced: a strided view, as a sharded stack slices it.
  if (c.scale == Scale::kColumns)
    scale = (at::bernoulli(at::full({c.B, c.N + 3, 1, c.c}, 0.75, o)) / 0.75).narrow(1, 2, c.N);
  const at::Tensor grad = at::randn(shape, o);
  const auto ref64 = run(in, scale.defined() ? scale.to(at::kDouble) : scale, grad, at::kDouble, at::kDouble, c.gate, true);
  const auto naive = run(in, scale, grad, c.z_dtype, c.u_dtype, c.gate, true);
  const auto ours = run(in, scale, grad, c.z_dtype, c.u_dtype, c.gate, false);
  std::vector<std::string> names = {"out", "dz", "d_update"};
  if (c.gate) names.push_back("d_gate");
  expect_matches_references(ours, run(in, scale, grad, c.z_dtype, c.u_dtype, c.gate, false), naive, ref64, names);
}

class ResidualUpdateCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    fresh_seed();
  }
};

TEST_F(ResidualUpdateCuda, ModelCasesFp32StreamBf16Updates) {
  for (int64_t n : {1, 37, 131})
    for (Scale s : {Scale::kNone, Scale::kRows, Scale::kColumns}) {
      check_case({1, n, 128, at::kFloat, at::kBFloat16, true, s});
      check_case({1, n, 128, at::kFloat, at::kBFloat16, false, s});
    }
}

TEST_F(ResidualUpdateCuda, OtherWidthsAndDtypes) {
  for (Scale s : {Scale::kRows, Scale::kColumns}) {
    check_case({2, 37, 36, at::kFloat, at::kHalf, true, s});
    check_case({2, 19, 7, at::kFloat, at::kBFloat16, true, s});  // scalar path
    check_case({2, 19, 36, at::kFloat, at::kFloat, true, s});
    check_case({1, 37, 128, at::kBFloat16, at::kBFloat16, true, s});
    check_case({1, 23, 12, at::kHalf, at::kHalf, false, s});
  }
}

// The forked form's backward adds its two handles' gradients in its pass: every output and
// gradient bitwise the plain op's when autograd sums them (the same fp32 or 16-bit rounding of
// the sum), for fp32 z with a gated bf16 update and a row-shared scale, 16-bit z, and the
// scalar path.
TEST_F(ResidualUpdateCuda, ForkedFormSumsBothHandlesGradientsBitwise) {
  struct Forked {
    int64_t N, c;
    at::ScalarType z_dtype, u_dtype;
  };
  for (const Forked& f : {Forked{37, 128, at::kFloat, at::kBFloat16}, Forked{37, 128, at::kBFloat16, at::kBFloat16},
                          Forked{19, 7, at::kFloat, at::kHalf}}) {
    SCOPED_TRACE("N=" + std::to_string(f.N) + " c=" + std::to_string(f.c) + " z " + c10::toString(f.z_dtype));
    const auto o = at::TensorOptions().device(at::kCUDA);
    const std::vector<int64_t> shape = {1, f.N, f.N, f.c};
    const at::Tensor keep = at::bernoulli(at::full({1, 1, f.N, f.c}, 0.75, o.dtype(at::kFloat))) / 0.75;
    const std::vector<at::Tensor> in = {at::randn(shape, o.dtype(f.z_dtype)) * 3, at::randn(shape, o.dtype(f.u_dtype)),
                                        at::rand(shape, o.dtype(f.u_dtype))};
    expect_forked_sums_gradients(
        [&](const std::vector<at::Tensor>& x) { return residual_update(x[0], x[1], x[2], keep); },
        [&](const std::vector<at::Tensor>& x) { return residual_update_forked(x[0], x[1], x[2], keep); }, in,
        at::randn(shape, o.dtype(f.z_dtype)), at::randn(shape, o.dtype(f.z_dtype)));
    // A handle without a gradient (it comes undefined, not as zeros to add): the other's alone.
    for (const int used : {0, 1}) {
      const std::vector<at::Tensor> a = fresh_leaves(in), b = fresh_leaves(in);
      const at::Tensor g = at::randn(shape, o.dtype(f.z_dtype));
      residual_update(a[0], a[1], a[2], keep).backward(g);
      const auto [y1, y2] = residual_update_forked(b[0], b[1], b[2], keep);
      (used == 0 ? y1 : y2).backward(g);
      for (size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(at::equal(a[i].grad(), b[i].grad())) << used << " " << i;
    }
  }
}

}  // namespace
}  // namespace megafold::ops
