#include "testing.h"

#include <torch/autograd.h>
#include <c10/core/GradMode.h>

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "ops/reference_mode.h"

namespace megafold::testing {

uint64_t fresh_seed() {
  // MEGAFOLD_TEST_SEED replays the seed a failing run printed. A value that is not a whole
  // decimal seed stops the run: replaying some other seed silently would test something else.
  const char* replay = std::getenv("MEGAFOLD_TEST_SEED");
  uint64_t seed = 0;
  if (replay == nullptr || *replay == '\0') {
    seed = static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  } else {
    const char* end = replay + std::strlen(replay);
    const auto [stop, error] = std::from_chars(replay, end, seed);
    if (error != std::errc() || stop != end) {
      std::fprintf(stderr, "MEGAFOLD_TEST_SEED=%s is not a seed (a decimal number below 2^64, as a test prints)\n",
                   replay);
      std::exit(2);
    }
  }
  at::manual_seed(seed);
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

double rel_error(const at::Tensor& a, const at::Tensor& b) {
  const double denom = b.abs().max().item<double>();
  const double err = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return denom > 0 ? err / denom : err;
}

void expect_gradients_match_finite_differences(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
    std::vector<at::Tensor> inputs, double eps) {
  for (auto& x : inputs) ASSERT_EQ(x.scalar_type(), at::kDouble);
  const at::Tensor out = f(inputs);
  const at::Tensor w = at::randn_like(out);
  const at::Tensor loss = (out * w).sum();
  std::vector<at::Tensor> wrt;
  for (auto& x : inputs)
    if (x.requires_grad()) wrt.push_back(x);
  const auto grads = torch::autograd::grad({loss}, wrt, {}, false, false, true);
  size_t gi = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    const at::Tensor analytic = grads[gi++];
    at::Tensor numeric = at::zeros_like(inputs[i]);
    c10::NoGradGuard no_grad;
    at::Tensor flat = inputs[i].view({-1});
    at::Tensor nflat = numeric.view({-1});
    for (int64_t k = 0; k < flat.numel(); ++k) {
      const double orig = flat[k].item<double>();
      flat[k] = orig + eps;
      const double up = (f(inputs) * w).sum().item<double>();
      flat[k] = orig - eps;
      const double down = (f(inputs) * w).sum().item<double>();
      flat[k] = orig;
      nflat[k] = (up - down) / (2 * eps);
    }
    ASSERT_TRUE(analytic.defined()) << "input " << i << " got no gradient";
    // Central differences: truncation O(eps^2) and round-off O(1e-16 / eps) ~ 1e-10.
    const double scale = std::max(1.0, numeric.abs().max().item<double>());
    const double err = (analytic - numeric).abs().max().item<double>();
    EXPECT_LT(err, 1e-6 * scale) << "gradient of input " << i << " differs from finite differences";
  }
}

void expect_within_derived_tolerance(const at::Tensor& out, const at::Tensor& naive,
                                     const at::Tensor& ref64, double atol, const char* what) {
  ASSERT_FALSE(at::isnan(out).any().item<bool>()) << what << ": NaN in output";
  if (ref64.numel() == 0) return;
  const at::Tensor e = out.to(at::kDouble) - ref64, e_naive = naive.to(at::kDouble) - ref64;
  const double rms = e.square().mean().sqrt().item<double>();
  const double rms_naive = e_naive.square().mean().sqrt().item<double>();
  const double max = e.abs().max().item<double>(), max_naive = e_naive.abs().max().item<double>();
  EXPECT_LE(rms, 2.0 * rms_naive + atol)
      << what << ": rms error " << rms << " vs naive low-precision rms error " << rms_naive;
  EXPECT_LE(max, 4.0 * max_naive + atol)
      << what << ": largest error " << max << " vs naive low-precision largest error " << max_naive;
}

std::vector<at::Tensor> fresh_leaves(const std::vector<at::Tensor>& in) {
  std::vector<at::Tensor> x;
  for (const at::Tensor& t : in) x.push_back(t.detach().clone().requires_grad_(true));
  return x;
}

PortableKernelsScope::PortableKernelsScope(bool on) { ops::set_portable_kernels_only(on); }
PortableKernelsScope::~PortableKernelsScope() { ops::set_portable_kernels_only(false); }

void expect_passthrough_adds_residual_gradient(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& plain,
    const std::function<std::tuple<at::Tensor, at::Tensor>(const std::vector<at::Tensor>&)>& passthrough,
    const std::vector<at::Tensor>& in, const at::Tensor& dy, const at::Tensor& g) {
  const std::vector<at::Tensor> a = fresh_leaves(in), b = fresh_leaves(in);
  const at::Tensor y_plain = plain(a);
  y_plain.backward(dy.to(y_plain.scalar_type()));
  const auto [y, through] = passthrough(b);
  EXPECT_TRUE(at::equal(y, y_plain)) << "y differs from the plain op's";
  EXPECT_EQ(through.data_ptr(), b[0].data_ptr()) << "the second output is not x's storage";
  torch::autograd::backward({y, through}, {dy.to(y.scalar_type()), g.to(through.scalar_type())});
  const at::Tensor dx = b[0].grad(), dx_plain = a[0].grad();
  const at::Tensor sum = dx_plain + g.to(dx_plain.scalar_type());
  // Unit roundoff u: rounding v + g once (a kernel's multiply-add) and rounding v, then the sum,
  // differ by at most u|v + g| + u|v| + u|round(v) + g| <= 2u (|round(v) + g| + |round(v)|) (1 + 2u).
  const int digits = dx.scalar_type() == at::kDouble  ? 53
                     : dx.scalar_type() == at::kFloat ? 24
                     : dx.scalar_type() == at::kHalf  ? 11
                                                      : 8;
  const double u = std::ldexp(1.0, -digits);
  const at::Tensor r = dx_plain.to(at::kDouble), s64 = r + g.to(at::kDouble);
  const at::Tensor excess = (dx.to(at::kDouble) - sum.to(at::kDouble)).abs() - 2.01 * u * (s64.abs() + r.abs());
  EXPECT_LE(excess.max().item<double>(), 0.0) << "dx is further from the plain dx + g than two roundings";
  for (size_t i = 1; i < in.size(); ++i)
    if (a[i].grad().defined()) EXPECT_TRUE(at::equal(a[i].grad(), b[i].grad())) << "gradient of input " << i;
}

void expect_forked_sums_gradients(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& plain,
    const std::function<std::tuple<at::Tensor, at::Tensor>(const std::vector<at::Tensor>&)>& forked,
    const std::vector<at::Tensor>& in, const at::Tensor& g1, const at::Tensor& g2) {
  const std::vector<at::Tensor> a = fresh_leaves(in), b = fresh_leaves(in);
  const at::Tensor y = plain(a);
  torch::autograd::backward({y, y}, {g1.to(y.scalar_type()), g2.to(y.scalar_type())});
  const auto [y1, y2] = forked(b);
  EXPECT_TRUE(at::equal(y1, y)) << "the first result differs from the plain op's";
  EXPECT_TRUE(at::equal(y2, y)) << "the second result differs from the plain op's";
  EXPECT_EQ(y2.data_ptr(), y1.data_ptr()) << "the second result is not the first's storage";
  torch::autograd::backward({y1, y2}, {g1.to(y1.scalar_type()), g2.to(y2.scalar_type())});
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(a[i].grad().defined(), b[i].grad().defined()) << "gradient of input " << i;
    if (a[i].grad().defined()) EXPECT_TRUE(at::equal(a[i].grad(), b[i].grad())) << "gradient of input " << i;
  }
}

void expect_matches_references(const std::vector<at::Tensor>& ours, const std::vector<at::Tensor>& again,
                               const std::vector<at::Tensor>& naive, const std::vector<at::Tensor>& ref64,
                               const std::vector<std::string>& names) {
  ASSERT_EQ(ours.size(), names.size());
  ASSERT_EQ(again.size(), names.size());
  EXPECT_EQ(ours[0].scalar_type(), naive[0].scalar_type()) << names[0];
  for (size_t i = 0; i < ours.size(); ++i) {
    ASSERT_TRUE(ours[i].defined()) << names[i];
    EXPECT_EQ(ours[i].sizes(), ref64[i].sizes()) << names[i];
    const double atol = 1e-5 * ref64[i].abs().max().item<double>();
    expect_within_derived_tolerance(ours[i], naive[i], ref64[i], atol, names[i].c_str());
    EXPECT_TRUE(at::equal(ours[i], again[i])) << names[i] << " not reproducible";
  }
}

void randomise_parameters(torch::nn::Module& m, double scale) {
  c10::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.copy_(at::randn_like(p) * scale);
}

void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  for (const auto& [src, dst] : {std::pair{from.parameters(), to.parameters()}, std::pair{from.buffers(), to.buffers()}}) {
    ASSERT_EQ(src.size(), dst.size());
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
}

at::Tensor grad_or_zeros(const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); }

at::Tensor misaligned(const at::Tensor& t) {
  const at::Tensor flat = at::empty({t.numel() + 1}, t.options()).narrow(0, 1, t.numel());
  return flat.view(t.sizes()).copy_(t);
}

void expect_misaligned_inputs_change_nothing(
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& run,
    const std::vector<at::Tensor>& in, const std::vector<size_t>& shifted) {
  std::vector<at::Tensor> moved = in;
  for (size_t i : shifted) {
    moved[i] = misaligned(in[i]);
    ASSERT_NE(reinterpret_cast<uintptr_t>(moved[i].data_ptr()) % 16, 0u) << "input " << i;
  }
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable kernels" : "default kernels");
    const PortableKernelsScope scope(portable);
    const std::vector<at::Tensor> want = run(in), got = run(moved);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "result " << i;
  }
}

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string out;
  if (f == nullptr) return out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  gzclose(f);
  return out;
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("megafold_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& bytes) const {
  const std::string p = (path_ / name).string();
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

}  // namespace megafold::testing
