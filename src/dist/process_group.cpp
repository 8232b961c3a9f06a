#include "dist/process_group.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#include "core/check.h"

namespace megafold::dist {
namespace {

int parse_int(const std::string& name, const std::string& value) {
  try {
    size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error("environment variable " + name + "='" + value + "' is not an integer");
}


}  // namespace

DistEnv dist_env(const std::function<std::optional<std::string>(const std::string&)>& getenv_in) {
  const auto getenv = getenv_in ? getenv_in : [](const std::string& n) -> std::optional<std::string> {
    const char* v = std::getenv(n.c_str());
    return v != nullptr && *v != '\0' ? std::optional<std::string>(v) : std::nullopt;
  };
  DistEnv e;
  auto read = [&](const char* torchrun, const char* slurm, int& out) {
    if (auto v = getenv(torchrun)) {
      out = parse_int(torchrun, *v);
    } else if (auto s = getenv(slurm)) {
      out = parse_int(slurm, *s);
    }
  };
  read("WORLD_SIZE", "SLURM_NTASKS", e.world);
  read("RANK", "SLURM_PROCID", e.rank);
  read("LOCAL_RANK", "SLURM_LOCALID", e.local_rank);
  if (auto v = getenv("MASTER_ADDR")) e.master_addr = *v;
  if (auto v = getenv("MASTER_PORT")) e.master_port = parse_int("MASTER_PORT", *v);
  MF_CHECK(e.world >= 1, "WORLD_SIZE (or SLURM_NTASKS) must be >= 1, got ", e.world);
  MF_CHECK(e.rank >= 0 && e.rank < e.world, "RANK (or SLURM_PROCID) must lie in [0, ", e.world, "), got ", e.rank);
  MF_CHECK(e.master_port > 0 && e.master_port < 65536, "MASTER_PORT must be a TCP port, got ", e.master_port);
  return e;
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

namespace {

c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world) {
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

}  // namespace

ProcessGroup::ProcessGroup(const DistEnv& env) : env_(env), impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = env.world;
  impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  impl_->group = gloo_group(impl_->store, env.rank, env.world);
}

ProcessGroup::ProcessGroup(const DistEnv& env, std::unique_ptr<Impl> impl) : env_(env), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

std::unique_ptr<ProcessGroup> ProcessGroup::split(int size) {
  MF_CHECK(size >= 1 && env_.world % size == 0, "cannot split ", env_.world, " ranks into groups of ", size);
  DistEnv env = env_;
  env.rank = env_.rank % size;
  env.world = size;
  auto impl = std::make_unique<Impl>();
  // The groups rendezvous under their own prefix of the job's store.
  impl->store = c10::make_intrusive<c10d::PrefixStore>("group" + std::to_string(size) + "." +
                                                           std::to_string(env_.rank / size),
                                                       impl_->store);
  impl->group = gloo_group(impl->store, env.rank, env.world);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(env, std::move(impl)));
}

std::function<void()> ProcessGroup::all_reduce_sum_async(const at::Tensor& x) {
  MF_CHECK(x.device().is_cpu() && x.is_contiguous(), "all_reduce_sum_async: takes a contiguous host tensor");
  std::vector<at::Tensor> t{x};
  c10::intrusive_ptr<c10d::Work> work = impl_->group->allreduce(t);
  return [work] { work->wait(); };
}

double ProcessGroup::average(double v) {
  std::vector<at::Tensor> t{at::full({1}, v, at::TensorOptions().dtype(at::kDouble))};
  impl_->group->allreduce(t)->wait();
  return t[0].item<double>() / env_.world;
}

void ProcessGroup::barrier() { impl_->group->barrier()->wait(); }

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& x) {
  std::vector<at::Tensor> in{x.to(at::kCPU).contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < env_.world; ++r) out[0].push_back(at::empty_like(in[0]));
  impl_->group->allgather(out, in)->wait();
  for (at::Tensor& t : out[0]) t = t.to(x.device());
  return out[0];
}

at::Tensor ProcessGroup::all_to_all(const at::Tensor& x) {
  MF_CHECK(x.dim() >= 1 && x.size(0) == env_.world, "all_to_all: dim 0 must be the world size ", env_.world,
           ", got ", x.size(0));
  at::Tensor in = x.to(at::kCPU).contiguous();
  at::Tensor out = at::empty_like(in);
  std::vector<int64_t> splits(env_.world, 1);
  impl_->group->alltoall_base(out, in, splits, splits)->wait();
  return out.to(x.device());
}

void ProcessGroup::all_reduce_sum(at::Tensor& x) {
  std::vector<at::Tensor> t{x.to(at::kCPU).contiguous()};
  impl_->group->allreduce(t)->wait();
  x.copy_(t[0]);
}

}  // namespace megafold::dist
