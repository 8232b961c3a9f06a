// CUDA path of swiglu_transition (the fused forward for c = 128 / 384; on H100/H200 the fused
// backward for c = 128, elsewhere backward through the LayerNorm+Linear and swiglu kernels)
// against the float64 reference (runs on a GPU host; skipped elsewhere): the update and every
// gradient (x, LayerNorm scale and shift, w_in, w_out) at most ~2x as far from float64 as the
// reference in the same precision, for the pair (c = 128, N^2 rows up to N = 384) and single
// (c = 384: the kernel from 8192 rows, the unfused ops below) widths under autocast, 16-bit
// inputs, constant rows (zero variance), one- and three-chunk hidden widths, and hidden widths
// the fused kernels do not take; repeated backward bitwise equal; the portable kernels likewise
// on a GPU that has sm_90a ones. The forward's extra memory stays below half the hidden layer's
// size.
#include <ATen/Context.h>

#include "core/autocast.h"
#include "ops/reference_mode.h"
#include "ops/swiglu_transition/swiglu_transition.h"
#include "testing.h"
#include "core/device.h"

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
    const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
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
  at::Tensor x = at::randn({c.rows, c.c}, o) * 2 + 0.3;
  x.narrow(0, 0, std::min<int64_t>(c.rows, 3)).fill_(0.7);  // constant rows: LayerNorm gives ln_b
  const std::vector<at::Tensor> in = {x, 1 + 0.3 * at::randn({c.c}, o),
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
  for (int64_t n : {1, 37, 131, 384}) check_case({n * n, 128, 512, at::kFloat});
  // The single width's kernel from swiglu_transition_fused_min_rows (8192) rows on, 131 blocks
  // and a partial one; fewer rows (a crop's N) run the unfused ops.
  check_case({8231, 384, 1536, at::kFloat});
  check_case({509, 384, 1536, at::kFloat});
  check_case({1, 384, 1536, at::kFloat});
}

TEST_F(SwigluTransitionCuda, OneAndThreeChunkHiddenWidths) {
  check_case({131, 128, 64, at::kFloat});
  check_case({37 * 37, 128, 192, at::kBFloat16});
  // 301 row tiles: blocks of the persistent kernels take two or three, with one or three
  // chunks a tile against rings of two and three slots.
  check_case({196 * 196, 128, 64, at::kFloat});
  check_case({196 * 196, 128, 192, at::kBFloat16});
}

// The portable (mma.sync, sm_80+) kernels on a GPU that has its own (an H100/H200 runs the
// sm_90a ones): what A100/L40S/RTX users run.
// LayerNorm parameters sliced from larger buffers (not 16-byte aligned; read as float4 /
// float2): the same bits as aligned copies, Hopper and portable kernels.
TEST_F(SwigluTransitionCuda, MisalignedLayerNormParametersGiveTheSameResult) {
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const std::vector<at::Tensor> in = {at::randn({300, 128}, o), 1 + 0.3 * at::randn({128}, o), 0.3 * at::randn({128}, o),
                                      at::randn({1024, 128}, o) / std::sqrt(128.0),
                                      at::randn({128, 512}, o) / std::sqrt(512.0)};
  const at::Tensor grad = at::randn({300, 128}, o);
  expect_misaligned_inputs_change_nothing(
      [&](const std::vector<at::Tensor>& x) { return run(x, grad, at::kFloat, true, false); }, in, {1, 2});
}

TEST_F(SwigluTransitionCuda, PortableKernels) {
  const PortableKernelsScope portable;
  check_case({131 * 131, 128, 512, at::kFloat});
  check_case({37 * 37, 128, 192, at::kBFloat16});
}

TEST_F(SwigluTransitionCuda, SixteenBitInputsAndUnfusedWidths) {
  for (at::ScalarType t : {at::kBFloat16, at::kHalf}) {
    check_case({37 * 37, 128, 512, t});
    check_case({8231, 384, 1536, t});
    check_case({131, 128, 40, t});  // hidden width not a chunk multiple: unfused kernels
    check_case({101, 24, 12, t});   // h not a multiple of 8: one feature per thread in swiglu
  }
}

// The passthrough form adds the residual stream's gradient inside the fused backward kernel
// (H100/H200; elsewhere after the backward): fp32 x under autocast and bf16 x, within the
// roundings of the two ways of forming the sum; both kernel sets.
TEST_F(SwigluTransitionCuda, PassthroughAddsTheResidualGradient) {
  for (const bool portable : {false, true}) {
    const PortableKernelsScope scope(portable);
    for (const at::ScalarType t : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(std::string(portable ? "portable kernels " : "") + c10::toString(t));
      const bool autocast = t == at::kFloat;
      const auto o = at::TensorOptions().device(at::kCUDA).dtype(t);
      const int64_t rows = 37 * 37, c = 128, h = 512;
      const std::vector<at::Tensor> in = {at::randn({rows, c}, o) * 2 + 0.3, 1 + 0.3 * at::randn({c}, o),
                                          0.3 * at::randn({c}, o), at::randn({2 * h, c}, o) / std::sqrt(double(c)),
                                          at::randn({c, h}, o) / std::sqrt(double(h))};
      auto plain = [&](const std::vector<at::Tensor>& x) {
        const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
        return swiglu_transition(x[0], x[1], x[2], x[3], x[4]);
      };
      auto passthrough = [&](const std::vector<at::Tensor>& x) {
        const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
        return swiglu_transition_passthrough(x[0], x[1], x[2], x[3], x[4]);
      };
      expect_passthrough_adds_residual_gradient(plain, passthrough, in, at::randn({rows, c}, o),
                                                at::randn({rows, c}, o) * 3);
    }
  }
}

// The fused forward allocates its output (and 16-bit weight copies) only; the unfused
// composition held the 2h-wide projection and the h-wide hidden layer as well.
TEST_F(SwigluTransitionCuda, ForwardKeepsTheHiddenLayerOnChip) {
  const int64_t rows = 131 * 131, c = 128, h = 512;
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor x = at::randn({rows, c}, o).requires_grad_(true);
  const at::Tensor ln_w = at::ones({c}, o).requires_grad_(true), ln_b = at::zeros({c}, o).requires_grad_(true);
  const at::Tensor w_in = (at::randn({2 * h, c}, o) / std::sqrt(double(c))).requires_grad_(true);
  const at::Tensor w_out = (at::randn({c, h}, o) / std::sqrt(double(h))).requires_grad_(true);
  const c10::Device dev = x.device();
  auto forward_extra_bytes = [&](bool reference) {
    set_reference_only(reference);
    megafold::synchronize(dev);
    megafold::reset_peak_memory(dev);
    const double base = megafold::peak_memory_gb(dev);
    at::Tensor out;
    {
      const AutocastScope scope(at::kCUDA, true, at::kBFloat16);
      out = swiglu_transition(x, ln_w, ln_b, w_in, w_out);
    }
    megafold::synchronize(dev);
    set_reference_only(false);
    return (megafold::peak_memory_gb(dev) - base) * 1e9;
  };
  const double hidden_bytes = double(rows) * h * 2;
  EXPECT_LT(forward_extra_bytes(false), hidden_bytes / 2);
  EXPECT_GT(forward_extra_bytes(true), 3 * hidden_bytes);  // the check can see the difference
}

}  // namespace
}  // namespace megafold::ops
