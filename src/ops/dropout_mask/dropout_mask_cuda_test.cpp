// dropout_mask's kernel against its reference (runs on a GPU host; skipped elsewhere): the same
// bits for both axes, row shards at awkward offsets, rates and sizes that leave partial blocks.
#include <ATen/ops/zeros.h>

#include <array>
#include <random>
#include <vector>

#include "ops/dropout_mask/dropout_mask.h"
#include "testing.h"

namespace megafold::ops {
namespace {
using namespace megafold::testing;

TEST(DropoutMaskCuda, KernelDrawsTheReferenceBits) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const auto gpu = at::TensorOptions().device(at::kCUDA);
  for (const auto& [B, n, N, c] : std::vector<std::array<int64_t, 4>>{{1, 384, 384, 128}, {2, 37, 131, 7}, {1, 1, 1, 1}})
    for (int64_t axis : {0, 1})
      for (double rate : {0.0, 0.15, 0.25}) {
        const int64_t offset = N > n ? rng() % (N - n + 1) : 0;
        const int64_t key = static_cast<int64_t>(seed + rng());
        const at::Tensor like = at::zeros({B, n, N, c}, gpu);
        const at::Tensor ours = dropout_mask(like, rate, axis, key, N, offset);
        ASSERT_TRUE(ours.is_cuda());
        EXPECT_TRUE(ours.cpu().equal(dropout_mask_ref(like.cpu(), rate, axis, key, N, offset)))
            << "B " << B << " n " << n << " N " << N << " c " << c << " axis " << axis << " rate " << rate;
      }
}

}  // namespace
}  // namespace megafold::ops
