#pragma once
// Multiple sequence alignments of protein and RNA chains: a3m parsing and the mapping of an MSA
// onto the observed residues of a chain.
//
// a3m: '>' header lines, then each sequence on one or more lines. Upper-case letters and '-'
// are aligned columns (the query's columns); lower-case letters are insertions relative to the
// query and are not columns: their count becomes the deletion value of the next aligned column
// (AF2/AF3 deletion_matrix). '.' (a2m insert gaps) is skipped. The first sequence is the query.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/residue_constants.h"

namespace megafold::data {

struct Msa {
  int64_t depth = 0;               // sequences, query first
  int64_t length = 0;              // aligned columns
  std::vector<int8_t> tokens;      // [depth, length] token types; gaps are kGapToken
  std::vector<uint8_t> deletions;  // [depth, length] insertions before each column (capped at 255)
  // Over all rows, per column (msa_profile): filled by msa_for_chain and kept by the feature
  // cache, so the loader never recomputes them per sample; empty where not computed.
  std::vector<float> profile;        // [length, kNumTokenTypes]
  std::vector<float> deletion_mean;  // [length]
  // [depth] or empty: each row's species from its header (species_of_header), 0 where unknown
  // (the query, headers without one). Rows of one species in the MSAs of different chains are
  // paired across the complex (msa_features.h).
  std::vector<uint64_t> species;
};

// The species an a3m header names, as a nonzero key, or 0: UniProt's OX=<taxid>, UniRef's
// TaxID=<taxid>, else the species code of a UniProt entry name (HBA_HUMAN, A0A0X_9BACT: 3-5
// upper-case letters and digits after the last '_' of the last '|' field of the header's first
// word), as AF-Multimer pairs by. Different conventions give different keys.
uint64_t species_of_header(std::string_view header);

// Parses a3m text of a chain of type `mol` (protein: one-letter amino-acid codes, X B Z J U O
// as UNK; RNA: A C G U, T read as U, any other letter as N); `origin` names the source in errors
// ("file:line: problem"). Text without any sequence gives an empty Msa (depth 0): a chain
// without alignment is single-sequence.
Msa parse_a3m(std::string_view text, const std::string& origin, MolType mol = MolType::kProtein);

// Reads and parses an a3m file, plain or gzip-compressed. Throws megafold::Error naming the
// file.
Msa load_a3m(const std::string& path, MolType mol = MolType::kProtein);

// The MSA of one chain restricted to that chain's observed residues, column i of the result
// being residue i of the chain (a per-atom residue counts once). `sequence` holds the residues'
// token types and `residue_index` their label_seq_ids. The query must equal the chain's sequence either
// column for column, or as the full sequence indexed by residue_index (1-based, gaps of
// unobserved residues). Throws megafold::Error saying which residue disagrees otherwise. The
// result carries its profile and deletion means.
Msa msa_for_chain(const Msa& msa, const std::vector<int8_t>& sequence, const std::vector<int32_t>& residue_index,
                  const std::string& origin);

// The column of each residue of a chain in an alignment whose query row is `query` (token
// types): column i for residue i when the query matches the chain one to one, else column
// residue_index[i] - 1 (the query as the chain's full sequence, indexed by label_seq_id). Throws
// megafold::Error naming `origin` and the first residue that disagrees otherwise. Shared by
// MSAs and template hit lists (templates.h).
std::vector<int64_t> query_columns(const std::vector<int8_t>& query, const std::vector<int8_t>& sequence,
                                   const std::vector<int32_t>& residue_index, const std::string& origin);

// The MSA of a chain whose paired rows are given (AlphaFold 3 JSON's pairedMsa, SI 2.3): row k
// of every chain's paired MSA pairs with row k of the others', so each of those rows gets a
// species of its own made from k (paired_row_species), and the unpaired rows follow with none,
// as AF3 pairs nothing else once the paired MSA is given. Both are mapped to the chain already
// (msa_for_chain) and either may be empty (depth 0); the result's query is the paired MSA's
// (else the unpaired one's) and it carries its profile.
Msa with_paired_rows(const Msa& paired, const Msa& unpaired);
uint64_t paired_row_species(int64_t row);

struct Entry;  // data/structure.h, which holds each chain's Msa

// The MSA of each protein and RNA chain c of e without one yet, from
// <msa_dir>/<e.name>_<e.chain_ids[c]>.a3m (or .a3m.gz) where that file exists (DNA and ligands
// stay single-sequence). A file that is not a regular file or does not fit its chain is not
// used; `warnings` gets a line naming it and why.
void attach_msas(Entry& e, const std::string& msa_dir, std::vector<std::string>& warnings);

// The MSA restricted to `columns` (indices into msa's columns, in the order given), with the
// profile and deletion means of the result.
Msa msa_columns(const Msa& msa, const std::vector<int64_t>& columns);

// Per-column profile [length, kNumTokenTypes] (fraction of sequences with each token type,
// gaps included) and mean deletion value per column [length] (AF3 SI Table 5).
struct MsaProfile {
  std::vector<float> profile;
  std::vector<float> deletion_mean;
};
MsaProfile msa_profile(const Msa& msa);

}  // namespace megafold::data
