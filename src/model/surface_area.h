#pragma once
// Solvent accessible surface area (SASA) of atoms by the Shrake-Rupley method, and the atom
// radii and per-residue maxima of the relative accessible surface area (RASA) that AF3's
// disorder term reads (AF3 SI Sec. 5.9.3; its released code takes them from DSSP 4.4, see
// confidence_scores.h). CPU, float64, no gradients.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

namespace megafold::model {

inline constexpr double kWaterProbeRadius = 1.4;  // Angstrom, DSSP's water radius
inline constexpr int64_t kSurfaceDots = 401;      // DSSP's 2 * 200 + 1 dots per atom

// `points` unit vectors [P, 3] double on a golden spiral (a Fibonacci sphere): dot k, k in
// 0..P-1, has height z_k = (2k + 1) / P - 1, the centre of the k-th of P bands of equal area
// (Archimedes: area between two heights is proportional to their difference), and longitude
// 2 pi (k - (P - 1) / 2) / phi, phi the golden ratio. For odd P these are DSSP's dots. Every
// dot stands for an area of 4 pi / P of the unit sphere; over a cap around the z axis the dots
// miss the cap's area by at most half a dot (only the band the cap's rim cuts is split).
at::Tensor surface_dots(int64_t points);

// SASA per atom (Shrake & Rupley 1973) -> [A] double, Angstrom^2, on the CPU: atom i's sphere
// of radius R_i = radii[i] + probe carries `points` surface dots (surface_dots); a dot is
// accessible when it lies strictly farther than R_j from every other atom j (the probe's
// centre touches no atom), and the area is 4 pi R_i^2 times the accessible fraction.
// coords [A, 3] Angstrom (any floating dtype and device; finite); radii [A] >= 0 Angstrom;
// probe >= 0. Atoms whose spheres can meet are found on a grid of cells of edge 2 max R, so
// the cost grows with A times the atoms per neighbourhood, not A^2. Deterministic.
at::Tensor solvent_accessible_area(const at::Tensor& coords, const at::Tensor& radii,
                                   double probe = kWaterProbeRadius, int64_t points = kSurfaceDots);

// DSSP's atom radius by PDB atom name, as AF3's disorder term uses it: N 1.65, CA 1.87, C 1.76,
// O 1.40, every other (heavy) atom 1.80 Angstrom. By name, not element: the backbone's own
// carbons, nitrogen and oxygen differ from the side chain's.
double dssp_atom_radius(std::string_view atom_name);

// Maximum accessible surface area of token type t in Angstrom^2 (Sander & Rost 1994, Proteins
// 20:216, the table AF3's disorder term normalises by): the 20 amino acids; every other type
// (UNK, and the per-atom tokens of non-standard residues) takes alanine's 106, as AF3 maps
// residues whose one-letter code it does not know.
double max_accessible_area(int t);

}  // namespace megafold::model
