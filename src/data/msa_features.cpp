#include "data/msa_features.h"

#include <algorithm>
#include <random>
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

  // Every row but the queries, as (chain, row), then a partial Fisher-Yates draw of the kept ones.
  std::vector<std::pair<int32_t, int32_t>> extra;
  for (int c = 0; c < e.n_chains(); ++c)
    if (const Msa* m = msa_of(c))
      for (int32_t r = 1; r < m->depth; ++r) extra.emplace_back(c, r);
  const size_t keep = std::min<size_t>(static_cast<size_t>(sampling.max_rows - 1), extra.size());
  std::mt19937_64 rng(sampling.seed);
  for (size_t i = 0; i < keep; ++i) std::swap(extra[i], extra[i + rng() % (extra.size() - i)]);
  extra.resize(keep);
  std::sort(extra.begin(), extra.end());

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
    const auto [c, r] = extra[k - 1];
    const Msa& m = *msa_of(c);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = tokens[i];
      if (e.asym_id[t] != c) continue;
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
