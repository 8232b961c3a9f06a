#pragma once
// Pairwise global alignment of two protein sequences: Needleman-Wunsch with affine gaps
// (Gotoh's three-state recursion) scored by BLOSUM62. Used to recover the residue pairs of a
// template hit that arrives without an alignment string (BLAST tabular / m8 hit lists give only
// the aligned spans; data/templates.h).
#include <cstdint>
#include <vector>

namespace megafold::data {

// BLOSUM62 score of two token types (residue_constants.h): the 20 amino acids, and UNK scored
// as BLOSUM62's X. Any other type (nucleotides, the gap) scores as X too.
int blosum62(int a, int b);

// Gap of length L costs open + L * extend (BLAST's convention; 11 and 1 are its defaults for
// BLOSUM62). End gaps cost the same as inner ones: both sequences are aligned end to end.
struct GapCosts {
  int open = 11;
  int extend = 1;
};

struct GlobalAlignment {
  int score = 0;
  std::vector<int32_t> a_to_b;  // [len(a)] the position of b aligned to each position of a, -1 for a gap
};

// The best-scoring global alignment of token sequences a and b. Among equally scoring
// alignments the traceback prefers, from the end backwards, a substitution, then a gap in b
// (a residue of a left unaligned), then a gap in a, so the result is a function of the inputs
// alone. Time and memory O(len(a) * len(b)).
GlobalAlignment align_global(const std::vector<int8_t>& a, const std::vector<int8_t>& b, const GapCosts& gaps = {});

}  // namespace megafold::data
