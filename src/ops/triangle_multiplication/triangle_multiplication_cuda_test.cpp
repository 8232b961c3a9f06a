// CUDA path of triangle_multiplication (layout kernels + cuBLAS contraction, LayerNorm+Linear
// kernels) against the float64 reference (runs on a GPU host; skipped elsewhere): the update and
// every gradient (z, both LayerNorms, w_ab, w_g, w_o) at most ~2x as far from float64 as the
// reference computed in the same precision, outgoing and incoming, with padded tokens; the
// model's autocast case, plain 16-bit inputs, two batch elements and hidden widths that leave
// partial channel tiles; repeated backward bitwise equal.
#include <ATen/Context.h>

#include "core/autocast.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "ops/reference_mode.h"
#include "ops/triangle_multiplication/triangle_multiplication.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

struct Case {
  int64_t batch, n, c_z, c;  // z [batch, n, n, c_z], hidden c
  bool outgoing;
  at::ScalarType dtype;      // inputs' dtype; kFloat means fp32 inputs under bf16 autocast
};

// in: z, mask, ln_in_w, ln_in_b, w_ab, w_g, ln_out_w, ln_out_b, w_o. Returns the update, then
// the gradients of every input but the mask.
std::vector<at::Tensor> run(const std::vector<at::Tensor>& in, const at::Tensor& grad, at::ScalarType dtype,
                            bool autocast, bool reference, bool outgoing) {
  std::vector<at::Tensor> x;
  for (size_t i = 0; i < in.size(); ++i) x.push_back(i == 1 ? in[i].to(dtype) : in[i].to(dtype).detach().requires_grad_(true));
  set_reference_only(reference);
  at::Tensor out;
  {
    const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
    out = triangle_multiplication(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], outgoing);
  }
  out.backward(grad.to(out.scalar_type()));
  set_reference_only(false);
  std::vector<at::Tensor> r = {out.detach()};
  for (size_t i = 0; i < x.size(); ++i)
    if (i != 1) r.push_back(x[i].grad());
  return r;
}

void check_case(const Case& c) {
  const bool autocast = c.dtype == at::kFloat;
  SCOPED_TRACE("batch=" + std::to_string(c.batch) + " n=" + std::to_string(c.n) + " c_z=" + std::to_string(c.c_z) +
               " c=" + std::to_string(c.c) + (c.outgoing ? " outgoing " : " incoming ") +
               (autocast ? "fp32 under bf16 autocast" : c10::toString(c.dtype)));
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor z = at::randn({c.batch, c.n, c.n, c.c_z}, o) * 2 + 0.5;
  // Padded tokens at the end of each chain (one batch element keeps all when n is tiny).
  const at::Tensor tokens = (at::rand({c.batch, c.n}, o) > 0.15).to(at::kFloat);
  const at::Tensor mask = tokens.unsqueeze(2) * tokens.unsqueeze(1);
  const std::vector<at::Tensor> in = {z,
                                      mask,
                                      1 + 0.3 * at::randn({c.c_z}, o),
                                      0.3 * at::randn({c.c_z}, o),
                                      at::randn({4 * c.c, c.c_z}, o) / std::sqrt(double(c.c_z)),
                                      at::randn({c.c_z, c.c_z}, o) / std::sqrt(double(c.c_z)),
                                      1 + 0.3 * at::randn({c.c}, o),
                                      0.3 * at::randn({c.c}, o),
                                      at::randn({c.c_z, c.c}, o) / std::sqrt(double(c.c))};
  const at::Tensor grad = at::randn({c.batch, c.n, c.n, c.c_z}, o);
  const auto ref64 = run(in, grad, at::kDouble, false, true, c.outgoing);
  const auto naive = run(in, grad, c.dtype, autocast, true, c.outgoing);
  const auto ours = run(in, grad, c.dtype, autocast, false, c.outgoing);
  const std::vector<std::string> names = {"out", "dz", "d_ln_in_w", "d_ln_in_b", "dw_ab", "dw_g",
                                          "d_ln_out_w", "d_ln_out_b", "dw_o"};
  expect_matches_references(ours, run(in, grad, c.dtype, autocast, false, c.outgoing), naive, ref64, names);
}

class TriangleMultiplicationCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    fresh_seed();
  }
};

TEST_F(TriangleMultiplicationCuda, ModelCaseUnderAutocast) {
  for (int64_t n : {1, 36, 37, 131, 384})  // 36^2: the fused projection backward with a partial last block
    for (bool outgoing : {true, false}) check_case({1, n, 128, 128, outgoing, at::kFloat});
}

TEST_F(TriangleMultiplicationCuda, SixteenBitBatchesAndNarrowWidths) {
  for (at::ScalarType t : {at::kBFloat16, at::kHalf})
    for (bool outgoing : {true, false}) {
      check_case({2, 37, 128, 128, outgoing, t});  // planes of 1369 pairs: single-element layout passes
      check_case({2, 36, 128, 40, outgoing, t});   // 16-byte layout passes, two planes, partial channel tiles
      check_case({2, 17, 16, 40, outgoing, t});    // partial channel tiles; projections on the reference
    }
}

TEST_F(TriangleMultiplicationCuda, OperandsAreChannelMajorAndContractWithoutCopies) {
  for (int64_t n : {37, 36}) {  // single-element and 16-byte layout passes
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
    const at::Tensor proj = at::randn({1, n, n, 4 * 32 + 24}, o);  // a, b, their gates, an output gate of 24
    const auto [a, b, gate] = triangle_multiplication_operands(proj, std::nullopt, 32);
    EXPECT_TRUE(a.permute({0, 3, 1, 2}).is_contiguous());
    EXPECT_TRUE(b.permute({0, 3, 1, 2}).is_contiguous());
    EXPECT_EQ(gate.sizes(), (std::vector<int64_t>{1, n, n, 24}));
    const auto [a_ref, b_ref, gate_ref] = triangle_multiplication_operands_ref(proj, std::nullopt, 32);
    // One rounding from fp32 against the reference's two or three bf16 roundings (unit
    // roundoff 2^-8 each): within 4 units of the largest value.
    for (const auto& [ours, ref] : {std::pair{a, a_ref}, std::pair{b, b_ref}, std::pair{gate, gate_ref}})
      EXPECT_LE((ours.to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<float>(),
                4 * 0.00390625f * ref.to(at::kFloat).abs().max().item<float>());
    const at::Tensor t = triangle_multiplication_contract(a, b);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_TRUE(at::equal(t, triangle_multiplication_contract_ref(a, b)));
  }
}

// On H100/H200 the projection op makes a, b and the gate in layernorm_linear's epilogue and its
// backward recomputes the projection in one kernel: the outputs and the gradients of the
// LayerNorm and the weight must equal, bitwise, those of the two ops one after the other (the
// same roundings, so the same projection gradient); dz sums the same products in another order
// (chunk by chunk), so it is held to the float64 reference like the other CUDA tests and must
// repeat bitwise. Elsewhere the op is those two ops. The kernels take planes of a multiple of 8
// pairs: 36^2 rows (the last block's 16 rows and a warpgroup wholly past them), 40^2 with c 64
// and no output gate, two and three batch elements of 32^2 and 8^2 (the last block's second
// warpgroup in a batch element that does not exist); plain 16-bit and autocast inputs.
TEST_F(TriangleMultiplicationCuda, ProjectionEpilogueAndFusedBackwardEqualTheTwoOps) {
  struct Shape {
    int64_t batch, n, c, c_gate;
    at::ScalarType dtype;  // kFloat: fp32 under bf16 autocast
  };
  // 131^2 rows: 135 tiles of 128 with a partial last one, more than one per block of the persistent
  // backward on a GPU of up to 134 SMs; 196^2: 301 tiles, two or three per block, two steps a
  // tile against a ring of three slots.
  for (const Shape& sh : {Shape{1, 36, 128, 128, at::kFloat}, Shape{2, 32, 128, 128, at::kHalf},
                          Shape{1, 40, 64, 0, at::kBFloat16}, Shape{3, 8, 128, 64, at::kBFloat16},
                          Shape{1, 131, 128, 128, at::kFloat}, Shape{1, 196, 64, 0, at::kFloat}}) {
    SCOPED_TRACE("batch=" + std::to_string(sh.batch) + " n=" + std::to_string(sh.n) + " c=" + std::to_string(sh.c) +
                 " c_gate=" + std::to_string(sh.c_gate) + " " + c10::toString(sh.dtype));
    const auto o = at::TensorOptions().device(at::kCUDA).dtype(sh.dtype);
    const at::Tensor z = at::randn({sh.batch, sh.n, sh.n, 128}, o) * 2 + 0.5;
    const at::Tensor ln_w = 1 + 0.3 * at::randn({128}, o), ln_b = 0.3 * at::randn({128}, o);
    const at::Tensor w = at::randn({4 * sh.c + sh.c_gate, 128}, o) / std::sqrt(128.0);
    const at::Tensor mask = (at::rand({sh.batch, sh.n, sh.n}, o.dtype(at::kFloat)) > 0.2).to(at::kFloat);
    const auto out = o.dtype(sh.dtype == at::kFloat ? at::kBFloat16 : sh.dtype);
    const at::Tensor ga = at::randn({sh.batch, sh.n, sh.n, sh.c}, out), gb = at::randn_like(ga);
    const at::Tensor gg = at::randn({sh.batch, sh.n, sh.n, sh.c_gate}, out);
    enum class Path { kFused, kTwoOps, kReference };
    // a, b, gate, dz, d ln_w, d ln_b, dw; the reference path in `type` (float64: the inputs
    // and gradients widened).
    auto run = [&](Path path, at::ScalarType type) {
      std::vector<at::Tensor> x;  // fresh leaves: .to() of the same type is the tensor itself
      for (const at::Tensor& t : {z, ln_w, ln_b, w}) x.push_back(t.to(type).detach().requires_grad_(true));
      set_reference_only(path == Path::kReference);
      TriangleMultiplicationOperands r;
      {
        const AutocastScope scope(at::kCUDA, sh.dtype == at::kFloat && type != at::kDouble, at::kBFloat16);
        r = path == Path::kTwoOps
                ? triangle_multiplication_operands(layernorm_linear(x[0], x[1], x[2], x[3], std::nullopt), mask, sh.c)
                : triangle_multiplication_projection(x[0], mask, x[1], x[2], x[3], sh.c);
      }
      ((r.a * ga.to(r.a.scalar_type())).sum() + (r.b * gb.to(r.b.scalar_type())).sum() +
       (r.gate * gg.to(r.gate.scalar_type())).sum())
          .backward();
      set_reference_only(false);
      return std::vector<at::Tensor>{r.a, r.b, r.gate, x[0].grad(), x[1].grad(), x[2].grad(), x[3].grad()};
    };
    const auto fused = run(Path::kFused, sh.dtype), two_ops = run(Path::kTwoOps, sh.dtype);
    const char* names[] = {"a", "b", "gate", "dz", "d_ln_w", "d_ln_b", "dw"};
    for (size_t i = 0; i < fused.size(); ++i)
      if (i != 3) EXPECT_TRUE(at::equal(fused[i], two_ops[i])) << names[i];
    EXPECT_TRUE(fused[0].permute({0, 3, 1, 2}).is_contiguous());
    expect_matches_references({fused[3]}, {run(Path::kFused, sh.dtype)[3]}, {run(Path::kReference, sh.dtype)[3]},
                              {run(Path::kReference, at::kDouble)[3]}, {"dz"});
  }
}

// The passthrough form adds the residual stream's gradient inside the fused backward kernel
// (H100/H200; elsewhere after the backward): fp32 z under autocast and bf16 z, within the
// roundings of the two ways of forming the sum; both kernel sets, a padded plane.
TEST_F(TriangleMultiplicationCuda, ProjectionPassthroughAddsTheResidualGradient) {
  for (const bool portable : {false, true}) {
    const PortableKernelsScope scope(portable);
    for (const at::ScalarType t : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(std::string(portable ? "portable kernels " : "") + c10::toString(t));
      const bool autocast = t == at::kFloat;
      const auto o = at::TensorOptions().device(at::kCUDA).dtype(t);
      const int64_t n = 36, c = 128, c_gate = 128;  // a partial last block
      const at::Tensor mask = (at::rand({1, n, n}, o.dtype(at::kFloat)) > 0.2).to(at::kFloat);
      const std::vector<at::Tensor> in = {at::randn({1, n, n, 128}, o) * 2 + 0.3, 1 + 0.3 * at::randn({128}, o),
                                          0.3 * at::randn({128}, o),
                                          at::randn({4 * c + c_gate, 128}, o) / std::sqrt(128.0)};
      auto flat = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& g) {
        return at::cat({a.flatten(), b.flatten(), g.flatten()});
      };
      auto plain = [&](const std::vector<at::Tensor>& x) {
        const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
        const auto r = triangle_multiplication_projection(x[0], mask, x[1], x[2], x[3], c);
        return flat(r.a, r.b, r.gate);
      };
      auto passthrough = [&](const std::vector<at::Tensor>& x) {
        const AutocastScope scope(at::kCUDA, autocast, at::kBFloat16);
        const auto r = triangle_multiplication_projection_passthrough(x[0], mask, x[1], x[2], x[3], c);
        return std::tuple<at::Tensor, at::Tensor>{flat(r.a, r.b, r.gate), r.z};
      };
      const auto product = o.dtype(at::kBFloat16);
      expect_passthrough_adds_residual_gradient(plain, passthrough, in, at::randn({n * n * (2 * c + c_gate)}, product),
                                                at::randn({1, n, n, 128}, o) * 3);
    }
  }
}

}  // namespace
}  // namespace megafold::ops
