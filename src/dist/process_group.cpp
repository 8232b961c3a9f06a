#include "dist/process_group.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#include "core/check.h"
#include "dist/nccl_group.h"

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
  c10::intrusive_ptr<c10d::Backend> nccl;  // null without a CUDA device
  int device = -1;                         // the CUDA device NCCL is bound to

  // NCCL over its own prefix of the store (its keys would clash with Gloo's otherwise).
  void add_nccl(int rank, int world) {
    if (device >= 0) nccl = nccl_group(c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank, world, device);
  }
  c10d::Backend& for_tensor(const at::Tensor& x) {
    if (x.is_cuda() && nccl) return *nccl;
    return *group;
  }
  ~Impl() {
    if (nccl) nccl->shutdown();  // ProcessGroupNCCL warns when destroyed without it
  }
};

namespace {

c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world) {
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

}  // namespace

ProcessGroup::ProcessGroup(const DistEnv& env, c10::Device device) : env_(env), impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = env.world;
  impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  impl_->group = gloo_group(impl_->store, env.rank, env.world);
  impl_->device = device.is_cuda() ? device.index() : -1;
  impl_->add_nccl(env.rank, env.world);
}

std::string ProcessGroup::backend() const { return impl_->nccl ? "NCCL" : "Gloo"; }

bool ProcessGroup::in_place(const at::Tensor& x) const { return x.is_cpu() || (x.is_cuda() && impl_->nccl); }

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
  impl->device = impl_->device;
  impl->add_nccl(env.rank, env.world);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(env, std::move(impl)));
}

std::function<void()> ProcessGroup::all_reduce_sum_async(const at::Tensor& x) {
  MF_CHECK(in_place(x) && x.is_contiguous(), "all_reduce_sum_async: takes a contiguous host tensor",
           impl_->nccl ? " or CUDA tensor" : "", ", got one on ", x.device().str());
  std::vector<at::Tensor> t{x};
  c10::intrusive_ptr<c10d::Work> work = impl_->for_tensor(x).allreduce(t);
  return [work] { work->wait(); };
}

double ProcessGroup::average(double v) {
  std::vector<at::Tensor> t{at::full({1}, v, at::TensorOptions().dtype(at::kDouble))};
  impl_->group->allreduce(t)->wait();
  return t[0].item<double>() / env_.world;
}

void ProcessGroup::barrier() { impl_->group->barrier()->wait(); }

// The tensor a collective runs on: x itself where that is in place, else a host copy
// (results go back to x's device).
namespace {
at::Tensor operand(const ProcessGroup& g, const at::Tensor& x) {
  return g.in_place(x) ? x.contiguous() : x.to(at::kCPU).contiguous();
}
}  // namespace

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& x) {
  std::vector<at::Tensor> in{operand(*this, x)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < env_.world; ++r) out[0].push_back(at::empty_like(in[0]));
  impl_->for_tensor(in[0]).allgather(out, in)->wait();
  for (at::Tensor& t : out[0]) t = t.to(x.device());
  return out[0];
}

at::Tensor ProcessGroup::all_to_all(const at::Tensor& x) {
  MF_CHECK(x.dim() >= 1 && x.size(0) == env_.world, "all_to_all: dim 0 must be the world size ", env_.world,
           ", got ", x.size(0));
  at::Tensor in = operand(*this, x);
  at::Tensor out = at::empty_like(in);
  std::vector<int64_t> splits(env_.world, 1);
  impl_->for_tensor(in).alltoall_base(out, in, splits, splits)->wait();
  return out.to(x.device());
}

void ProcessGroup::all_reduce_sum(at::Tensor& x) {
  std::vector<at::Tensor> t{operand(*this, x)};
  impl_->for_tensor(t[0]).allreduce(t)->wait();
  if (!t[0].is_same(x)) x.copy_(t[0]);
}

std::function<void()> ProcessGroup::shift_async(const at::Tensor& x, const at::Tensor& out, int to, int from) {
  MF_CHECK(x.is_non_overlapping_and_dense() && out.is_non_overlapping_and_dense() && x.numel() == out.numel() &&
               x.scalar_type() == out.scalar_type(),
           "shift_async: x and out must be dense tensors of one size and dtype");
  // An all-to-all with one non-empty block each way: point-to-point on both backends, with no
  // pairing of sends and receives to get wrong (for P = 2 left and right are the same rank).
  auto flat = [](const at::Tensor& t) { return t.as_strided({t.numel()}, {1}); };
  at::Tensor send = in_place(x) ? flat(x) : flat(x).to(at::kCPU);
  at::Tensor recv = in_place(out) ? flat(out) : at::empty({out.numel()}, send.options());
  std::vector<int64_t> send_splits(env_.world, 0), recv_splits(env_.world, 0);
  send_splits[to] = x.numel();
  recv_splits[from] = out.numel();
  c10::intrusive_ptr<c10d::Work> work =
      impl_->for_tensor(send).alltoall_base(recv, send, recv_splits, send_splits);
  const bool staged = !in_place(out);
  return [work, send, recv, out, flat, staged] {
    work->wait();
    if (staged) flat(out).copy_(recv);
  };
}

}  // namespace megafold::dist
