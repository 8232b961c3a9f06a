#pragma once
// Test helpers: fresh random inputs, a float64 finite-difference gradient check, and the
// derived-tolerance comparison of DESIGN.md (a low-precision result may be at most ~2x as far
// from the float64 reference as the naive computation in that precision, plus a tiny atol).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/check.h"

namespace megafold::testing {

// A seed that differs per run (printed on failure) so inputs are fresh but reproducible:
// MEGAFOLD_TEST_SEED=<printed seed> replays it.
uint64_t fresh_seed();

// Max-abs error of a relative to b, over max-abs of b (0 when b is all zeros).
double rel_error(const at::Tensor& a, const at::Tensor& b);

// The message of the Exception (a megafold::Error unless named: an op's c10::Error) that f
// throws ("" when it throws none).
template <typename Exception = megafold::Error, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "";
}

// Checks the autograd gradient of sum(f(inputs) * w) for a random w against central finite
// differences, for every input that requires grad. Inputs must be float64.
void expect_gradients_match_finite_differences(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
    std::vector<at::Tensor> inputs, double eps = 1e-6);

// The derived tolerance (DESIGN.md): a low-precision result may be about 2x as far from the
// float64 reference as the same computation done naively in that precision. The claim is
// checked on the root-mean-square error, rms(out - ref64) <= 2 rms(naive - ref64) + atol,
// which concentrates over a tensor's elements, so fresh random inputs do not make it flaky.
// The largest error is held to max|out - ref64| <= 4 max|naive - ref64| + atol: the max over
// one draw is an extreme value whose spread alone crossed 2x on unchanged kernels (2.0-2.5x,
// in one or two of the 16 CUDA tests per H200 run), while a wrong element or tile is off by
// the values' own scale, far beyond either bound.
void expect_within_derived_tolerance(const at::Tensor& out, const at::Tensor& naive,
                                     const at::Tensor& ref64, double atol, const char* what);

// A CUDA op against its references, output by output (names[i] for outputs[i]): each within
// the derived tolerance of expect_within_derived_tolerance (atol 1e-5 of the float64 output's
// largest magnitude), same shape, and bitwise equal to a repeated run (`again`).
void expect_matches_references(const std::vector<at::Tensor>& ours, const std::vector<at::Tensor>& again,
                               const std::vector<at::Tensor>& naive, const std::vector<at::Tensor>& ref64,
                               const std::vector<std::string>& names);

// An op's passthrough form against its plain form, on inputs `in` (x first; each becomes a
// fresh leaf that requires grad): `passthrough` returns (y, x passed through) for a residual
// stream. y must equal the plain op's bitwise and the second output must be x's own storage;
// with dy along y and g along the passthrough, x's gradient must be the plain op's dx + g
// within the two ways of rounding the sum (once in a kernel, or dx rounded and then the sum;
// equal where autograd forms it), and every other gradient bitwise the plain op's.
void expect_passthrough_adds_residual_gradient(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& plain,
    const std::function<std::tuple<at::Tensor, at::Tensor>(const std::vector<at::Tensor>&)>& passthrough,
    const std::vector<at::Tensor>& in, const at::Tensor& dy, const at::Tensor& g);

// An op's forked form (its result twice, for a stream with two consumers) against its plain
// form, on inputs `in` (each becomes a fresh leaf that requires grad): both results bitwise the
// plain one's, the second sharing the first's storage, and with g1, g2 along them every input's
// gradient bitwise the plain op's when its result takes both (autograd's sum, which the forked
// op's backward forms the same way).
void expect_forked_sums_gradients(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& plain,
    const std::function<std::tuple<at::Tensor, at::Tensor>(const std::vector<at::Tensor>&)>& forked,
    const std::vector<at::Tensor>& in, const at::Tensor& g1, const at::Tensor& g2);

// Overwrites every parameter of m with N(0, scale^2) draws. Zero-initialised output
// projections make fresh blocks the identity; tests that need the whole computation to act
// randomise first.
void randomise_parameters(torch::nn::Module& m, double scale = 0.3);

// Copies every parameter and buffer of `from` into `to` (same architecture): two instances
// that compute the same function (the Fourier embedding's random features are buffers).
void copy_state(torch::nn::Module& from, torch::nn::Module& to);

// p's gradient, or zeros where backward gave it none.
at::Tensor grad_or_zeros(const at::Tensor& p);

// Copies of `in` as new leaves that require grad (two runs of an op that must not share graphs).
std::vector<at::Tensor> fresh_leaves(const std::vector<at::Tensor>& in);

// While alive, ops keep to their portable (sm_80) kernels (ops::set_portable_kernels_only);
// switched back off however the scope ends.
class PortableKernelsScope {
 public:
  explicit PortableKernelsScope(bool on = true);
  ~PortableKernelsScope();
  PortableKernelsScope(const PortableKernelsScope&) = delete;
  PortableKernelsScope& operator=(const PortableKernelsScope&) = delete;
};

// t's values in a contiguous view whose data starts one element past the start of a larger
// buffer (4 bytes for fp32): not 16-byte aligned, as a parameter sliced from a flat buffer.
at::Tensor misaligned(const at::Tensor& t);

// run(in) with each of the inputs numbered in `shifted` replaced by misaligned(input) gives
// bitwise the results of run(in), on the default kernels and on the portable (sm_80) ones.
void expect_misaligned_inputs_change_nothing(
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& run,
    const std::vector<at::Tensor>& in, const std::vector<size_t>& shifted);

// The bytes of a file, gunzipped when compressed (zlib passes plain files through).
std::string gunzip(const std::string& path);

// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `bytes` to the file `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& bytes) const;
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace megafold::testing
