// AlphaFold 3 JSON input: a job with every entity kind read into the tokens, chains, bonds and
// MSAs it describes (counts from the CCD), and malformed jobs refused with the field named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "data/af3_json.h"
#include "data/ccd.h"
#include "data/features.h"
#include "data/msa.h"
#include "data/msa_features.h"
#include "data/residue_constants.h"
#include "testing.h"

namespace megafold::data {
namespace {
using namespace megafold::testing;

const std::string kFixture = MEGAFOLD_TEST_SOURCE_DIR "/tests/fixtures/af3/complex.json";

const Ccd& ccd() {
  const Ccd* c = default_ccd();
  if (c == nullptr) throw Error("no CCD table at " + default_ccd_path() + "; run scripts/setup.sh");
  return *c;
}

// Heavy atoms a component keeps in a polymer or as a ligand (its non-leaving ones).
int kept_atoms(const std::string& code) {
  const CcdComponent* comp = ccd().find(code);
  EXPECT_NE(comp, nullptr) << code;
  int n = 0;
  for (const CcdAtom& a : comp->atoms) n += !a.leaving();
  return n;
}

int tokens_of(const Entry& e, int asym) {
  int n = 0;
  for (int i = 0; i < e.n_tokens(); ++i) n += e.asym_id[i] == asym;
  return n;
}

bool has_bond(const Entry& e, int i, int j, int slot_i, int slot_j) {
  for (const Bond& b : e.bonds)
    if (b.i == i && b.j == j && b.slot_i == slot_i && b.slot_j == slot_j) return true;
  return false;
}

TEST(Af3Json, ReadsEveryEntityKind) {
  const Af3Input in = load_af3_json(kFixture, &ccd());
  const Entry& e = in.entry;
  EXPECT_EQ(e.name, "complex_of_every_kind_1");
  EXPECT_EQ(in.seeds, (std::vector<int64_t>{7, 11}));
  // G (a SMILES) needs RDKit; without it the chain is skipped with a warning saying so.
  bool smiles = false;
  for (const std::string& id : e.chain_ids) smiles = smiles || id == "G";
  const std::vector<std::string> want = smiles ? std::vector<std::string>{"A", "B", "C", "D", "E", "F", "G", "H"}
                                               : std::vector<std::string>{"A", "B", "C", "D", "E", "F", "H"};
  ASSERT_EQ(e.chain_ids, want);
  const int sep = kept_atoms("SEP"), m2g = kept_atoms("2MG"), o6g = kept_atoms("6OG");
  const int atp = kept_atoms("ATP"), nag = kept_atoms("NAG");
  EXPECT_EQ(tokens_of(e, 0), 10 + sep);
  EXPECT_EQ(tokens_of(e, 1), 10 + sep);
  EXPECT_EQ(tokens_of(e, 2), 3 + m2g);
  EXPECT_EQ(tokens_of(e, 3), 3 + o6g);
  EXPECT_EQ(tokens_of(e, 4), atp);
  EXPECT_EQ(tokens_of(e, 5), atp);
  if (smiles) EXPECT_EQ(tokens_of(e, 6), 4);  // acetic acid's heavy atoms
  const int glycan = static_cast<int>(want.size()) - 1;
  EXPECT_EQ(tokens_of(e, glycan), 2 * nag);
  EXPECT_EQ(e.chain_mol_type(0), MolType::kProtein);
  EXPECT_EQ(e.chain_mol_type(2), MolType::kRna);
  EXPECT_EQ(e.chain_mol_type(3), MolType::kDna);
  EXPECT_EQ(e.chain_mol_type(4), MolType::kLigand);
  // The phosphoserine: per-atom tokens of the protein (UNK type), residue 4, linked C(3)-N and
  // C-N(5) to its neighbours.
  const int first_sep = 3;
  EXPECT_TRUE(e.per_atom(first_sep));
  EXPECT_EQ(e.residue_index[first_sep], 4);
  EXPECT_EQ(e.mol(first_sep), MolType::kProtein);
  EXPECT_EQ(e.restype[first_sep], kUnknownAminoAcid);
  int sep_n = -1, sep_c = -1;
  for (int i = first_sep; i < first_sep + sep; ++i) {
    if (e.token_atoms[i].atom_name() == "N") sep_n = i;
    if (e.token_atoms[i].atom_name() == "C") sep_c = i;
  }
  ASSERT_GE(sep_n, 0);
  ASSERT_GE(sep_c, 0);
  EXPECT_TRUE(has_bond(e, 2, sep_n, kAtomC, 0));
  EXPECT_TRUE(has_bond(e, sep_c, first_sep + sep, 0, kAtomN));
  // Modified bases take their polymer's unknown type.
  const int rna_mod = 2 * (10 + sep) + 1;
  EXPECT_EQ(e.restype[rna_mod], kUnknownRna);
  const int dna_mod = 2 * (10 + sep) + 3 + m2g;
  EXPECT_EQ(e.restype[dna_mod], kUnknownDna);
  // The glycosidic bond O4 (residue 1) - C1 (residue 2), and the named protein-ligand bond.
  const int glycan_start = e.n_tokens() - 2 * nag;
  int o4 = -1, c1 = -1;
  for (int i = glycan_start; i < e.n_tokens(); ++i) {
    if (e.residue_index[i] == 1 && e.token_atoms[i].atom_name() == "O4") o4 = i;
    if (e.residue_index[i] == 2 && e.token_atoms[i].atom_name() == "C1") c1 = i;
  }
  EXPECT_TRUE(has_bond(e, o4, c1, 0, 0));
  int pg = -1;
  for (int i = 0; i < e.n_tokens(); ++i)
    if (e.asym_id[i] == 4 && e.token_atoms[i].atom_name() == "PG") pg = i;
  EXPECT_TRUE(has_bond(e, 0, pg, kAtomN, 0));
  // Both protein copies carry the inline MSA; the other chains are single-sequence.
  ASSERT_EQ(e.msas.size(), want.size());
  EXPECT_EQ(e.msas[0].depth, 2);
  EXPECT_EQ(e.msas[1].depth, 2);
  EXPECT_EQ(e.msas[0].length, 11);
  EXPECT_EQ(e.msas[2].depth, 0);
  // Copies are one entity; nothing is resolved.
  EXPECT_EQ(e.entity_id[0], e.entity_id[10 + sep]);
  EXPECT_NE(e.entity_id[0], e.entity_id[e.n_tokens() - 1]);
  for (const uint8_t m : e.atom_mask) ASSERT_EQ(m, 0);
}

TEST(Af3Json, MalformedJobsNameTheField) {
  const TempDir dir;
  const std::string ok_sequences = R"("sequences": [{"protein": {"id": "A", "sequence": "MKT"}}])";
  auto job = [&](const std::string& body) {
    return "{\"name\": \"j\", \"modelSeeds\": [1], \"dialect\": \"alphafold3\", \"version\": 1, " + body + "}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"name\": ", "not JSON"},
      {R"({"modelSeeds": [1], "dialect": "alphafold3", "version": 1, )" + ok_sequences + "}", "name: missing"},
      {R"({"name": "j", "modelSeeds": [1], "dialect": "alphafoldserver", "version": 1, )" + ok_sequences + "}",
       "dialect: 'alphafoldserver' is not read here"},
      {R"({"name": "j", "modelSeeds": [], "dialect": "alphafold3", "version": 1, )" + ok_sequences + "}",
       "modelSeeds: expected a non-empty list"},
      {job(ok_sequences + R"(, "colour": "red")"), "colour: unknown field"},
      {job(R"("sequences": [{"protein": {"id": "A", "sequence": "MK1"}}])"),
       "sequences[0].protein.sequence: '1' at position 3 is not an amino-acid code"},
      {job(R"("sequences": [{"protein": {"id": "A", "sequence": "MKT", "modifications": [{"ptmType": "SEP", "ptmPosition": 9}]}}])"),
       "sequences[0].protein.modifications[0].ptmPosition: expected a position from 1 to 3"},
      {job(R"("sequences": [{"protein": {"id": "A", "sequence": "MKT"}}, {"dna": {"id": "A", "sequence": "GAT"}}])"),
       "sequences[1].dna.id: chain id 'A' is used twice"},
      {job(R"("sequences": [{"rna": {"id": "A", "sequence": "AGT"}}])"),
       "sequences[0].rna.sequence: 'T' at position 3 is not a RNA nucleotide code"},
      {job(R"("sequences": [{"ligand": {"id": "A", "ccdCodes": ["ATP"], "smiles": "CCO"}}])"),
       "sequences[0].ligand: give exactly one of 'ccdCodes' and 'smiles'"},
      {job(R"("sequences": [{"dna": {"id": "A", "sequence": "GAT", "unpairedMsa": ">q\nGAT\n"}}])"),
       "sequences[0].dna.unpairedMsa: unknown field"},
      {job(R"("sequences": [{"peptide": {"id": "A", "sequence": "MKT"}}])"), "sequences[0].peptide: unknown entity type"},
      {job(ok_sequences + R"(, "bondedAtomPairs": [[["A", 1, "N"], ["A", 2, "XX"]]])"),
       "bondedAtomPairs[0][1]: chain A residue 2 has no atom 'XX'"},
      {job(ok_sequences + R"(, "bondedAtomPairs": [[["A", 1, "N"], ["Q", 1, "N"]]])"),
       "bondedAtomPairs[0][1]: no chain 'Q' in sequences"},
      {job(R"("sequences": [{"protein": {"id": "a", "sequence": "MKT"}}])"),
       "sequences[0].protein.id: chain id 'a' is not upper-case letters"},
      {job(R"("sequences": [{"protein": {"id": "A", "sequence": "MKT", "unpairedMsa": ">q\nMKS\n"}}])"),
       "unpairedMsa"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string path = dir.write("job" + std::to_string(k) + ".json", cases[k].first);
    try {
      load_af3_json(path, &ccd());
      ADD_FAILURE() << "case " << k << " was accepted: " << cases[k].first;
    } catch (const Error& ex) {
      const std::string what = ex.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(cases[k].second), std::string::npos) << "case " << k << ": " << what;
    }
  }
}

// What the reader cannot use yet is named in warnings; unknown codes are skipped, as in FASTA.
TEST(Af3Json, WarnsOfWhatItDoesNotUse) {
  const TempDir dir;
  const std::string path = dir.write("j.json", R"({"name": "j", "modelSeeds": [1], "dialect": "alphafold3", "version": 2,
    "sequences": [
      {"protein": {"id": "A", "sequence": "MKT", "pairedMsa": ">q\nMKT\n",
                   "modifications": [{"ptmType": "ZZZQ", "ptmPosition": 2}]}},
      {"ligand": {"id": "B", "ccdCodes": ["NOPE1"]}}],
    "userCCD": "data_X"})");
  const Entry e = load_af3_json(path, &ccd()).entry;
  EXPECT_EQ(e.chain_ids, std::vector<std::string>{"A"});
  EXPECT_EQ(e.n_tokens(), 3);
  EXPECT_EQ(e.restype[1], amino_acid_of_letter('K'));  // the unknown modification: the standard residue kept
  std::string all;
  for (const std::string& w : e.warnings) all += w + "\n";
  for (const char* part : {"userCCD is not used",
                           "component ZZZQ is not in the CCD; kept as the standard LYS",
                           "component NOPE1 is not in the CCD; skipped", "chain B has no atoms left"})
    EXPECT_NE(all.find(part), std::string::npos) << part << "\n" << all;
}

// A given pairedMsa pairs its rows by index across chains, and is then the only pairing: the
// unpaired rows' species (the same OX in both chains here) pair nothing. An empty pairedMsa
// gives no pairs at all; without one, the unpaired headers' species pair.
TEST(Af3Json, PairedMsaPairsRowsByIndexAndIsThenTheOnlyPairing) {
  const TempDir dir;
  auto job = [&](const std::string& paired_a, const std::string& paired_b) {
    std::string j = R"({"name": "p", "modelSeeds": [1], "dialect": "alphafold3", "version": 2, "sequences": [
      {"protein": {"id": "A", "sequence": "MKTA", "unpairedMsa": ">q\nMKTA\n>u1 OX=9606\nMKSA\n>u2 OX=10090\nLKTA\n")";
    j += paired_a + R"(}},
      {"protein": {"id": "B", "sequence": "GWE", "unpairedMsa": ">q\nGWE\n>v1 OX=9606\nGWD\n")";
    j += paired_b + "}}]}";
    return load_af3_json(dir.write("p.json", j), &ccd()).entry;
  };
  const std::string pa = R"(, "pairedMsa": ">q\nMKTA\n>a1\nMRTA\n>a2\nMKTV\n")";
  const std::string pb = R"(, "pairedMsa": ">q\nGWE\n>b1\nAWE\n>b2\nGFE\n")";
  const Entry e = job(pa, pb);
  ASSERT_EQ(e.msas.size(), 2u);
  const Msa& a = e.msas[0];
  ASSERT_EQ(a.depth, 3 + 2);  // the paired MSA (query and two rows), then the unpaired rows
  EXPECT_EQ(a.species, (std::vector<uint64_t>{0, paired_row_species(1), paired_row_species(2), 0, 0}));
  EXPECT_EQ(e.msas[1].species, (std::vector<uint64_t>{0, paired_row_species(1), paired_row_species(2), 0}));
  // Profile over all five rows: column 1 (K) is R in one of them.
  EXPECT_FLOAT_EQ(a.profile[1 * kNumTokenTypes + amino_acid_of_letter('R')], 1.f / 5.f);

  const EntryMsa m = entry_msa(e, all_tokens(e), {100, 5});
  ASSERT_EQ(m.rows, 1 + 2 + 2 + 1);  // query; two pairs; A's and B's unpaired rows, unpaired
  auto row = [&](int k) { return std::string(m.tokens.begin() + k * 7, m.tokens.begin() + (k + 1) * 7); };
  auto letters = [](const std::string& seq) {
    std::string t;
    for (char c : seq) t += static_cast<char>(amino_acid_of_letter(c));
    return t;
  };
  EXPECT_EQ(row(1), letters("MRTA" "AWE"));
  EXPECT_EQ(row(2), letters("MKTV" "GFE"));

  // An empty paired MSA: nothing pairs, not even the unpaired rows' shared species.
  const Entry none = job(R"(, "pairedMsa": "")", R"(, "pairedMsa": "")");
  EXPECT_EQ(none.msas[0].species, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(entry_msa(none, all_tokens(none), {100, 5}).rows, 1 + 2 + 1);
  // Without one, the unpaired headers' species pair (OX=9606 in both chains).
  const Entry by_species = job("", "");
  EXPECT_EQ(entry_msa(by_species, all_tokens(by_species), {100, 5}).rows, 1 + 1 + 1);
}

}  // namespace
}  // namespace megafold::data
