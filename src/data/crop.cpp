#include "data/crop.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/check.h"
#include "core/seed.h"
#include "data/features.h"

namespace megafold::data {
namespace {

// Uniform integer in [lo, hi] from our own generator (std distributions are not portable).
int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// Uniform double in [0, 1) from the generator's top 53 bits.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

size_t centre(const Entry& e, int i) { return static_cast<size_t>(i) * kMaxAtomsPerToken + e.centre_slot(i); }

bool has_centre(const Entry& e, int i) { return e.atom_mask[centre(e, i)] != 0; }

double centre_distance2(const Entry& e, int i, int j) {
  double d2 = 0;
  for (int k = 0; k < 3; ++k) {
    const double d = e.coords[centre(e, i) * 3 + k] - e.coords[centre(e, j) * 3 + k];
    d2 += d * d;
  }
  return d2;
}

// First token of the unit each token belongs to: a per-atom residue (ligand, ion, non-standard
// residue) is one unit that a crop takes whole or not at all; any other token is its own.
std::vector<int32_t> unit_starts(const Entry& e) {
  std::vector<int32_t> start(e.n_tokens());
  for (int i = 0; i < e.n_tokens(); ++i) {
    const bool joins = i > 0 && e.per_atom(i) && e.per_atom(i - 1) && e.asym_id[i] == e.asym_id[i - 1] &&
                       e.residue_index[i] == e.residue_index[i - 1];
    start[i] = joins ? start[i - 1] : i;
  }
  return start;
}

}  // namespace

std::vector<int32_t> contiguous_crop(const Entry& e, int crop_size, uint64_t seed) {
  const int n = e.n_tokens();
  if (crop_size <= 0 || n <= crop_size) return all_tokens(e);

  // Token ranges per chain (tokens of a chain are contiguous, chains in file order).
  std::vector<std::pair<int, int>> chains;  // [begin, end)
  for (int i = 0; i < n; ++i) {
    if (i == 0 || e.asym_id[i] != e.asym_id[i - 1]) chains.emplace_back(i, i);
    chains.back().second = i + 1;
  }
  std::mt19937_64 rng(seed);
  std::vector<int> order(chains.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);

  // AF-Multimer SI Alg. 1 (contiguous cropping); a span's edge that cuts a per-atom residue
  // leaves that residue out, and only the tokens kept count against the budget.
  const std::vector<int32_t> start_of = unit_starts(e);
  std::vector<int32_t> unit_end(n);  // one past each unit's last token
  for (int i = n - 1; i >= 0; --i) unit_end[i] = i + 1 < n && start_of[i + 1] == start_of[i] ? unit_end[i + 1] : i + 1;
  std::vector<int32_t> keep;
  int n_added = 0, n_remaining = n;
  for (int k : order) {
    const int n_k = chains[k].second - chains[k].first;
    n_remaining -= n_k;
    const int size_max = std::min(crop_size - n_added, n_k);
    const int size_min = std::min(n_k, std::max(0, crop_size - (n_added + n_remaining)));
    const int size = static_cast<int>(uniform_int(rng, size_min, size_max));
    const int start = static_cast<int>(uniform_int(rng, 0, n_k - size));
    const int lo = chains[k].first + start, hi = lo + size;
    for (int i = lo; i < hi; ++i)
      if (start_of[i] >= lo && unit_end[i] <= hi) {
        keep.push_back(i);
        ++n_added;
      }
  }
  std::sort(keep.begin(), keep.end());
  // Every span cut its ligand (chains of large ligands only): whole units in token order while
  // they fit, else the first crop_size tokens.
  for (int i = 0; i < n && keep.empty(); ++i)
    if (start_of[i] == i && unit_end[i] - i <= crop_size)
      for (int k = i; k < unit_end[i]; ++k) keep.push_back(k);
  if (keep.empty())
    for (int i = 0; i < std::min(crop_size, n); ++i) keep.push_back(i);
  return keep;
}

std::vector<bool> interface_tokens(const Entry& e, double radius) {
  const int n = e.n_tokens();
  std::vector<bool> out(n, false);
  const double r2 = radius * radius;
  for (int i = 0; i < n; ++i) {
    if (!has_centre(e, i)) continue;
    for (int j = 0; j < n && !out[i]; ++j)
      if (e.asym_id[j] != e.asym_id[i] && has_centre(e, j) && centre_distance2(e, i, j) < r2) out[i] = true;
  }
  return out;
}

namespace {

// Whether a resolved centre atom of chain `other` (any chain but token i's when other < 0) lies
// within `radius` of token i's.
bool near_chain(const Entry& e, int i, int other, double radius) {
  const double r2 = radius * radius;
  for (int j = 0; j < e.n_tokens(); ++j)
    if ((other < 0 ? e.asym_id[j] != e.asym_id[i] : e.asym_id[j] == other) && has_centre(e, j) &&
        centre_distance2(e, i, j) < r2)
      return true;
  return false;
}

// The centres a focused spatial crop draws from (the contract in crop.h); empty when the focused
// chains have no resolved centre atom.
std::vector<int32_t> focused_centres(const Entry& e, const CropFocus& f, bool interface) {
  MF_CHECK(f.chain_a < e.n_chains() && f.chain_b < e.n_chains() && f.chain_a != f.chain_b, "entry ", e.name,
           ": crop focus on chains ", f.chain_a, " and ", f.chain_b, ", the entry has ", e.n_chains(),
           " chains (a units.tsv of another build of this cache?)");
  const bool pair = f.chain_b >= 0;
  auto in_unit = [&](int i) { return e.asym_id[i] == f.chain_a || (pair && e.asym_id[i] == f.chain_b); };
  std::vector<int32_t> near, any;
  for (int i = 0; i < e.n_tokens(); ++i) {
    if (!in_unit(i) || !has_centre(e, i)) continue;
    any.push_back(i);
    // The interface of the pair, or of the chain with any other chain for an interface crop.
    if (pair || interface) {
      const int other = !pair ? -1 : e.asym_id[i] == f.chain_a ? f.chain_b : f.chain_a;
      if (near_chain(e, i, other, 15.0)) near.push_back(i);
    }
  }
  return near.empty() ? any : near;
}

}  // namespace

std::vector<int32_t> spatial_crop(const Entry& e, int crop_size, uint64_t seed, bool interface,
                                  const CropFocus& focus) {
  const int n = e.n_tokens();
  if (crop_size <= 0 || n <= crop_size) return all_tokens(e);
  std::vector<int32_t> centres;
  if (!focus.none()) centres = focused_centres(e, focus, interface);
  if (centres.empty() && interface) {
    const std::vector<bool> at = interface_tokens(e);
    for (int i = 0; i < n; ++i)
      if (at[i]) centres.push_back(i);
  }
  if (centres.empty())
    for (int i = 0; i < n; ++i)
      if (has_centre(e, i)) centres.push_back(i);
  if (centres.empty()) return contiguous_crop(e, crop_size, seed);  // nothing resolved to measure from
  std::mt19937_64 rng(seed);
  const int c = centres[uniform_int(rng, 0, static_cast<int64_t>(centres.size()) - 1)];
  std::vector<std::pair<double, int32_t>> by_distance;
  for (int i = 0; i < n; ++i)
    by_distance.emplace_back(has_centre(e, i) ? centre_distance2(e, c, i) : INFINITY, i);
  std::sort(by_distance.begin(), by_distance.end());
  // Nearest first, a per-atom residue as a whole when it still fits.
  const std::vector<int32_t> start = unit_starts(e);
  std::vector<bool> taken(n, false);
  std::vector<int32_t> keep;
  for (const auto& [d2, i] : by_distance) {
    if (static_cast<int>(keep.size()) == crop_size) break;
    const int32_t s0 = start[i];
    if (taken[s0]) continue;
    int32_t end = s0 + 1;
    while (end < n && start[end] == s0) ++end;
    if (static_cast<int>(keep.size()) + (end - s0) > crop_size) continue;
    taken[s0] = true;
    for (int32_t k = s0; k < end; ++k) keep.push_back(k);
  }
  // Every unit is larger than the crop: the nearest tokens, cutting that residue (a crop size
  // below a ligand's atom count is the one case where a ligand is split).
  if (keep.empty())
    for (int k = 0; k < crop_size; ++k) keep.push_back(by_distance[k].second);
  std::sort(keep.begin(), keep.end());
  return keep;
}

std::vector<int32_t> training_crop(const Entry& e, int crop_size, const CropWeights& w, uint64_t seed,
                                   const CropFocus& focus) {
  MF_CHECK(w.contiguous >= 0 && w.spatial >= 0 && w.spatial_interface >= 0 &&
               w.contiguous + w.spatial + w.spatial_interface > 0,
           "crop weights must be >= 0 and not all 0");
  if (crop_size <= 0 || e.n_tokens() <= crop_size) return all_tokens(e);
  std::mt19937_64 rng(mix_seed(seed, 0x6d6f6465));  // "mode"
  const double u = uniform01(rng) * (w.contiguous + w.spatial + w.spatial_interface);
  if (u < w.contiguous) return contiguous_crop(e, crop_size, seed);
  return spatial_crop(e, crop_size, seed, u >= w.contiguous + w.spatial, focus);
}

}  // namespace megafold::data
