#pragma once
// AlphaFold 3's JSON input (dialect "alphafold3", versions 1-4): the job's chains and ligands
// as an Entry to predict, with its model seeds.
//
// Read: name; modelSeeds; sequences of protein / rna / dna (sequence, one id or a list of ids
// for copies, modifications by CCD code and 1-based position, unpairedMsa as a3m text or
// unpairedMsaPath, relative to the JSON file; for proteins pairedMsa / pairedMsaPath, whose row
// k pairs with row k of the other chains', and which, when given, is the only pairing, as in
// AF3; without it rows are paired by the species of the unpaired MSAs' headers) and ligand
// (ccdCodes, several for a multi-residue ligand such as a glycan, or smiles); bondedAtomPairs
// ([chain id, 1-based residue, atom name] pairs); a protein's templates (each an mmCIF of one
// protein chain as text, mmcif, or a file, mmcifPath, relative to the JSON file, with 0-based
// queryIndices / templateIndices pairing the chain's residues with the template chain's
// residues in sequence order), which are the chain's whole template list, in the given order
// and unfiltered (data/templates.h). Modified residues become per-atom tokens linked to their
// neighbours, as in structure files. Not used, with a warning when given: userCCD /
// userCCDPath (the CCD table only).
#include <cstdint>
#include <string>
#include <vector>

#include "data/ccd.h"
#include "data/structure.h"

namespace megafold::data {

struct Af3Input {
  Entry entry;                  // name from the job's "name"; chains in the order of "sequences"
  std::vector<int64_t> seeds;   // modelSeeds
};

// Throws megafold::Error naming the file and the field ("sequences[2].protein.sequence") for
// malformed input: not JSON, a missing or mistyped required field, an unknown field, a letter
// that is not a residue code, a modification outside its chain, a duplicate chain id, a bond to
// an atom that does not exist, a template without exactly one of mmcif / mmcifPath, with an
// unreadable mmCIF or one of other than one protein chain, or whose index lists differ in
// length, repeat a query residue or point outside either chain. Unknown CCD codes and SMILES that RDKit cannot use are skipped
// with a warning in Entry::warnings, as FASTA input does.
Af3Input load_af3_json(const std::string& path);
Af3Input load_af3_json(const std::string& path, const Ccd* ccd);

// True for .json file names.
bool is_json_file(const std::string& path);

}  // namespace megafold::data
