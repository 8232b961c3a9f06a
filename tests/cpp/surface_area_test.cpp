// Shrake-Rupley solvent accessible surface area (model/surface_area.h): the dot set, isolated
// spheres against 4 pi R^2, two spheres against the spherical-cap formula within the dot set's
// proven error, buried atoms, the cell grid against an all-pairs search, the radii and maximum
// areas AF3's disorder term uses, and the messages for bad input.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/surface_area.h"
#include "testing.h"

namespace megafold::model {
namespace {
using namespace megafold::testing;
constexpr double kPi = std::numbers::pi;

// Exposed area of sphere i (expanded radius Ri) with sphere j (Rj) at distance d: the part of
// i's surface within Rj of j's centre is the cap above height z0 = (Ri^2 + d^2 - Rj^2) / (2 Ri
// d) along the axis to j, of area 2 pi Ri^2 (1 - z0) (Archimedes); no cap when the spheres do
// not meet, all of i when j engulfs it.
double exposed_with_one_neighbour(double Ri, double Rj, double d) {
  if (d >= Ri + Rj) return 4 * kPi * Ri * Ri;
  if (d + Ri <= Rj) return 0.0;
  const double z0 = (Ri * Ri + d * d - Rj * Rj) / (2 * Ri * d);
  return 2 * kPi * Ri * Ri * (1 + std::clamp(z0, -1.0, 1.0));
}

TEST(SurfaceDots, UnitVectorsInEqualAreaBands) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (const int64_t P : {int64_t{1}, int64_t{2}, kSurfaceDots, static_cast<int64_t>(3 + rng() % 1000)}) {
    const at::Tensor u = surface_dots(P);
    ASSERT_EQ(u.sizes(), (at::IntArrayRef{P, 3}));
    EXPECT_LT((u.norm(2, 1) - 1).abs().max().item<double>(), 1e-14) << "P " << P;
    // Heights at the centres of P bands of width 2 / P: z_k = (2k + 1) / P - 1.
    const at::Tensor z = (2 * at::arange(P, at::kDouble) + 1) / static_cast<double>(P) - 1;
    EXPECT_LT((u.select(1, 2) - z).abs().max().item<double>(), 1e-15) << "P " << P;
  }
  EXPECT_THROW(surface_dots(0), Error);
}

// Every dot of a lone sphere is free: the area is P dots of 4 pi R^2 / P, exact to rounding.
TEST(SolventAccessibleArea, IsolatedAtomIsItsWholeExpandedSphere) {
  const uint64_t seed = fresh_seed();
  const int64_t A = 17;
  const at::Tensor radii = 0.5 + 2 * at::rand({A}, at::kDouble);
  // Atoms 20 A apart along a random line: no two expanded spheres (R < 3.9 A) meet.
  const at::Tensor dir = at::randn({3}, at::kDouble);
  const at::Tensor x =
      at::arange(A, at::kDouble).unsqueeze(1) * 20.0 * (dir / dir.norm()) + 100 * at::randn({3}, at::kDouble);
  for (const double probe : {0.0, kWaterProbeRadius}) {
    const at::Tensor area = solvent_accessible_area(x, radii, probe);
    const at::Tensor want = 4 * kPi * (radii + probe).square();
    EXPECT_LT(((area - want) / want).abs().max().item<double>(), 1e-13) << "seed " << seed << " probe " << probe;
  }
  // float32 coordinates are accepted (and read in double).
  EXPECT_NEAR(solvent_accessible_area(x.to(at::kFloat), radii)[3].item<double>(),
              4 * kPi * std::pow(radii[3].item<double>() + 1.4, 2), 1e-9);
}

// A dot-counted cap around the z axis is off by at most half a dot, 2 pi R^2 / P (only the band
// the rim cuts is split, and its dot is counted iff the band's centre is inside), so two spheres
// along z match the cap formula to that.
TEST(SolventAccessibleArea, TwoSpheresAlongTheAxisMatchTheCapFormula) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const double probe = trial % 5 == 0 ? 0.0 : kWaterProbeRadius;
    const double ri = 0.6 + 1.6 * uniform(rng), rj = 0.6 + 1.6 * uniform(rng);
    const double Ri = ri + probe, Rj = rj + probe;
    // Distances from engulfing to apart, most of them where the spheres cut each other.
    const double lo = std::max(0.05, std::abs(Ri - Rj) - 0.3), hi = Ri + Rj + 0.3;
    const double d = lo + (hi - lo) * uniform(rng);
    const double sign = trial % 2 ? 1.0 : -1.0;
    const int64_t P = trial % 3 == 0 ? kSurfaceDots : 20 + static_cast<int64_t>(rng() % 3000);
    const at::Tensor origin = 50 * at::randn({3}, at::kDouble);
    const at::Tensor x = at::stack({origin, origin + at::tensor({0.0, 0.0, sign * d}, at::kDouble)});
    const at::Tensor area = solvent_accessible_area(x, at::tensor({ri, rj}, at::kDouble), probe, P);
    EXPECT_NEAR(area[0].item<double>(), exposed_with_one_neighbour(Ri, Rj, d), 2 * kPi * Ri * Ri / P + 1e-9)
        << "seed " << seed << " trial " << trial << " d " << d;
    EXPECT_NEAR(area[1].item<double>(), exposed_with_one_neighbour(Rj, Ri, d), 2 * kPi * Rj * Rj / P + 1e-9)
        << "seed " << seed << " trial " << trial << " d " << d;
  }
}

// Atoms of radius 1.8 A on a cubic lattice of 2 A with a 1.4 A probe: any point lies within
// sqrt(3) A (half a cube's diagonal) of a lattice site, so a dot on an atom's 3.2 A sphere is
// within sqrt(3) < 3.2 of a site that is not the atom itself (the atom is 3.2 away): buried,
// provided that site exists. Dots reach 3.2 A from the centre, their nearest sites lie within
// 2 sites of the atom along each axis: the atoms two sites inside the lattice are buried.
TEST(SolventAccessibleArea, BuriedAtomHasNone) {
  const int64_t n = 9;
  std::vector<double> xs;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < n; ++k) xs.insert(xs.end(), {2.0 * i, 2.0 * j, 2.0 * k});
  const at::Tensor x = at::tensor(xs, at::kDouble).view({n * n * n, 3}) + 10 * at::randn({3}, at::kDouble);
  const at::Tensor area = solvent_accessible_area(x, at::full({n * n * n}, 1.8, at::kDouble));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < n; ++k) {
        const double a = area[(i * n + j) * n + k].item<double>();
        const bool inside = std::min({i, j, k}) >= 2 && std::max({i, j, k}) <= n - 3;
        if (inside) {
          EXPECT_EQ(a, 0.0) << i << " " << j << " " << k;
        }
      }
  EXPECT_GT(area[0].item<double>(), 0.0);  // a corner sees the solvent
  // An atom inside a larger one: its whole expanded sphere lies within the other's.
  const at::Tensor inner = solvent_accessible_area(
      at::tensor({0.0, 0.0, 0.0, 0.3, -0.2, 0.1}, at::kDouble).view({2, 3}), at::tensor({1.0, 2.5}, at::kDouble));
  EXPECT_EQ(inner[0].item<double>(), 0.0);
  EXPECT_NEAR(inner[1].item<double>(), 4 * kPi * 3.9 * 3.9, 1e-9);  // the inner one covers none of it
}

// The cell grid finds every pair whose expanded spheres meet: against an all-pairs search with
// the same dots and the same arithmetic, atom by atom, on a random protein-dense cloud (0.05
// atoms / A^3) with mixed radii, including atoms of radius 0.
TEST(SolventAccessibleArea, CellGridMatchesAllPairs) {
  const uint64_t seed = fresh_seed();
  const int64_t A = 700;
  const double side = std::cbrt(A / 0.05);
  const at::Tensor x = side * at::rand({A, 3}, at::kDouble) - 500.0;
  at::Tensor radii = 1.4 + 0.5 * at::rand({A}, at::kDouble);
  radii.narrow(0, 0, 5).zero_();
  const double probe = kWaterProbeRadius;
  const int64_t P = 101;
  const at::Tensor area = solvent_accessible_area(x, radii, probe, P);
  const at::Tensor u = surface_dots(P);
  auto X = x.accessor<double, 2>();
  auto U = u.accessor<double, 2>();
  auto r = radii.accessor<double, 1>();
  for (int64_t i = 0; i < A; ++i) {
    const double Ri = r[i] + probe;
    int64_t free = 0;
    for (int64_t k = 0; k < P; ++k) {
      bool buried = false;
      for (int64_t j = 0; j < A && !buried; ++j) {
        if (j == i || r[j] + probe == 0) continue;
        const double Rj = r[j] + probe;
        const double ex = Ri * U[k][0] - (X[j][0] - X[i][0]), ey = Ri * U[k][1] - (X[j][1] - X[i][1]),
                     ez = Ri * U[k][2] - (X[j][2] - X[i][2]);
        buried = ex * ex + ey * ey + ez * ez <= Rj * Rj;
      }
      free += !buried;
    }
    EXPECT_NEAR(area[i].item<double>(), 4 * kPi * Ri * Ri * free / P, 1e-9) << "seed " << seed << " atom " << i;
  }
}

TEST(SolventAccessibleArea, DsspRadiiAndSanderRostMaxima) {
  EXPECT_EQ(dssp_atom_radius("N"), 1.65);
  EXPECT_EQ(dssp_atom_radius("CA"), 1.87);
  EXPECT_EQ(dssp_atom_radius("C"), 1.76);
  EXPECT_EQ(dssp_atom_radius("O"), 1.40);
  for (const char* side : {"CB", "SG", "OXT", "NZ", "OG1", "SE"}) EXPECT_EQ(dssp_atom_radius(side), 1.80) << side;
  const std::vector<std::pair<std::string, double>> table = {
      {"ALA", 106}, {"ARG", 248}, {"ASN", 157}, {"ASP", 163}, {"CYS", 135}, {"GLN", 198}, {"GLU", 194},
      {"GLY", 84},  {"HIS", 184}, {"ILE", 169}, {"LEU", 164}, {"LYS", 205}, {"MET", 188}, {"PHE", 197},
      {"PRO", 136}, {"SER", 130}, {"THR", 142}, {"TRP", 227}, {"TYR", 222}, {"VAL", 142}};
  for (const auto& [name, area] : table) EXPECT_EQ(max_accessible_area(data::amino_acid_index(name)), area) << name;
  EXPECT_EQ(max_accessible_area(data::kUnknownAminoAcid), 106.0);  // AF3: unknown letters count as ALA
  EXPECT_THROW(max_accessible_area(-1), Error);
  EXPECT_THROW(max_accessible_area(data::kNumTokenTypes), Error);
}

TEST(SolventAccessibleArea, BadInputIsNamed) {
  const at::Tensor x = at::randn({4, 3}, at::kDouble), r = at::full({4}, 1.5, at::kDouble);
  EXPECT_NE(error_of([&] { solvent_accessible_area(x.view({2, 6}), r); }).find("coords must be [A, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { solvent_accessible_area(x, r.narrow(0, 0, 3)); }).find("radii must be [A] = [4]"),
            std::string::npos);
  at::Tensor bad = x.clone();
  bad[2][1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error_of([&] { solvent_accessible_area(bad, r); }).find("coords of atom 2 are not finite"),
            std::string::npos);
  at::Tensor negative = r.clone();
  negative[3] = -1.0;
  EXPECT_NE(error_of([&] { solvent_accessible_area(x, negative); }).find("radius of atom 3"), std::string::npos);
  EXPECT_NE(error_of([&] { solvent_accessible_area(x, r, -0.1); }).find("probe"), std::string::npos);
  EXPECT_NE(error_of([&] { solvent_accessible_area(x, r, 1.4, 0); }).find("points must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { solvent_accessible_area(x.to(at::kLong), r); }).find("floating point"), std::string::npos);
  EXPECT_EQ(solvent_accessible_area(at::empty({0, 3}), at::empty({0})).numel(), 0);
}

}  // namespace
}  // namespace megafold::model
