#include "model/chirality.h"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "data/residue_constants.h"

namespace megafold::model {
namespace {

using Vec = std::array<double, 3>;

Vec sub(const Vec& a, const Vec& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
double norm(const Vec& a) { return std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]); }

// (b - a) . ((c - a) x (d - a)) over the product of the three lengths.
double normalised_volume(const Vec& a, const Vec& b, const Vec& c, const Vec& d) {
  const Vec u = sub(b, a), v = sub(c, a), w = sub(d, a);
  const double det = u[0] * (v[1] * w[2] - v[2] * w[1]) - u[1] * (v[0] * w[2] - v[2] * w[0]) +
                     u[2] * (v[0] * w[1] - v[1] * w[0]);
  return det / std::max(norm(u) * norm(v) * norm(w), 1e-12);
}

struct Centre {
  std::array<int64_t, 4> atoms;
  float sign;
};

}  // namespace

ChiralCentres chiral_centres(const data::Batch& batch) {
  constexpr int S = data::kMaxAtomsPerToken;
  const at::Tensor pos = batch.ref.pos.to(at::kCPU, at::kDouble).contiguous();  // [B, N, S, 3]
  const at::Tensor has = batch.ref.mask.to(at::kCPU, at::kFloat).contiguous();  // [B, N, S]
  const at::Tensor element = batch.ref.element.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor real = batch.token_mask.to(at::kCPU, at::kFloat).contiguous();
  const auto p = pos.accessor<double, 4>();
  const auto m = has.accessor<float, 3>();
  const auto e = element.accessor<int64_t, 3>();
  const auto t = real.accessor<float, 2>();
  const int64_t B = pos.size(0), N = pos.size(1);
  std::vector<std::vector<Centre>> found(B);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n) {
      if (t[b][n] == 0) continue;
      auto at_slot = [&](int s) { return Vec{p[b][n][s][0], p[b][n][s][1], p[b][n][s][2]}; };
      auto heavy = [&](int s) { return m[b][n][s] > 0 && e[b][n][s] > 1; };
      std::array<std::vector<int>, S> bonded;
      for (int i = 0; i < S; ++i)
        for (int j = 0; j < S; ++j)
          if (i != j && heavy(i) && heavy(j) && norm(sub(at_slot(i), at_slot(j))) < kBondCutoff) bonded[i].push_back(j);
      // Two terminal neighbours of one element (phosphate OP1 / OP2, Val CG1 / CG2) are told
      // apart by name only, and deposited structures swap such names.
      auto equivalent_pair = [&](const std::vector<int>& nb) {
        for (size_t i = 0; i < nb.size(); ++i)
          for (size_t j = i + 1; j < nb.size(); ++j)
            if (bonded[nb[i]].size() == 1 && bonded[nb[j]].size() == 1 && e[b][n][nb[i]] == e[b][n][nb[j]])
              return true;
        return false;
      };
      for (int c = 0; c < S; ++c) {
        const std::vector<int>& nb = bonded[c];
        if ((nb.size() != 3 && nb.size() != 4) || equivalent_pair(nb)) continue;
        const double v = normalised_volume(at_slot(c), at_slot(nb[0]), at_slot(nb[1]), at_slot(nb[2]));
        if (std::abs(v) < kMinVolume) continue;
        const int64_t base = n * S;
        found[b].push_back({{base + c, base + nb[0], base + nb[1], base + nb[2]}, v > 0 ? 1.f : -1.f});
      }
    }
  int64_t K = 0;
  for (const auto& f : found) K = std::max<int64_t>(K, static_cast<int64_t>(f.size()));
  ChiralCentres out;
  out.atoms = at::zeros({B, K, 4}, at::kLong);
  out.sign = at::zeros({B, K}, at::kFloat);
  out.mask = at::zeros({B, K}, at::kFloat);
  auto a = out.atoms.accessor<int64_t, 3>();
  auto sg = out.sign.accessor<float, 2>();
  auto mk = out.mask.accessor<float, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (size_t k = 0; k < found[b].size(); ++k) {
      for (int i = 0; i < 4; ++i) a[b][k][i] = found[b][k].atoms[i];
      sg[b][k] = found[b][k].sign;
      mk[b][k] = 1;
    }
  return out;
}

at::Tensor inverted_fraction(const at::Tensor& x, const ChiralCentres& centres) {
  MF_CHECK(x.dim() == 3 && x.size(2) == 3, "inverted_fraction: x must be [R, N * 24, 3], got ", x.sizes());
  const int64_t B = centres.atoms.size(0), K = centres.atoms.size(1), R = x.size(0);
  MF_CHECK(B > 0 && R % B == 0, "inverted_fraction: ", R, " rows are not samples of ", B, " examples");
  const int64_t samples = R / B;
  const at::Tensor xd = x.detach().to(at::kDouble);
  const auto dev = xd.device();
  const at::Tensor idx = centres.atoms.to(dev).repeat_interleave(samples, 0).reshape({R, K * 4});  // [R, 4K]
  const at::Tensor q = at::gather(xd, 1, idx.unsqueeze(-1).expand({R, K * 4, 3})).reshape({R, K, 4, 3});
  const at::Tensor c = q.select(2, 0);
  const at::Tensor u = q.select(2, 1) - c, v = q.select(2, 2) - c, w = q.select(2, 3) - c;
  const at::Tensor volume = (u * at::cross(v, w, -1)).sum(-1);  // [R, K]
  const at::Tensor sign = centres.sign.to(dev, at::kDouble).repeat_interleave(samples, 0);
  const at::Tensor mask = centres.mask.to(dev, at::kDouble).repeat_interleave(samples, 0);
  const at::Tensor inverted = (volume * sign < 0).to(at::kDouble) * mask;
  return (inverted.sum(1) / mask.sum(1)).to(at::kFloat);  // 0 / 0 = NaN without centres
}

Reflected reflect_mirror_images(const at::Tensor& x, const ChiralCentres& centres, const at::Tensor& atom_mask) {
  const int64_t R = x.size(0), B = atom_mask.size(0);
  const at::Tensor flip = inverted_fraction(x, centres).gt(0.5).to(x.device());  // NaN > 0.5 is false
  const at::Tensor m = atom_mask.to(x.device(), x.scalar_type()).repeat_interleave(R / B, 0).unsqueeze(-1);
  const at::Tensor centroid = (x * m).sum(1, true) / m.sum(1, true).clamp_min(1);  // [R, 1, 3]
  // A reflection through the plane x = centroid_x; slots without an atom stay zero.
  const at::Tensor x0 = x.select(2, 0), c0 = centroid.select(2, 0);
  const at::Tensor reflected0 = at::where(flip.unsqueeze(1), (2 * c0 - x0) * m.squeeze(-1), x0);
  return {at::cat({reflected0.unsqueeze(2), x.narrow(2, 1, 2)}, 2), flip};
}

}  // namespace megafold::model
