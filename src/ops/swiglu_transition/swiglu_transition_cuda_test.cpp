// CUDA path of swiglu_transition (LayerNorm+Linear kernels where c = 128, the fused gated
// activation, cuBLAS for the output projection) against the float64 reference (runs on a GPU
// host; skipped elsewhere): the update and every gradient (x, LayerNorm scale and shift, w_in,
// w_out) at most ~2x as far from float64 as the reference in the same precision, for the pair
// (c = 128) and single (c = 384) widths under autocast, 16-bit inputs, and a hidden width that
// takes the scalar path; repeated backward bitwise equal.
#include <ATen/Context.h>

#include "model/autocast.h"
#include "ops/reference_mode.h"
#include "ops/swiglu_transition/swiglu_transition.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

struct Case {
  int64_t rows, c, h;     // x [rows, c], hidden h
  at::ScalarType dtype;   // inputs' dtype; kFloat means fp32 inputs under bf16 autocast
};

std::vector<at::Tensor> run(const std::vector<at::Tensor>& in, const at::Tensor& grad, at::ScalarType dtype,
                            bool autocast, bool reference) {
  std::vector<at::Tensor> x;
  for (const auto& t : in) x.push_back(t.to(dtype).detach().requires_grad_(true));
  set_reference_only(reference);
  at::Tensor out;
  {
    const model::AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
    out = swiglu_transition(x[0], x[1], x[2], x[3], x[4]);
  }
  out.backward(grad.to(out.scalar_type()));
  set_reference_only(false);
  std::vector<at::Tensor> r = {out.detach()};
  for (const auto& t : x) r.push_back(t.grad());
  return r;
}

void check_case(const Case& c) {
  const bool autocast = c.dtype == at::kFloat;
  SCOPED_TRACE("rows=" + std::to_string(c.rows) + " c=" + std::to_string(c.c) + " h=" + std::to_string(c.h) + " " +
               (autocast ? "fp32 under bf16 autocast" : c10::toString(c.dtype)));
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const std::vector<at::Tensor> in = {at::randn({c.rows, c.c}, o) * 2 + 0.3, 1 + 0.3 * at::randn({c.c}, o),
                                      0.3 * at::randn({c.c}, o), at::randn({2 * c.h, c.c}, o) / std::sqrt(double(c.c)),
                                      at::randn({c.c, c.h}, o) / std::sqrt(double(c.h))};
  const at::Tensor grad = at::randn({c.rows, c.c}, o);
  const auto ref64 = run(in, grad, at::kDouble, false, true);
  const auto naive = run(in, grad, c.dtype, autocast, true);
  const auto ours = run(in, grad, c.dtype, autocast, false);
  const std::vector<std::string> names = {"out", "dx", "d_ln_w", "d_ln_b", "dw_in", "dw_out"};
  expect_matches_references(ours, run(in, grad, c.dtype, autocast, false), naive, ref64, names);
}

class SwigluTransitionCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    fresh_seed();
  }
};

TEST_F(SwigluTransitionCuda, PairAndSingleWidthsUnderAutocast) {
  for (int64_t rows : {1, 37 * 37, 131 * 131}) check_case({rows, 128, 512, at::kFloat});
  check_case({509, 384, 1536, at::kFloat});
}

TEST_F(SwigluTransitionCuda, SixteenBitInputsAndScalarWidths) {
  for (at::ScalarType t : {at::kBFloat16, at::kHalf}) {
    check_case({37 * 37, 128, 512, t});
    check_case({101, 24, 12, t});  // h not a multiple of 8: one feature per thread
  }
}

}  // namespace
}  // namespace megafold::ops
