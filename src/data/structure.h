#pragma once
// A parsed entry: one structure file reduced to tokens and a dense heavy-atom layout.
// Plain vectors, no tensors: this header is shared by the gemmi translation unit
// (structure_io.cpp) and the feature code, and keeps gemmi and ATen apart.
//
// Parsing rules (applied in this order; see data/README.md):
//  1. The first model only (NMR ensembles have many).
//  2. Polymer chains whose residues are peptide-linked amino acids become protein chains;
//     waters, ions, ligands, nucleic-acid chains and hydrogens/deuteriums are dropped
//     (counted in `dropped`, never fatal).
//  3. One token per observed residue (residues absent from the model are not tokens; the
//     gap stays visible in residue_index). Standard amino acids by name, MSE -> MET,
//     any other peptide-linked residue -> UNK (backbone and CB kept).
//  4. Altlocs: per atom name, the conformer with the highest occupancy (the first on ties).
//     Microheterogeneity (two residues at one position): the first residue is kept.
//  5. residue_index is label_seq_id when present, else the author number, forced to increase
//     within a chain (insertion codes).
//  6. Entities: chains with identical sequences share an entity id (AF3 relative position
//     features); sym_id numbers the copies within an entity.
#include <cstdint>
#include <string>
#include <vector>

#include "data/msa.h"
#include "data/residue_constants.h"

namespace megafold::data {

struct Entry {
  std::string name;  // file stem, e.g. "1ubi"
  std::string path;
  std::vector<int8_t> restype;         // [n_token]   token type (residue_constants.h)
  std::vector<int32_t> residue_index;  // [n_token]
  std::vector<int32_t> asym_id;        // [n_token]   chain number, 0-based, in file order
  std::vector<int32_t> entity_id;      // [n_token]
  std::vector<int32_t> sym_id;         // [n_token]
  std::vector<float> coords;           // [n_token, kMaxAtomsPerToken, 3]  Angstrom
  std::vector<uint8_t> atom_mask;      // [n_token, kMaxAtomsPerToken]
  std::vector<int32_t> author_index;   // [n_token]   author residue number (auth_seq_id)
  std::string insertion_codes;         // [n_token]   author insertion code, ' ' for none
  std::vector<std::string> chain_ids;  // [n_chain]   author chain id per asym_id
  std::vector<Msa> msas;               // [n_chain] or empty: each chain's MSA over its tokens
                                       // (msa_for_chain); depth 0 = single sequence
  int dropped_residues = 0;            // waters, ligands, non-protein polymers
  int dropped_hydrogens = 0;
  // What parsing skipped and why, one line each naming the file (atoms with non-finite or
  // absurd coordinates). Not stored in the feature cache; callers print them.
  std::vector<std::string> warnings;

  int n_tokens() const { return static_cast<int>(restype.size()); }
  int n_chains() const { return static_cast<int>(chain_ids.size()); }
  std::string sequence(int asym) const;  // one-letter sequence of a chain
};

// Parses an mmCIF or PDB file (optionally .gz). Throws megafold::Error whose message names
// the file and what is wrong (unreadable, truncated, not a structure, no protein chain).
// Atoms whose coordinates are not finite or lie beyond kMaxCoordinate Angstrom of the origin
// in any axis (placeholders such as 99999, overflowed fields) are skipped, each named in
// Entry::warnings (the first kMaxCoordinateWarnings, then a count); a residue left without
// atoms is no token, and an entry left without tokens is rejected.
inline constexpr double kMaxCoordinate = 9999.0;
inline constexpr int kMaxCoordinateWarnings = 5;
Entry load_entry(const std::string& path);

// Rule 8 on a filled entry: entity_id and sym_id from the chains' sequences.
void assign_entities(Entry& e);

// Reads a protein FASTA file: one chain per record (chain ids A, B, ... in file order),
// residues numbered from 1, no coordinates (atom_mask all 0). One-letter codes, either case;
// X, B, Z, J, U, O become UNK; a trailing '*' ends a record. Throws megafold::Error naming the
// file and line of a character that is not a residue code, or an empty file or record.
Entry load_fasta(const std::string& path);

// True for .fasta .fa .faa .fas file names.
bool is_fasta_file(const std::string& path);

// Writes entry `e` as mmCIF (gemmi; one model): chains named e.chain_ids, residues numbered
// residue_index (label_seq_id) and author_index with insertion_codes (auth_seq_id; residue_index
// when the entry has no author numbering), so load_entry reads the same numbers back; the
// heavy atoms of the dense layout that atom_mask marks. coords: [n_token *
// kMaxAtomsPerToken * 3] Angstrom to write instead of e.coords (a prediction; empty = e.coords);
// b_factors: [n_token * kMaxAtomsPerToken] for the B-factor column (pLDDT; empty = 0).
// Written atomically. Throws megafold::Error naming the path on a size mismatch or I/O error.
void write_mmcif(const Entry& e, const std::string& path, const std::vector<float>& coords = {},
                 const std::vector<float>& b_factors = {});

// The entry name of a structure file: its file name without .gz and the last extension.
std::string entry_name(const std::string& path);

// True for file names this loader reads: .cif .mmcif .pdb .ent, each optionally .gz.
bool is_structure_file(const std::string& path);

}  // namespace megafold::data
