#pragma once
// A parsed entry: one structure file reduced to tokens and a dense heavy-atom layout.
// Plain vectors, no tensors: this header is shared by the gemmi translation unit
// (structure_io.cpp) and the feature code, and keeps gemmi and ATen apart.
//
// Parsing rules (applied in this order; see data/README.md):
//  1. The first model only (NMR ensembles have many).
//  2. Chains are gemmi's subchains (mmCIF label_asym_id; one per ligand residue in PDB files):
//     polymers of L/D amino acids are protein, RNA and DNA polymers nucleic-acid chains (a
//     DNA/RNA hybrid takes each residue's own type), every other subchain (non-polymers,
//     branched glycans, other polymers) a ligand chain. Waters, the crystallisation aids of
//     AF3 SI Table 9 and hydrogens/deuteriums are dropped (counted, never fatal).
//  3. Tokens (AF3 SI Sec. 2.6): one per standard residue of a polymer (MSE read as MET); one
//     per heavy atom of every ligand, ion and non-standard polymer residue. Per-atom residues
//     take their atoms from the CCD (data/ccd.h): its heavy atoms that are not leaving atoms,
//     plus leaving atoms the file has; unresolved ones are tokens with atom mask 0. A residue
//     whose code the CCD lacks, or with no resolved atom, is skipped with a warning naming the
//     file, chain and component. Residues absent from the model are not tokens (the gap stays
//     visible in residue_index).
//  4. Altlocs: per atom name, the conformer with the highest occupancy (the first on ties).
//     Microheterogeneity (two residues at one position): the first residue is kept.
//  5. residue_index is label_seq_id when present, else the author number, forced to increase
//     within a chain (insertion codes); the tokens of a per-atom residue share it.
//  6. Bonds (AF3 token_bonds): the CCD's bonds inside each per-atom residue, the polymer links
//     of non-standard residues to their neighbours, and the file's covalent struct_conn / LINK
//     records that touch a per-atom token; standard-standard bonds (peptide, disulfide) are
//     not listed. A bond between two resolved atoms farther apart than kMaxBondLength is
//     dropped.
//  7. Entities: chains of one molecule type with identical residue sequences share an entity
//     id (AF3 relative position features); sym_id numbers the copies within an entity.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/msa.h"
#include "data/residue_constants.h"
#include "data/templates.h"

namespace megafold::data {

class Ccd;

// The atom of a per-atom token (ligand, ion or non-standard residue), in slot 0 of the token.
struct TokenAtom {
  char name[4] = {};     // CCD atom name, NUL-padded
  uint8_t element = 0;   // atomic number
  int8_t charge = 0;     // formal charge
  uint8_t pad[2] = {};
  float ref_pos[3] = {};  // reference conformer (CCD ideal coordinates), Angstrom, in the frame
                          // shared by the residue's atoms
  std::string_view atom_name() const { return {name, name[3] ? 4u : std::char_traits<char>::length(name)}; }
};
static_assert(sizeof(TokenAtom) == 20);

inline constexpr double kMaxBondLength = 2.4;  // Angstrom (AF3 SI Sec. 2.8, token_bonds)

// A covalent bond between atom slot slot_i of token i and slot slot_j of token j, i < j.
struct Bond {
  int32_t i = 0, j = 0;
  int8_t slot_i = 0, slot_j = 0;
  uint8_t pad[2] = {};
  auto operator<=>(const Bond&) const = default;
};
static_assert(sizeof(Bond) == 12);

struct Entry {
  std::string name;  // file stem, e.g. "1ubi"
  std::string path;
  // The structure's deposition date, YYYY-MM-DD ("" when the file gives none): templates are
  // kept only if released before it (data/templates.h). Read with the file; not stored in the
  // feature cache, which applies it while building.
  std::string deposition_date;
  std::vector<int8_t> restype;         // [n_token]   token type (residue_constants.h)
  std::vector<int8_t> mol_type;        // [n_token]   MolType
  std::vector<int32_t> residue_index;  // [n_token]
  std::vector<int32_t> asym_id;        // [n_token]   chain number, 0-based, in file order
  std::vector<int32_t> entity_id;      // [n_token]
  std::vector<int32_t> sym_id;         // [n_token]
  std::vector<float> coords;           // [n_token, kMaxAtomsPerToken, 3]  Angstrom
  std::vector<uint8_t> atom_mask;      // [n_token, kMaxAtomsPerToken]
  std::vector<int32_t> author_index;   // [n_token]   author residue number (auth_seq_id)
  std::string insertion_codes;         // [n_token]   author insertion code, ' ' for none
  std::vector<int32_t> component;      // [n_token]   per-atom tokens: index into components;
                                       //             -1 for standard residue tokens
  std::vector<TokenAtom> token_atoms;  // [n_token]   per-atom tokens' atoms (zero elsewhere)
  std::vector<std::string> components;  // CCD codes of the per-atom residues, each once
  std::vector<Bond> bonds;             // rule 6, sorted
  std::vector<std::string> chain_ids;  // [n_chain]   author chain id per asym_id (ligand chains
                                       //             share their polymer's)
  std::vector<Msa> msas;               // [n_chain] or empty: each chain's MSA over its residues
                                       // (msa_for_chain); depth 0 = single sequence
  // [n_chain] or empty: each chain's templates in rank order (data/templates.h; protein chains
  // only, at most kMaxTemplateHits), each over the chain's residues like its MSA.
  std::vector<std::vector<ChainTemplate>> templates;
  int dropped_residues = 0;            // waters, crystallisation aids, unusable components
  int dropped_hydrogens = 0;
  // What parsing skipped and why, one line each naming the file (atoms with non-finite or
  // absurd coordinates, unknown components). Not stored in the feature cache; callers print them.
  std::vector<std::string> warnings;

  int n_tokens() const { return static_cast<int>(restype.size()); }
  int n_chains() const { return static_cast<int>(chain_ids.size()); }
  bool per_atom(int i) const { return component[i] >= 0; }
  MolType mol(int i) const { return static_cast<MolType>(mol_type[i]); }
  MolType chain_mol_type(int asym) const;  // of the chain's first token
  // CCD code of token i's residue ("ALA", "DA", "ATP").
  std::string_view residue_code(int i) const;
  // Slots of token i's representative (distogram) and centre (crop) atoms.
  int representative_slot(int i) const { return per_atom(i) ? 0 : representative_atom_slot(restype[i]); }
  int centre_slot(int i) const { return per_atom(i) ? 0 : centre_atom_slot(restype[i]); }
  // One letter per residue of a polymer chain (a per-atom residue counts once, by its
  // restype); CCD codes joined by '.' for a ligand chain.
  std::string sequence(int asym) const;
  // Fills the per-token fields a protein-only builder leaves out: mol_type from restype,
  // component -1, token_atoms zero (FASTA records, synthetic entries).
  void fill_residue_defaults();
};

// Parses an mmCIF or PDB file (optionally .gz). Throws megafold::Error whose message names
// the file and what is wrong (unreadable, truncated, not a structure, nothing usable in it).
// Atoms whose coordinates are not finite or lie beyond kMaxCoordinate Angstrom of the origin
// in any axis (placeholders such as 99999, overflowed fields) are skipped, each named in
// Entry::warnings (the first kMaxCoordinateWarnings, then a count); a residue left without
// atoms is no token, and an entry left without tokens is rejected.
inline constexpr double kMaxCoordinate = 9999.0;
inline constexpr int kMaxCoordinateWarnings = 5;
// Ligands and non-standard residues take their atoms from `ccd` (rule 3); load_entry(path)
// uses default_ccd(), and without a table skips them with one warning.
Entry load_entry(const std::string& path);
Entry load_entry(const std::string& path, const Ccd* ccd);

// Rule 7 on a filled entry: entity_id and sym_id from the chains' molecule types and sequences.
void assign_entities(Entry& e);

// Reads a FASTA file for prediction: one chain per record (chain ids A, B, ... in file order),
// residues numbered from 1, no coordinates (atom_mask all 0). A header's '|'-separated fields
// after the first may name the record's kind (Boltz's convention, any case): protein (the
// default, so plain and UniProt headers read as proteins), dna, rna, ccd (ligands by CCD code,
// separated by spaces or commas: per-atom tokens with the CCD's atoms and bonds) or smiles.
// Protein letters either case, X B Z J U O as UNK; DNA A C G T and RNA A C G U, N or X as the
// unknown nucleotide; a trailing '*' ends a record. A smiles record is one ligand (LIG, LIG2,
// ...) with an RDKit ETKDGv3 conformer as its reference (data/smiles.h). A CCD code the table
// lacks, and a SMILES that RDKit cannot parse or embed (or a host without RDKit), are skipped
// with a warning in Entry::warnings naming file, line and chain. Throws
// megafold::Error naming the file and line of a character that is not a residue code, or an
// empty file or polymer record.
Entry load_fasta(const std::string& path);
Entry load_fasta(const std::string& path, const Ccd* ccd);

// True for .fasta .fa .faa .fas file names.
bool is_fasta_file(const std::string& path);

// Writes entry `e` as mmCIF (gemmi; one model): author chains e.chain_ids, one label_asym_id per
// chain (A, B, ..., AA, ...), polymer residues numbered residue_index (label_seq_id) and
// author_index with insertion_codes (auth_seq_id; residue_index when the entry has no author
// numbering), so load_entry reads the same numbers back; ligands and non-standard residues as
// HETATM records named by their CCD codes, atoms as in the CCD; the heavy atoms that atom_mask
// marks. coords: [n_token *
// kMaxAtomsPerToken * 3] Angstrom to write instead of e.coords (a prediction; empty = e.coords);
// b_factors: [n_token * kMaxAtomsPerToken] for the B-factor column (pLDDT; empty = 0).
// Written atomically. Throws megafold::Error naming the path on a size mismatch or I/O error.
void write_mmcif(const Entry& e, const std::string& path, const std::vector<float>& coords = {},
                 const std::vector<float>& b_factors = {});

// Chain label number k (0-based): A..Z, then AA, AB, ... as mmCIF allows (FASTA chain ids, the
// writer's label_asym_id).
std::string chain_label(int k);

// The entry name of a structure file: its file name without .gz and the last extension.
std::string entry_name(const std::string& path);

// True for file names this loader reads: .cif .mmcif .pdb .ent, each optionally .gz.
bool is_structure_file(const std::string& path);

}  // namespace megafold::data
