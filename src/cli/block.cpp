// `megafold dev block`: forward and forward + backward time and peak memory of one Pairformer block (AF3 Alg.
// 17) of this C++ model, as the trainer runs it (training mode with dropout, bf16 autocast on
// GPU with fp32 residual streams), at a given token count. --ops reference runs every op on
// its ATen reference instead of the CUDA kernels: the before/after of a kernel. With several
// ranks (--nproc P, or a launcher's) the pair rows are sharded over them as under
// `train --pair-shards P` (one GPU per rank, NCCL); a step's time is the slowest rank's.
// Steps are timed on the device's timeline (CUDA events on a GPU, as bench/pairformer_block.py
// times its baselines): nothing waits between forward and backward.
// --graph times the step as one CUDA graph replay: what the GPU needs without the host's
// dispatch and launch time, against the same step launched op by op (the dropout masks are a
// kernel of the step's seed, so the graph replays them too; every replay draws the captured
// step's masks).
// host_ms is the host's time to issue a step (forward and backward returned, nothing waited
// for): near the step's device time, the GPU waits for the host in places. --trace writes
// one more step's timeline of host operators and kernels (bench/trace_gaps.py reads it).
#include <ATen/Context.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randn_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "cli/args.h"
#include "cli/local_ranks.h"
#include "core/autocast.h"
#include "core/check.h"
#include "dist/process_group.h"
#include "dist/shard.h"
#include "model/pairformer.h"
#include "ops/reference_mode.h"
#include "core/device.h"
#include "core/trace.h"

#ifdef MEGAFOLD_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace megafold::cli {

int block_main(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"n", "N", "tokens (default 384)"},
      {"steps", "K", "timed steps after the warm-up (default 20)"},
      {"warmup", "K", "untimed steps first (default 5)"},
      {"ops", "kernel|reference", "CUDA kernels where registered, or the ATen references (default kernel)"},
      {"pair-path", "plain|rows", "the pair stack's plain path, or its row-sharded one on one rank (default plain)"},
      {"dropout", "on|off", "the training step's dropout (default on)"},
      {"masks", "on|off", "pass token and pair masks of ones (default off: the trainer passes none for a crop "
                          "without padding)"},
      {"graph", "", "time the step as one CUDA graph replay, captured after the warm-up"},
      {"trace", "FILE", "after the timed steps (with --graph: the warm-up), record one more step op by op: its host "
                        "operators and kernels (Chrome trace)"},
      {"device", "auto|cpu|cuda[:i]", "device (default auto; with several ranks, rank r takes cuda:LOCAL_RANK)"},
      {"nproc", "P", "local ranks sharding the pair rows (default: the launcher's ranks, or 1)"},
      {"seed", "N", "parameter and input seed (default 0)"},
      {"help", "", "show this help"},
  };
  const Args args(argv, specs);
  if (args.has("help")) {
    std::cout << usage("dev block",
                       "Time one Pairformer block (c_s 384, c_z 128, AF3 heads and widths) forward and "
                       "backward on random inputs and print one JSON line: median and min ms per step and "
                       "peak memory.",
                       specs);
    return 0;
  }
  if (args.has("nproc")) {
    const int64_t p = args.get_int("nproc", 1);
    MF_CHECK(p >= 1 && p <= 64, "--nproc must lie in [1, 64], got ", p);
    return run_local_ranks("dev block", static_cast<int>(p), without_nproc(argv));
  }
  const int64_t n = args.get_int("n", 384);
  const int64_t steps = args.get_int("steps", 20);
  const int64_t warmup = args.get_int("warmup", 5);
  MF_CHECK(n > 0 && steps > 0 && warmup >= 0, "--n and --steps must be > 0, --warmup >= 0");
  const std::string ops_mode = args.get("ops").value_or("kernel");
  MF_CHECK(ops_mode == "kernel" || ops_mode == "reference", "--ops must be kernel or reference, not '",
           ops_mode, "'");
  ops::set_reference_only(ops_mode == "reference");
  const std::string pair_path = args.get("pair-path").value_or("plain");
  MF_CHECK(pair_path == "plain" || pair_path == "rows", "--pair-path must be plain or rows, not '", pair_path, "'");
  const dist::DistEnv env = dist::dist_env();
  MF_CHECK(env.world == 1 || pair_path == "rows" || !args.get("pair-path"), "--pair-path plain runs on one rank, not ",
           env.world);
  c10::Device device = megafold::resolve_device(args.get("device").value_or("auto"));
  if (device.is_cuda() && env.world > 1) device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  megafold::make_current(device);
  std::unique_ptr<dist::ProcessGroup> group;
  dist::PairShard shard;  // unsharded on one rank: the collectives are identities
  if (env.world > 1) {
    group = std::make_unique<dist::ProcessGroup>(env, device);
    shard = dist::make_pair_shard(*group, n);
  }
  const bool rows = pair_path == "rows" || env.world > 1;
  const std::string dropout = args.get("dropout").value_or("on");
  MF_CHECK(dropout == "on" || dropout == "off", "--dropout must be on or off, not '", dropout, "'");
  const bool graph = args.has("graph");
  const std::string masks = args.get("masks").value_or("off");
  MF_CHECK(masks == "on" || masks == "off", "--masks must be on or off, not '", masks, "'");
  MF_CHECK(!graph || (device.is_cuda() && env.world == 1), "--graph needs one CUDA device");
  // The reference draws dropout masks on the host and copies them over, which a capture refuses.
  MF_CHECK(!graph || ops_mode == "kernel" || dropout == "off", "--graph --ops reference needs --dropout off");
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0));
  at::manual_seed(seed);  // parameters and the single track: the same on every rank

  const model::ModelConfig cfg;  // AF3 trunk widths
  model::PairformerBlock block(cfg);
  block->to(device);
  // Training mode; under the default memory plan (no recomputation) dropout is its only effect
  // on the block, so eval mode is the step without it.
  if (dropout == "on") block->train();
  else block->eval();
  const auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
  const at::Tensor s0 = at::randn({1, n, cfg.c_s}, f32).requires_grad_();
  const at::Tensor ds = at::randn_like(s0);
  // The inputs fill the crop: the trainer runs such a batch without masks (Batch::padded).
  const at::Tensor token_mask = masks == "on" ? at::ones({1, n}, f32) : at::Tensor();
  const at::Tensor pair_mask = masks == "on" ? at::ones({1, n, n}, f32) : at::Tensor();
  at::manual_seed(seed + 1 + static_cast<uint64_t>(env.rank));  // this rank's pair rows only
  const int64_t my_rows = shard.sharded() ? shard.rows : n;
  const at::Tensor z0 = at::randn({1, my_rows, n, cfg.c_z}, f32).requires_grad_();
  const at::Tensor dz = at::randn_like(z0);

  // Forward alone (recording for backward, as in training) and forward + backward.
  std::vector<double> fwd_ms, total_ms, host_ms;
  megafold::reset_peak_memory(device);
  const std::optional<std::string> trace_path = args.get("trace");
  const int64_t eager_steps = graph ? warmup : warmup + steps;
  // Marks on the device's timeline (the baselines in bench/pairformer_block.py time theirs the
  // same way): nothing waits between forward and backward, as in training.
  megafold::DeviceClock clock(device, 3);
  for (int64_t step = 0; step < eager_steps + (trace_path ? 1 : 0); ++step) {
    megafold::synchronize(device);
    if (group) group->barrier();  // the ranks start each step together
    std::optional<megafold::Trace> trace;
    if (step == eager_steps) trace.emplace(device);
    const auto host_start = std::chrono::steady_clock::now();
    clock.mark(0);
    {
      const AutocastScope autocast(device.type(), device.is_cuda(), at::kBFloat16);
      const model::PairformerState out =
          block->forward({s0, z0}, token_mask, pair_mask, step, rows ? &shard : nullptr);
      clock.mark(1);
      torch::autograd::backward({out.s, out.z}, {ds, dz});
    }
    clock.mark(2);
    const std::chrono::duration<double, std::milli> issued = std::chrono::steady_clock::now() - host_start;
    megafold::synchronize(device);
    if (trace) trace->save(*trace_path + (env.world > 1 ? "." + std::to_string(env.rank) : ""));
    if (step >= warmup && step < eager_steps) {
      fwd_ms.push_back(clock.elapsed_ms(0, 1));
      total_ms.push_back(clock.elapsed_ms(0, 2));
      host_ms.push_back(issued.count());
    }
    s0.mutable_grad().reset();
    z0.mutable_grad().reset();
    block->zero_grad(/*set_to_none=*/true);
  }
#ifdef MEGAFOLD_CUDA
  if (graph) {
    // Warm-up on the side stream the capture uses (cuBLAS handles, allocator), then one step
    // captured with fresh gradients (allocated in the graph's pool), then replays.
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
    auto step = [&](int64_t k) {
      const AutocastScope autocast(device.type(), true, at::kBFloat16);
      const model::PairformerState out = block->forward({s0, z0}, token_mask, pair_mask, k, rows ? &shard : nullptr);
      torch::autograd::backward({out.s, out.z}, {ds, dz});
    };
    {
      const c10::cuda::CUDAStreamGuard guard(side);
      step(0);
    }
    megafold::synchronize(device);
    s0.mutable_grad().reset();
    z0.mutable_grad().reset();
    block->zero_grad(/*set_to_none=*/true);
    at::cuda::CUDAGraph captured;
    {
      const c10::cuda::CUDAStreamGuard guard(side);
      captured.capture_begin();
      step(0);
      captured.capture_end();
    }
    for (int64_t k = 0; k < steps + 1; ++k) {
      megafold::synchronize(device);
      clock.mark(0);
      captured.replay();
      clock.mark(2);
      megafold::synchronize(device);
      if (k > 0) total_ms.push_back(clock.elapsed_ms(0, 2));  // the first replay uploads the graph
    }
  }
#endif
  double peak_gb = megafold::peak_memory_gb(device);
  if (group) {
    // Each step as long as its slowest rank; memory: the fullest rank.
    std::vector<double> mine = fwd_ms;
    mine.insert(mine.end(), total_ms.begin(), total_ms.end());
    mine.insert(mine.end(), host_ms.begin(), host_ms.end());
    mine.push_back(peak_gb);
    const std::vector<at::Tensor> all = group->all_gather(at::tensor(mine, at::TensorOptions().dtype(at::kDouble)));
    const at::Tensor worst = at::stack(all).amax(0);
    const std::vector<double> w(worst.data_ptr<double>(), worst.data_ptr<double>() + worst.numel());
    fwd_ms.assign(w.begin(), w.begin() + steps);
    total_ms.assign(w.begin() + steps, w.begin() + 2 * steps);
    host_ms.assign(w.begin() + 2 * steps, w.begin() + 3 * steps);
    peak_gb = w.back();
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const std::string impl = "megafold-" + ops_mode + (rows ? "-rows" : "") +
                           (env.world > 1 ? "-p" + std::to_string(env.world) : "") + (graph ? "-graph" : "") +
                           (dropout == "off" ? "-nodropout" : "") + (masks == "on" ? "-masks" : "");
  if (env.rank == 0) {
    // Under --graph the forward is not timed apart (one replay runs the whole step).
    char fwd[32] = "null", host[32] = "null";
    if (!fwd_ms.empty()) std::snprintf(fwd, sizeof(fwd), "%.3f", median(fwd_ms));
    if (!host_ms.empty()) std::snprintf(host, sizeof(host), "%.3f", median(host_ms));
    std::printf("{\"op\": \"pairformer_block\", \"impl\": \"%s\", \"n\": %lld, \"c_s\": %lld, \"c_z\": %lld, "
                "\"ranks\": %d, \"device\": \"%s\", \"fwd_ms\": %s, \"fwdbwd_ms\": %.3f, \"min_ms\": %.3f, "
                "\"host_ms\": %s, \"peak_gb\": %.3f}\n",
                impl.c_str(), static_cast<long long>(n), static_cast<long long>(cfg.c_s),
                static_cast<long long>(cfg.c_z), env.world, device.str().c_str(), fwd, median(total_ms),
                *std::min_element(total_ms.begin(), total_ms.end()), host, peak_gb);
  }
  if (group) group->barrier();
  return 0;
}

}  // namespace megafold::cli
