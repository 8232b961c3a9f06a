// CUDA path of layernorm_linear against the float64 reference (runs on a GPU host; skipped
// elsewhere): output and every gradient (x, LayerNorm scale and shift, weight, bias) at most
// ~2x as far from float64 as the reference computed in the same precision, for the model's
// autocast case (fp32 x and parameters, bf16 products) and for plain 16-bit inputs; widths
// that take each store and load path; repeated backward bitwise equal.
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

#include "core/autocast.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

struct Case {
  int64_t n;               // x is [1, n, n, 128], as the pair representation
  int64_t c_out;
  bool bias;
  at::ScalarType dtype;    // inputs' dtype; kFloat means fp32 inputs under bf16 autocast
};

std::vector<at::Tensor> run(const std::vector<at::Tensor>& in, const at::Tensor& grad, at::ScalarType dtype,
                            bool autocast, bool reference) {
  std::vector<at::Tensor> x;
  for (const auto& t : in) x.push_back(t.defined() ? t.to(dtype).detach().requires_grad_(true) : t);
  const std::optional<at::Tensor> bias = x[4].defined() ? std::optional(x[4]) : std::nullopt;
  at::Tensor out;
  {
    const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
    out = reference ? layernorm_linear_ref(x[0], x[1], x[2], x[3], bias) : layernorm_linear(x[0], x[1], x[2], x[3], bias);
  }
  out.backward(grad.to(out.scalar_type()));
  std::vector<at::Tensor> r = {out.detach()};
  for (const auto& t : x)
    if (t.defined()) r.push_back(t.grad());
  return r;
}

void check_case(const Case& c) {
  const bool autocast = c.dtype == at::kFloat;
  SCOPED_TRACE("n=" + std::to_string(c.n) + " c_out=" + std::to_string(c.c_out) + (c.bias ? " bias " : " ") +
               (autocast ? "fp32 under bf16 autocast" : c10::toString(c.dtype)));
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  // Rows with an offset and a spread (LayerNorm must remove both), one constant row.
  at::Tensor x = at::randn({1, c.n, c.n, 128}, o) * (at::rand({1, c.n, c.n, 1}, o) * 4 + 0.1) +
                 at::randn({1, c.n, c.n, 1}, o) * 3;
  x.view({-1, 128}).select(0, 0).fill_(0.7);
  const std::vector<at::Tensor> in = {x, 1 + 0.5 * at::randn({128}, o), 0.5 * at::randn({128}, o),
                                      at::randn({c.c_out, 128}, o) / std::sqrt(128.0),
                                      c.bias ? at::randn({c.c_out}, o) : at::Tensor()};
  const at::Tensor grad = at::randn({1, c.n, c.n, c.c_out}, o);
  const auto ref64 = run(in, grad, at::kDouble, false, true);
  const auto naive = run(in, grad, c.dtype == at::kFloat ? at::kFloat : c.dtype, autocast, true);
  const auto ours = run(in, grad, c.dtype, autocast, false);
  std::vector<std::string> names = {"y", "dx", "d_ln_w", "d_ln_b", "dw"};
  if (c.bias) names.push_back("dbias");
  expect_matches_references(ours, run(in, grad, c.dtype, autocast, false), naive, ref64, names);
}

class LayerNormLinearCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    fresh_seed();
  }
};

TEST_F(LayerNormLinearCuda, ModelCaseUnderAutocast) {
  for (int64_t n : {1, 37, 131, 384}) check_case({n, 640, false, at::kFloat});
  check_case({37, 516, false, at::kFloat});  // triangle attention's q, k, v, g and bias projection
  check_case({37, 1024, false, at::kFloat});  // the pair transition's: two weight panels
}

TEST_F(LayerNormLinearCuda, SixteenBitInputsWidthsAndBias) {
  for (at::ScalarType t : {at::kBFloat16, at::kHalf}) {
    check_case({131, 640, true, t});
    check_case({37, 516, true, t});   // rows 8-byte aligned
    check_case({37, 130, false, t});  // rows 4-byte aligned, a partial tile
    check_case({17, 8, true, t});
    check_case({23, 1030, true, t});  // two panels of 576 and 454 features, rows 4-byte aligned
  }
}

// Many weight-gradient chunks (M = 509^2 rows: 102 chunks of 2560 rows; 253^2: 251 of 256),
// each ending mid-block, and feature tiles cut short (520 and 136 are not multiples of 64).
TEST_F(LayerNormLinearCuda, ManyRowsAndChunks) {
  check_case({509, 520, true, at::kBFloat16});
  check_case({253, 136, false, at::kFloat});
}

// The portable (mma.sync, sm_80+) kernels on a GPU that has its own (an H100/H200 runs the
// sm_90a ones): what A100/L40S/RTX users run, tested on whatever GPU runs the suite.
TEST_F(LayerNormLinearCuda, PortableKernelsOnAnyGpu) {
  const PortableKernelsScope portable;
  check_case({131, 640, false, at::kFloat});
  check_case({37, 516, true, at::kBFloat16});
  check_case({23, 1030, true, at::kHalf});
}

// LayerNorm parameters and a bias sliced from larger buffers (not 16-byte aligned; the kernels
// read them as float4 / float2): the same bits as aligned copies, Hopper and portable kernels.
TEST_F(LayerNormLinearCuda, MisalignedParametersGiveTheSameResult) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const std::vector<at::Tensor> in = {at::randn({1, 37, 37, 128}, o), 1 + 0.5 * at::randn({128}, o),
                                      0.5 * at::randn({128}, o), at::randn({516, 128}, o) / std::sqrt(128.0),
                                      at::randn({516}, o)};
  const at::Tensor grad = at::randn({1, 37, 37, 516}, o);
  expect_misaligned_inputs_change_nothing(
      [&](const std::vector<at::Tensor>& x) { return run(x, grad, at::kFloat, true, false); }, in, {1, 2, 4});
}

TEST_F(LayerNormLinearCuda, OtherWidthsUseTheReference) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor x = at::randn({5, 64}, o), g = at::randn({64}, o), b = at::randn({64}, o), w = at::randn({32, 64}, o);
  EXPECT_TRUE(at::equal(layernorm_linear(x, g, b, w, std::nullopt), layernorm_linear_ref(x, g, b, w, std::nullopt)));
}

}  // namespace
}  // namespace megafold::ops
