// Launch variables of data-parallel jobs: torchrun's, Slurm's, the single-process default, and
// errors that name the variable; the gradient all-reduce's bucketing during backward.
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "core/check.h"
#include "dist/grad_sync.h"
#include "dist/process_group.h"
#include "model/recompute.h"
#include "testing.h"

namespace megafold::dist {
namespace {

DistEnv from(const std::map<std::string, std::string>& vars) {
  return dist_env([&](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

TEST(DistEnv, TorchrunSlurmAndSingleProcess) {
  const DistEnv single = from({});
  EXPECT_EQ(single.world, 1);
  EXPECT_EQ(single.rank, 0);
  const DistEnv t = from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
                          {"MASTER_PORT", "23456"}});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.master_addr, "node7");
  EXPECT_EQ(t.master_port, 23456);
  const DistEnv s = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "5"}});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world, 16);
  EXPECT_EQ(s.local_rank, 5);
  // torchrun's variables win over Slurm's (torchrun inside a Slurm allocation).
  EXPECT_EQ(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "32"}}).world, 2);
}

TEST(DistEnv, BadValuesNameTheVariable) {
  auto error_of = [](const std::map<std::string, std::string>& vars) {
    try {
      from(vars);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({{"WORLD_SIZE", "two"}}).find("WORLD_SIZE='two' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK (or SLURM_PROCID) must lie in [0, 2)"),
            std::string::npos);
  EXPECT_NE(error_of({{"MASTER_PORT", "70000"}}).find("MASTER_PORT must be a TCP port"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "0"}}).find("must be >= 1"), std::string::npos);
}

DistEnv one_rank() {
  DistEnv env;
  env.master_port = 20000 + static_cast<int>(getpid() % 20000);
  return env;
}

// GradientSync on a one-rank group (the sum over ranks is the identity, so the result must be
// each parameter's own gradient, divided): buckets of one parameter each launch while backward
// runs; a parameter that a checkpointed segment's nested backward and the outer backward both
// reach gets two contributions, the second after its bucket was launched, and is summed again
// from .grad. On a GPU the buckets stay there and NCCL sums them. Multi-rank sums are covered
// by the training tests (tests/python).
void check_gradient_sync(c10::Device device) {
  testing::fresh_seed();
  ProcessGroup group(one_rank(), device);
  EXPECT_EQ(group.backend(), device.is_cuda() ? "NCCL" : "Gloo");
  const auto o = at::TensorOptions().device(device);
  const at::Tensor w_inner = at::randn({3, 4}, o).requires_grad_(), w_shared = at::randn({4}, o).requires_grad_();
  const at::Tensor w_outer = at::randn({4, 2}, o).requires_grad_();
  const std::vector<at::Tensor> params = {w_inner, w_shared, w_outer};
  const at::Tensor x = at::randn({5, 3}, o);
  auto loss = [&] {
    const model::TensorFn segment = [&](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{at::tanh(at::matmul(in[0], w_inner) * w_shared)};
    };
    const at::Tensor h = model::checkpointed(segment, {x.clone().requires_grad_()})[0];
    return (at::matmul(h + w_shared, w_outer)).pow(2).sum();
  };
  loss().backward();
  std::vector<at::Tensor> expected;
  for (const auto& p : params) {
    expected.push_back(p.grad().clone() / 2.0);
    p.mutable_grad().reset();
  }
  GradientSync sync(group, params, {2.0, 2.0, 2.0}, /*bucket_bytes=*/1);
  for (int step = 0; step < 2; ++step) {  // state is reset between steps
    for (const auto& p : params) p.mutable_grad().reset();
    sync.prepare();
    loss().backward();
    sync.finish();
    EXPECT_EQ(sync.buckets(), 3);
    EXPECT_EQ(sync.launched_during_backward(), 3);
    EXPECT_EQ(sync.late_buckets(), 1);  // w_shared
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].grad().device(), device);
      EXPECT_TRUE(at::equal(params[i].grad(), expected[i])) << i;
    }
  }
}

TEST(GradientSync, LaunchesDuringBackwardAndResumsLateBuckets) { check_gradient_sync(c10::kCPU); }

TEST(GradientSyncGpu, BucketsStayOnTheGpuAndNcclSumsThem) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  check_gradient_sync(c10::Device(c10::kCUDA, 0));
}

// The collectives on CUDA tensors of a one-rank NCCL group run on the tensors themselves and
// return them unchanged (gather: one copy; all-to-all: the identity; sum: the identity); a
// strided input is made contiguous, host tensors still go over Gloo.
TEST(ProcessGroupGpu, NcclCarriesCudaTensorsInPlace) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  testing::fresh_seed();
  ProcessGroup group(one_rank(), c10::Device(c10::kCUDA, 0));
  const at::Tensor x = at::randn({1, 5, 7}, at::TensorOptions().device(at::kCUDA));
  EXPECT_TRUE(group.in_place(x));
  EXPECT_TRUE(group.in_place(x.cpu()));
  const std::vector<at::Tensor> gathered = group.all_gather(x.transpose(1, 2));
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(gathered[0].is_cuda());
  EXPECT_TRUE(at::equal(gathered[0], x.transpose(1, 2)));
  EXPECT_TRUE(at::equal(group.all_to_all(x), x));
  at::Tensor y = x.clone();
  group.all_reduce_sum(y);
  EXPECT_TRUE(at::equal(y, x));
  at::Tensor h = x.cpu();
  group.all_reduce_sum(h);
  EXPECT_TRUE(at::equal(h, x.cpu()));
  EXPECT_NEAR(group.average(2.5), 2.5, 0.0);
  // A ring pass to itself of a channel-major view: the memory goes over as it lies.
  const at::Tensor cm = x.permute({0, 2, 1});
  const at::Tensor got = at::empty_like(cm);
  group.shift_async(cm, got, 0, 0)();
  EXPECT_TRUE(at::equal(got, cm));
  // A split group of one rank has its own NCCL communicator.
  const std::unique_ptr<ProcessGroup> sub = group.split(1);
  EXPECT_EQ(sub->backend(), "NCCL");
  EXPECT_TRUE(at::equal(sub->all_to_all(x), x));
}

TEST(ProcessGroup, CpuJobsUseGloo) {
  testing::fresh_seed();
  ProcessGroup group(one_rank());
  EXPECT_EQ(group.backend(), "Gloo");
  EXPECT_TRUE(group.in_place(at::zeros({2})));
  const at::Tensor x = at::randn({2, 3, 4}).permute({2, 0, 1}), got = at::empty_like(x);
  group.shift_async(x, got, 0, 0)();
  EXPECT_TRUE(at::equal(got, x));
  EXPECT_THROW(group.shift_async(x, at::empty({5}), 0, 0), Error);
}

}  // namespace
}  // namespace megafold::dist
