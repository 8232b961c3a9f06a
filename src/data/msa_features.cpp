#include "data/msa_features.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "core/check.h"

namespace megafold::data {

std::vector<int64_t> chain_columns(const Entry& e) {
  std::vector<int64_t> column(e.n_tokens());
  std::vector<int64_t> seen(e.n_chains(), 0);
  for (int t = 0; t < e.n_tokens(); ++t) {
    // The tokens of a per-atom residue share its column.
    const bool same_residue = t > 0 && e.asym_id[t - 1] == e.asym_id[t] && e.residue_index[t - 1] == e.residue_index[t];
    column[t] = same_residue ? column[t - 1] : seen[e.asym_id[t]]++;
  }
  return column;
}

EntryMsa entry_msa(const Entry& e, const std::vector<int32_t>& tokens, const MsaSampling& sampling) {
  MF_CHECK(sampling.max_rows >= 1, "MSA sampling: max_rows must be >= 1, got ", sampling.max_rows);
  MF_CHECK(e.msas.empty() || static_cast<int>(e.msas.size()) == e.n_chains(), e.name, ": ", e.msas.size(),
           " MSAs for ", e.n_chains(), " chains");
  const auto msa_of = [&](int c) -> const Msa* {
    return !e.msas.empty() && e.msas[c].depth > 0 ? &e.msas[c] : nullptr;
  };
  const std::vector<int64_t> column = chain_columns(e);

  // Paired rows (AF3 SI 2.3, as AF-Multimer pairs): a species found in the MSAs of chains of at
  // least two entities gives one row holding, for each chain with that species, its first
  // (best-ranked) row of it. Species in the order of the mean rank of their rows, then the
  // best rank (then their keys, so the order never depends on a container's).
  std::vector<int32_t> entity_of(e.n_chains(), -1);
  for (int i = 0; i < e.n_tokens(); ++i)
    if (entity_of[e.asym_id[i]] < 0) entity_of[e.asym_id[i]] = e.entity_id[i];
  std::map<uint64_t, std::map<int32_t, int32_t>> first_row;  // species -> chain -> row
  for (int c = 0; c < e.n_chains(); ++c)
    if (const Msa* m = msa_of(c); m && static_cast<int64_t>(m->species.size()) == m->depth)
      for (int32_t r = 1; r < m->depth; ++r)
        if (const uint64_t sp = m->species[r]; sp != 0) first_row[sp].emplace(c, r);
  struct Pair {
    double mean_rank;
    int32_t best_rank;
    uint64_t species;
    std::map<int32_t, int32_t> rows;  // chain -> row
  };
  std::vector<Pair> paired;
  std::set<std::pair<int32_t, int32_t>> in_pairs;
  for (const auto& [sp, rows] : first_row) {
    std::set<int32_t> entities;
    int32_t best = std::numeric_limits<int32_t>::max();
    double sum = 0;
    for (const auto& [c, r] : rows) entities.insert(entity_of[c]), best = std::min(best, r), sum += r;
    if (entities.size() < 2) continue;
    paired.push_back({sum / static_cast<double>(rows.size()), best, sp, rows});
    for (const auto& cr : rows) in_pairs.insert(cr);
  }
  std::sort(paired.begin(), paired.end(), [](const Pair& a, const Pair& b) {
    return std::tie(a.mean_rank, a.best_rank, a.species) < std::tie(b.mean_rank, b.best_rank, b.species);
  });

  // The rows to draw from: the paired rows first, then every other row but the queries as
  // (chain, row); a partial Fisher-Yates draw of the kept ones, kept in this order.
  struct Unit {
    int32_t paired = -1;       // index into `paired`, or -1
    int32_t chain = 0, row = 0;
  };
  std::vector<Unit> units;
  for (size_t k = 0; k < paired.size(); ++k) units.push_back({static_cast<int32_t>(k), 0, 0});
  for (int c = 0; c < e.n_chains(); ++c)
    if (const Msa* m = msa_of(c))
      for (int32_t r = 1; r < m->depth; ++r)
        if (!in_pairs.count({c, r})) units.push_back({-1, c, r});
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t keep = std::min<size_t>(static_cast<size_t>(sampling.max_rows - 1), units.size());
  std::mt19937_64 rng(sampling.seed);
  for (size_t i = 0; i < keep; ++i) std::swap(order[i], order[i + rng() % (order.size() - i)]);
  order.resize(keep);
  std::sort(order.begin(), order.end());

  const int64_t n = static_cast<int64_t>(tokens.size());
  EntryMsa out;
  out.rows = 1 + static_cast<int64_t>(keep);
  out.tokens.assign(out.rows * n, kGapToken);
  out.deletions.assign(out.rows * n, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    MF_CHECK(t >= 0 && t < e.n_tokens(), "entry_msa: token ", t, " is outside ", e.name);
    out.tokens[i] = e.restype[t];
  }
  for (int64_t k = 1; k < out.rows; ++k) {
    const Unit& u = units[order[k - 1]];
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = tokens[i], c = e.asym_id[t];
      int32_t r = -1;
      if (u.paired >= 0) {
        const auto& rows = paired[u.paired].rows;
        if (const auto it = rows.find(c); it != rows.end()) r = it->second;
      } else if (u.chain == c) {
        r = u.row;
      }
      if (r < 0) continue;  // a gap in this row
      const Msa& m = *msa_of(c);
      const int64_t at = static_cast<int64_t>(r) * m.length + column[t];
      out.tokens[k * n + i] = m.tokens[at];
      out.deletions[k * n + i] = m.deletions[at];
    }
  }

  // The chain MSA's own profile (from msa_for_chain or the cache), read in place; computed
  // here only for an MSA built without one.
  std::vector<MsaProfile> computed(e.n_chains());
  std::vector<const float*> profile(e.n_chains(), nullptr), deletion_mean(e.n_chains(), nullptr);
  for (int c = 0; c < e.n_chains(); ++c) {
    const Msa* m = msa_of(c);
    if (m == nullptr) continue;
    const MsaProfile* p = nullptr;
    if (m->profile.empty()) p = &(computed[c] = msa_profile(*m));
    profile[c] = p != nullptr ? p->profile.data() : m->profile.data();
    deletion_mean[c] = p != nullptr ? p->deletion_mean.data() : m->deletion_mean.data();
  }
  out.profile.assign(n * kNumTokenTypes, 0.f);
  out.deletion_mean.assign(n, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i], c = e.asym_id[t];
    float* row = out.profile.data() + i * kNumTokenTypes;
    if (msa_of(c) == nullptr) {
      row[e.restype[t]] = 1.f;  // a single sequence's profile
      continue;
    }
    std::copy_n(profile[c] + column[t] * kNumTokenTypes, kNumTokenTypes, row);
    out.deletion_mean[i] = deletion_mean[c][column[t]];
  }
  return out;
}

}  // namespace megafold::data
