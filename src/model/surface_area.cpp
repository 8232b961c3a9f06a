#include "model/surface_area.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include "core/check.h"
#include "data/residue_constants.h"

namespace megafold::model {
namespace {

// Index of the first non-finite value of v[0..n), or -1.
int64_t first_non_finite(const double* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return i;
  return -1;
}

// The atoms in cells of a regular grid: cell keys sorted, each with its run of atoms.
class CellGrid {
 public:
  using Key = std::array<int64_t, 3>;

  CellGrid(const double* x, int64_t atoms, double cell) : cell_(cell) {
    for (int d = 0; d < 3; ++d) origin_[d] = atoms > 0 ? x[d] : 0.0;
    for (int64_t a = 0; a < atoms; ++a)
      for (int d = 0; d < 3; ++d) origin_[d] = std::min(origin_[d], x[3 * a + d]);
    std::vector<std::pair<Key, int64_t>> keyed(atoms);
    for (int64_t a = 0; a < atoms; ++a) keyed[a] = {key(x + 3 * a), a};
    std::sort(keyed.begin(), keyed.end());
    atoms_.reserve(atoms);
    for (const auto& [k, a] : keyed) {
      if (keys_.empty() || keys_.back() != k)
        keys_.push_back(k), starts_.push_back(static_cast<int64_t>(atoms_.size()));
      atoms_.push_back(a);
    }
    starts_.push_back(static_cast<int64_t>(atoms_.size()));
  }

  Key key(const double* p) const {
    Key k;
    for (int d = 0; d < 3; ++d) k[d] = static_cast<int64_t>(std::floor((p[d] - origin_[d]) / cell_));
    return k;
  }

  // Calls f(atom) for every atom in the 27 cells around p's cell.
  template <typename F>
  void for_each_near(const double* p, F&& f) const {
    const Key c = key(p);
    for (int64_t dx = -1; dx <= 1; ++dx)
      for (int64_t dy = -1; dy <= 1; ++dy)
        for (int64_t dz = -1; dz <= 1; ++dz) {
          const Key k{c[0] + dx, c[1] + dy, c[2] + dz};
          const auto it = std::lower_bound(keys_.begin(), keys_.end(), k);
          if (it == keys_.end() || *it != k) continue;
          const size_t cell = static_cast<size_t>(it - keys_.begin());
          for (int64_t s = starts_[cell]; s < starts_[cell + 1]; ++s) f(atoms_[s]);
        }
  }

 private:
  double cell_;
  std::array<double, 3> origin_{};
  std::vector<Key> keys_;
  std::vector<int64_t> starts_;  // keys_.size() + 1 offsets into atoms_
  std::vector<int64_t> atoms_;
};

}  // namespace

at::Tensor surface_dots(int64_t points) {
  MF_CHECK(points >= 1, "surface_dots: points must be >= 1, got ", points);
  const double golden = (1.0 + std::sqrt(5.0)) / 2.0;
  at::Tensor dots = at::empty({points, 3}, at::kDouble);
  double* u = dots.data_ptr<double>();
  const double P = static_cast<double>(points);
  for (int64_t k = 0; k < points; ++k) {
    const double z = (2.0 * static_cast<double>(k) + 1.0) / P - 1.0;
    const double lon = 2.0 * std::numbers::pi * (static_cast<double>(k) - (P - 1.0) / 2.0) / golden;
    const double ring = std::sqrt(std::max(0.0, 1.0 - z * z));
    u[3 * k] = std::sin(lon) * ring, u[3 * k + 1] = std::cos(lon) * ring, u[3 * k + 2] = z;
  }
  return dots;
}

at::Tensor solvent_accessible_area(const at::Tensor& coords, const at::Tensor& radii, double probe, int64_t points) {
  MF_CHECK(coords.dim() == 2 && coords.size(1) == 3, "solvent_accessible_area: coords must be [A, 3], got ",
           coords.sizes());
  const int64_t A = coords.size(0);
  MF_CHECK(radii.dim() == 1 && radii.size(0) == A, "solvent_accessible_area: radii must be [A] = [", A,
           "] like coords, got ", radii.sizes());
  MF_CHECK(coords.is_floating_point() && radii.is_floating_point(),
           "solvent_accessible_area: coords and radii must be floating point, got ", coords.scalar_type(), " and ",
           radii.scalar_type());
  MF_CHECK(std::isfinite(probe) && probe >= 0, "solvent_accessible_area: probe must be a finite radius >= 0 A, got ",
           probe);
  MF_CHECK(points >= 1, "solvent_accessible_area: points must be >= 1, got ", points);
  const at::Tensor xt = coords.to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor rt = radii.to(at::kCPU, at::kDouble).contiguous();
  const double* x = xt.data_ptr<double>();
  const double* r = rt.data_ptr<double>();
  const int64_t bad_x = first_non_finite(x, 3 * A);
  MF_CHECK(bad_x < 0, "solvent_accessible_area: coords of atom ", bad_x / 3, " are not finite (",
           x[bad_x < 0 ? 0 : bad_x], ")");
  for (int64_t a = 0; a < A; ++a)
    MF_CHECK(std::isfinite(r[a]) && r[a] >= 0, "solvent_accessible_area: radius of atom ", a,
             " must be finite and >= 0 A, got ", r[a]);

  at::Tensor area = at::zeros({A}, at::kDouble);
  std::vector<double> R(A);
  double R_max = 0;
  for (int64_t a = 0; a < A; ++a) R[a] = r[a] + probe, R_max = std::max(R_max, R[a]);
  if (A == 0 || R_max == 0) return area;
  double extent = 0;
  for (int d = 0; d < 3; ++d) {
    const at::Tensor column = xt.select(1, d);
    extent = std::max(extent, (column.max() - column.min()).item<double>());
  }
  MF_CHECK(extent / (2 * R_max) < 1e15, "solvent_accessible_area: the atoms span ", extent,
           " A, too far apart for a molecule (coordinates in the wrong units?)");
  // Two expanded spheres meet only within R_i + R_j <= 2 R_max: neighbours lie in the 27 cells
  // around an atom's own.
  const CellGrid grid(x, A, 2 * R_max);
  const at::Tensor dots_t = surface_dots(points);
  const double* u = dots_t.data_ptr<double>();
  double* out = area.data_ptr<double>();
  const double dot_area = 4.0 * std::numbers::pi / static_cast<double>(points);
  at::parallel_for(0, A, 64, [&](int64_t begin, int64_t end) {
    struct Neighbour {
      double d2, dx, dy, dz, R2;  // squared distance, offset from atom i, squared expanded radius
    };
    std::vector<Neighbour> near;
    for (int64_t i = begin; i < end; ++i) {
      const double Ri = R[i];
      if (Ri == 0) continue;
      near.clear();
      grid.for_each_near(x + 3 * i, [&](int64_t j) {
        if (j == i || R[j] == 0) return;
        const double dx = x[3 * j] - x[3 * i], dy = x[3 * j + 1] - x[3 * i + 1], dz = x[3 * j + 2] - x[3 * i + 2];
        const double d2 = dx * dx + dy * dy + dz * dz, reach = Ri + R[j];
        if (d2 < reach * reach) near.push_back({d2, dx, dy, dz, R[j] * R[j]});
      });
      // Nearest first: they cover the most dots, so the search for a covering sphere ends early.
      std::sort(near.begin(), near.end(), [](const Neighbour& a, const Neighbour& b) { return a.d2 < b.d2; });
      int64_t free = 0;
      size_t last = 0;  // the sphere that covered the previous dot covers its neighbour often
      for (int64_t k = 0; k < points; ++k) {
        const double px = Ri * u[3 * k], py = Ri * u[3 * k + 1], pz = Ri * u[3 * k + 2];
        auto covers = [&](const Neighbour& n) {
          const double ex = px - n.dx, ey = py - n.dy, ez = pz - n.dz;
          return ex * ex + ey * ey + ez * ez <= n.R2;
        };
        bool buried = !near.empty() && covers(near[last]);
        for (size_t n = 0; !buried && n < near.size(); ++n)
          if (n != last && covers(near[n])) buried = true, last = n;
        free += buried ? 0 : 1;
      }
      out[i] = dot_area * Ri * Ri * static_cast<double>(free);
    }
  });
  return area;
}

double dssp_atom_radius(std::string_view atom_name) {
  if (atom_name == "N") return 1.65;
  if (atom_name == "CA") return 1.87;
  if (atom_name == "C") return 1.76;
  if (atom_name == "O") return 1.40;
  return 1.80;
}

double max_accessible_area(int t) {
  // Sander & Rost 1994, Table 1 (Angstrom^2).
  static constexpr std::pair<std::string_view, double> kMax[] = {
      {"ALA", 106.0}, {"ARG", 248.0}, {"ASN", 157.0}, {"ASP", 163.0}, {"CYS", 135.0},
      {"GLN", 198.0}, {"GLU", 194.0}, {"GLY", 84.0},  {"HIS", 184.0}, {"ILE", 169.0},
      {"LEU", 164.0}, {"LYS", 205.0}, {"MET", 188.0}, {"PHE", 197.0}, {"PRO", 136.0},
      {"SER", 130.0}, {"THR", 142.0}, {"TRP", 227.0}, {"TYR", 222.0}, {"VAL", 142.0}};
  MF_CHECK(t >= 0 && t < data::kNumTokenTypes, "max_accessible_area: token type must lie in [0, ",
           data::kNumTokenTypes, "), got ", t);
  if (t < data::kNumAminoAcids)
    for (const auto& [name, area] : kMax)
      if (data::residue_name(t) == name) return area;
  return 106.0;  // alanine's, for every residue without a standard amino-acid type
}

}  // namespace megafold::model
