#include "core/trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>
#include <set>

#include "core/check.h"

namespace megafold {

namespace {

using torch::profiler::impl::ActivityType;

std::set<ActivityType> activities(const c10::Device& device) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (device.is_cuda()) a.insert(ActivityType::CUDA);
  return a;
}

}  // namespace

Trace::Trace(const c10::Device& device) {
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities(device));
  torch::autograd::profiler::enableProfiler(config, activities(device));
  active_ = true;
}

Trace::~Trace() {
  if (active_) torch::autograd::profiler::disableProfiler();
}

void Trace::save(const std::string& path) {
  MF_CHECK(active_, "the trace was already saved");
  active_ = false;
  const auto result = torch::autograd::profiler::disableProfiler();
  MF_CHECK(result != nullptr, "the profiler returned no trace for ", path);
  const std::string tmp = path + ".tmp";
  result->save(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MF_CHECK(!ec, "could not write the trace ", path, ": ", ec.message());
}

}  // namespace megafold
