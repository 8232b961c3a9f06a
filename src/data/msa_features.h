#pragma once
// Per-entry MSA features for a batch (AF3 SI Sec. 2.3 and 2.8, Table 5): row 0 is the query over
// all chains; then the paired rows, each holding for every chain whose MSA has the row's species
// (Msa::species, from the a3m headers) its best-ranked row of that species, for species found in
// chains of at least two entities; then the unpaired rows, each one chain's row with gaps in the
// columns of the other chains. The rows the model sees are a random subset, in that order, a
// pure function of a seed, so the loader's MSA subsampling is reproducible for any number of
// workers and after a resume; without paired rows the draw is the unpaired one alone.
#include <cstdint>
#include <vector>

#include "data/structure.h"

namespace megafold::data {

struct MsaSampling {
  int64_t max_rows = 1;  // rows kept, the query included (>= 1); 1 = single sequence
  uint64_t seed = 0;     // which of the other rows are kept
};

// MSA features over a token selection (tokens = indices into e, in batch order).
struct EntryMsa {
  int64_t rows = 0;
  std::vector<int8_t> tokens;         // [rows, n] token types, kGapToken for gaps
  std::vector<float> deletions;       // [rows, n] deletion counts
  std::vector<float> profile;         // [n, kNumTokenTypes] over each chain's full MSA
  std::vector<float> deletion_mean;   // [n]
};

// Column of every token of e within its chain: an MSA's column i is its chain's residue i (the
// tokens of a per-atom residue share one column).
std::vector<int64_t> chain_columns(const Entry& e);

// Chains without an MSA (or entries without MSAs) contribute their query row only; their
// profile is the one-hot of the sequence. The query row is always kept, then up to
// max_rows - 1 of the other rows, drawn uniformly without replacement and kept in MSA order.
EntryMsa entry_msa(const Entry& e, const std::vector<int32_t>& tokens, const MsaSampling& sampling);

}  // namespace megafold::data
