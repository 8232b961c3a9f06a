#pragma once
// Entries -> padded tensor batches, with AF-Multimer-style contiguous cropping.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/msa_features.h"
#include "data/structure.h"

namespace megafold::data {

// AF3 SI Sec. 2.8 reference features of every atom slot: from the token type's CCD ideal
// conformer for standard residues (data/reference_atoms.h), from the token's own atom for
// per-atom tokens (Entry::token_atoms).
struct ReferenceFeatures {
  at::Tensor pos;      // [B, N, kMaxAtomsPerToken, 3] float, Angstrom, in each conformer's frame
  at::Tensor element;  // [B, N, kMaxAtomsPerToken] int64 atomic number, 0 where there is no atom
  at::Tensor charge;   // [B, N, kMaxAtomsPerToken] float formal charge
  at::Tensor mask;     // [B, N, kMaxAtomsPerToken] float, 1 where the token has the atom
  at::Tensor name_chars;  // [B, N, kMaxAtomsPerToken, 4] int64: the atom name's characters as
                          // ASCII - 32 (0..63; 0 pads names shorter than 4), AF3's ref_atom_name_chars
  at::Tensor space_uid;   // [B, N] int64: tokens sharing one conformer share it (a residue, or
                          // all atoms of one per-atom residue), AF3's ref_space_uid
};

// One batch, padded to n_token = crop size (or the longest entry when not cropping).
struct Batch {
  at::Tensor restype;        // [B, N] int64
  at::Tensor mol_type;       // [B, N] int64 MolType (padding: protein)
  at::Tensor residue_index;  // [B, N] int64
  at::Tensor token_index;    // [B, N] int64 token number within the entry (AF3 token_index)
  at::Tensor asym_id;        // [B, N] int64
  at::Tensor entity_id;      // [B, N] int64
  at::Tensor sym_id;         // [B, N] int64
  at::Tensor token_mask;     // [B, N] float, 1 = real token
  at::Tensor token_bonds;    // [B, N, N] uint8, 1 = bonded (Entry::bonds, both directions)
  at::Tensor bond_atoms;     // [B, NB, 2] int64 the bonded atoms as indices into the atom list
                             // below (NB = the most bonds of any entry)
  at::Tensor bond_mask;      // [B, NB] float, 1 = a bond of the entry with both atoms resolved
  // The atoms the tokens have, token by token, as AF3 lists them (the model's atom layer runs
  // on this list; A = the most atoms of any entry, padding last).
  at::Tensor atom_index;     // [B, A] int64 dense slot: token * kMaxAtomsPerToken + slot (padding:
                             // slot 23 of token 0, which no residue has)
  at::Tensor atom_token;     // [B, A] int64 its token
  at::Tensor atom_exists;    // [B, A] float, 0 for padding
  at::Tensor atom_coords;    // [B, N, kMaxAtomsPerToken, 3] float, Angstrom
  at::Tensor atom_mask;      // [B, N, kMaxAtomsPerToken] float
  at::Tensor rep_coords;     // [B, N, 3] distogram atom (Entry::representative_slot)
  at::Tensor rep_mask;       // [B, N] float
  at::Tensor rep_slot;       // [B, N] int64 its slot
  at::Tensor centre_slot;    // [B, N] int64 slot of the centre atom (Entry::centre_slot)
  at::Tensor centre_mask;    // [B, N] float, 1 = a polymer residue token with its centre atom
                             // (CA, C1') resolved: the atoms of C-alpha lDDT and the pLDDT target
  // Token frames of the aligned error (AF3 SI Sec. 4.3.2): atoms (a, b, c) as dense indices
  // token * kMaxAtomsPerToken + slot, b the origin. Residues: N, CA, C or C1', C3', C4'. A
  // per-atom token: its own atom as b, the nearest and second-nearest atoms of its reference
  // conformer (same ref.space_uid) as a and c, by reference positions; no frame when the
  // conformer has fewer than three atoms or the three are within 25 degrees of a line.
  at::Tensor frame_atoms;    // [B, N, 3] int64
  at::Tensor frame_mask;     // [B, N] float, 1 = the token has a frame (whether resolved or not)
  ReferenceFeatures ref;
  // MSA (data/msa_features.h): S = the most rows of any entry; padding rows and tokens are gaps
  // with mask 0.
  at::Tensor msa;            // [B, S, N] int64 token types
  at::Tensor msa_deletion;   // [B, S, N] float deletion counts
  at::Tensor msa_mask;       // [B, S, N] float, 1 = a real row at a real token
  at::Tensor profile;        // [B, N, kNumTokenTypes] float
  at::Tensor deletion_mean;  // [B, N] float
  // Templates (AF3 SI Sec. 2.4, Alg. 16's inputs; data/templates.h): T = the most templates any
  // example shows (0: the tensors keep their rank with size 0 in dim 1). Slot t of an example
  // holds, for every chain, that chain's t-th selected template (select_templates), so
  // inter-chain pairs of one slot come from different templates and are the model's to mask.
  // Tokens of chains without a t-th template, per-atom tokens and padding tokens: restype
  // kGapToken, coords 0, mask 0.
  at::Tensor template_restype;  // [B, T, N] int64 token type of the template residue aligned to token i, kGapToken where none
  at::Tensor template_coords;   // [B, T, N, 4, 3] float, Angstrom: N, CA, C and CB (CA for glycine) of that residue
  at::Tensor template_mask;     // [B, T, N, 4] float, 1 = that atom is resolved in the template
  std::vector<std::string> names;
  // Whether any entry has fewer tokens than N (padding rows in the masks). make_batch sets it;
  // a batch without padding lets the trunk run without masks (the same result, and the
  // attention kernels' unmasked form is faster). Known on the host, so no device read decides it.
  bool padded = true;

  int64_t size() const { return restype.size(0); }
  int64_t n_tokens() const { return restype.size(1); }
  int64_t real_tokens() const;  // sum of token_mask
  std::vector<at::Tensor*> tensors();  // every tensor field
  Batch to(const at::Device& device) const;
  Batch pinned() const;  // the tensors in page-locked host memory (needs CUDA)
};

// Reference features of standard residue tokens from their types alone, restype [B, N] int64
// (any device) -> features on the same device (space_uid: one per token). Token types without
// reference atoms (the gap) get zero rows.
ReferenceFeatures reference_features(const at::Tensor& restype);

// Every token index of e, in order (the selection of a whole entry).
std::vector<int32_t> all_tokens(const Entry& e);

// The entry restricted to `tokens` (sorted token indices, e.g. a crop), chains, numbering,
// MSAs and templates (their columns of the kept tokens) kept.
Entry select_tokens(const Entry& e, const std::vector<int32_t>& tokens);

// Builds a batch from entries and their token selections (empty selection = all tokens),
// padded to pad_to tokens (0 = the longest selection). Entry b's MSA rows are drawn with seed
// mix_seed(msa.seed, b), its templates with seed mix_seed(templates.seed, b); only chains with
// a token in the selection count towards T.
Batch make_batch(const std::vector<const Entry*>& entries,
                 const std::vector<std::vector<int32_t>>& selections, int pad_to, const MsaSampling& msa = {},
                 const TemplateSampling& templates = {});

}  // namespace megafold::data
