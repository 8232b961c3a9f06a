// All molecule types on real files: tokenisation and atom counts worked out by hand, CCD
// features against the CCD, bonds against the files' links, crops that never split a ligand,
// the cache and batch features of ligands, malformed components.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/cache.h"
#include "data/ccd.h"
#include "data/crop.h"
#include "data/elements.h"
#include "data/features.h"
#include "data/msa.h"
#include "data/reference_atoms.h"
#include "data/smiles.h"
#include "data/structure.h"
#include "model/scoring.h"
#include "testing.h"

namespace megafold::data {
namespace {
using megafold::testing::gunzip;
using megafold::testing::TempDir;

const std::string kData = MEGAFOLD_TEST_SOURCE_DIR "/data/pdb";

// Every test here needs the CCD table that setup writes.
const Ccd& ccd() {
  const Ccd* c = default_ccd();
  if (c == nullptr) throw Error("no CCD table at " + default_ccd_path() + "; run scripts/setup.sh");
  return *c;
}

struct ChainSummary {
  std::string chain;
  MolType mol;
  int tokens = 0, atoms = 0;
};

std::vector<ChainSummary> chains_of(const Entry& e) {
  std::vector<ChainSummary> out(e.n_chains());
  for (int c = 0; c < e.n_chains(); ++c) out[c] = {e.chain_ids[c], e.chain_mol_type(c)};
  for (int i = 0; i < e.n_tokens(); ++i) {
    ++out[e.asym_id[i]].tokens;
    for (int a = 0; a < kMaxAtomsPerToken; ++a) out[e.asym_id[i]].atoms += e.atom_mask[i * kMaxAtomsPerToken + a];
  }
  return out;
}

// The token holding atom `atom` of residue number `number` (author numbering) of chain `chain`
// with molecule type `mol`, and its slot; {-1, -1} if none.
std::pair<int, int> find_atom(const Entry& e, const std::string& chain, MolType mol, int number, const std::string& atom) {
  for (int i = 0; i < e.n_tokens(); ++i) {
    if (e.chain_ids[e.asym_id[i]] != chain || e.mol(i) != mol || e.author_index[i] != number) continue;
    if (e.per_atom(i)) {
      if (e.token_atoms[i].atom_name() == atom) return {i, 0};
    } else if (const int slot = atom_slot(e.restype[i], atom); slot >= 0) {
      return {i, slot};
    }
  }
  return {-1, -1};
}

bool bonded(const Entry& e, std::pair<int, int> a, std::pair<int, int> b) {
  if (a.first > b.first) std::swap(a, b);
  const Bond key{a.first, b.first, static_cast<int8_t>(a.second), static_cast<int8_t>(b.second)};
  return std::binary_search(e.bonds.begin(), e.bonds.end(), key);
}

// Counts from the chemistry, by hand: 1lcd is lac repressor headpiece on an 11-bp DNA duplex
// (AATTGTGAGCG / CGCTCACAATT) with a sodium ion; 3mht holds S-adenosyl-L-homocysteine (SAH,
// C14H20N6O5S: 26 heavy atoms); 4jsv ADP (C10H15N5O10P2: 27), Mg2+ and MgF3- (4 atoms) on
// each kinase; 1a28 progesterone (STR, C21H30O2: 23); 19hc nine hemes per chain (HEM,
// C34H32FeN4O4: 43 heavy atoms).
TEST(Molecules, TokensAndAtomsOfBundledEntries) {
  ccd();
  {
    const Entry e = load_entry(kData + "/1lcd.cif.gz");
    const auto c = chains_of(e);
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0].mol, MolType::kDna);
    EXPECT_EQ(e.sequence(0), "AATTGTGAGCG");
    EXPECT_EQ(c[0].tokens, 11);
    EXPECT_EQ(e.sequence(1), "CGCTCACAATT");
    EXPECT_EQ(c[2].mol, MolType::kProtein);
    EXPECT_EQ(c[2].tokens, 51);
    EXPECT_EQ(c[3].mol, MolType::kLigand);
    EXPECT_EQ(e.sequence(3), "NA");
    EXPECT_EQ(c[3].tokens, 1);
    EXPECT_EQ(e.n_tokens(), 11 + 11 + 51 + 1);
    // A DNA token's atoms: at most the 19-22 heavy atoms of its nucleotide, P/OP1/OP2 of the
    // 5' ends absent in a crystal.
    for (int i = 0; i < 22; ++i) {
      int atoms = 0;
      for (int a = 0; a < kMaxAtomsPerToken; ++a) atoms += e.atom_mask[i * kMaxAtomsPerToken + a];
      EXPECT_LE(atoms, atom_count(e.restype[i])) << i;
      EXPECT_GE(atoms, atom_count(e.restype[i]) - 3) << i;
    }
  }
  const std::map<std::string, std::pair<std::string, int>> ligands = {
      {"3mht.pdb.gz", {"SAH", 26}}, {"1a28.pdb.gz", {"STR", 23}}, {"19hc.pdb.gz", {"HEM", 43}}};
  for (const auto& [file, ligand] : ligands) {
    const Entry e = load_entry(kData + "/" + file);
    const std::vector<ChainSummary> summary = chains_of(e);
    int chains = 0;
    for (int c = 0; c < e.n_chains(); ++c)
      if (summary[c].mol == MolType::kLigand && e.sequence(c) == ligand.first) {
        EXPECT_EQ(summary[c].tokens, ligand.second) << file;
        ++chains;
      }
    EXPECT_GT(chains, 0) << file;
  }
  const Entry kinase = load_entry(kData + "/4jsv.pdb.gz");
  std::map<std::string, int> tokens_of;
  for (int c = 0; c < kinase.n_chains(); ++c)
    if (kinase.chain_mol_type(c) == MolType::kLigand) {
      int n = 0;
      for (int i = 0; i < kinase.n_tokens(); ++i) n += kinase.asym_id[i] == c;
      tokens_of[kinase.sequence(c)] = n;
    }
  EXPECT_EQ(tokens_of["ADP"], 27);
  EXPECT_EQ(tokens_of["MG"], 1);
  EXPECT_EQ(tokens_of["MGF"], 4);
}

// Reference features of ATP, HEM, MG, DA and U against the CCD: the per-atom tokens of a file
// carry the component's atoms, elements, charges and ideal coordinates; the standard residues'
// embedded table agrees with the CCD for the nucleotides.
TEST(Molecules, ReferenceFeaturesComeFromTheCcd) {
  const Ccd& c = ccd();
  const CcdComponent* atp = c.find("ATP");
  ASSERT_NE(atp, nullptr);
  int heavy = 0;
  for (const CcdAtom& a : atp->atoms) heavy += a.element > 1;
  EXPECT_EQ(heavy, 31);  // C10 N5 O13 P3
  EXPECT_EQ(atp->atoms[atp->atom_index("PG")].element, atomic_number("P"));
  const CcdComponent* mg = c.find("MG");
  ASSERT_NE(mg, nullptr);
  ASSERT_EQ(mg->atoms.size(), 1u);
  EXPECT_EQ(mg->atoms[0].element, 12);
  EXPECT_EQ(mg->atoms[0].charge, 2);
  const CcdComponent* hem = c.find("HEM");
  ASSERT_NE(hem, nullptr);
  EXPECT_EQ(hem->atoms[hem->atom_index("FE")].element, 26);
  EXPECT_EQ(hem->kind, CcdKind::kNonPolymer);
  EXPECT_EQ(c.find("DA")->kind, CcdKind::kDna);
  EXPECT_EQ(c.find("SEP")->parent, "SER");
  EXPECT_EQ(c.find("NOT_A_CODE"), nullptr);

  // The embedded nucleotide table is the CCD's (ideal coordinates, 3 decimals).
  const ReferenceTable& table = reference_atoms();
  for (const int t : {kDnaA, kRnaU}) {
    const CcdComponent* comp = c.find(residue_name(t));
    ASSERT_NE(comp, nullptr);
    for (int s = 0; s < atom_count(t); ++s) {
      const int k = comp->atom_index(atom_names(t)[s]);
      ASSERT_GE(k, 0) << residue_name(t) << " " << atom_names(t)[s];
      EXPECT_EQ(table[t][s].element, comp->atoms[k].element);
      EXPECT_EQ(table[t][s].charge, comp->atoms[k].charge);
      for (int x = 0; x < 3; ++x) EXPECT_NEAR(table[t][s].pos[x], comp->atoms[k].pos[x], 5e-4);
    }
  }

  // 6msm's ATP tokens carry the CCD's atoms in CCD order, leaving atoms only where resolved.
  const Entry e = load_entry(kData + "/6msm.pdb.gz");
  int first = -1;
  for (int i = 0; i < e.n_tokens() && first < 0; ++i)
    if (e.per_atom(i) && e.residue_code(i) == "ATP") first = i;
  ASSERT_GE(first, 0);
  int k = 0;
  for (const CcdAtom& a : atp->atoms) {
    if (a.leaving() && !e.atom_mask[(first + k) * kMaxAtomsPerToken]) continue;
    const TokenAtom& t = e.token_atoms[first + k];
    EXPECT_EQ(t.atom_name(), a.atom_name());
    EXPECT_EQ(t.element, a.element);
    EXPECT_EQ(t.charge, a.charge);
    for (int x = 0; x < 3; ++x) EXPECT_EQ(t.ref_pos[x], a.pos[x]);
    EXPECT_EQ(e.mol(first + k), MolType::kLigand);
    EXPECT_EQ(e.restype[first + k], kUnknownAminoAcid);
    ++k;
    if (first + k >= e.n_tokens() || e.residue_code(first + k) != "ATP") break;
  }
  EXPECT_GE(k, 27);
}

// Bonds: 3hsy's LINK records (ASN-NAG glycosylation, NAG-NAG and NAG-BMA glycosidic bonds), the
// CCD's bonds inside each ligand, and no standard-standard bonds.
TEST(Molecules, BondsFollowTheFileLinksAndTheCcd) {
  const Ccd& c = ccd();
  const Entry e = load_entry(kData + "/3hsy.pdb.gz");
  const auto asn = find_atom(e, "A", MolType::kProtein, 349, "ND2");
  const auto nag1 = find_atom(e, "C", MolType::kLigand, 1, "C1");
  const auto nag1_o4 = find_atom(e, "C", MolType::kLigand, 1, "O4");
  const auto nag2 = find_atom(e, "C", MolType::kLigand, 2, "C1");
  const auto nag2_o4 = find_atom(e, "C", MolType::kLigand, 2, "O4");
  const auto bma = find_atom(e, "C", MolType::kLigand, 3, "C1");
  for (const auto& a : {asn, nag1, nag1_o4, nag2, nag2_o4, bma}) ASSERT_GE(a.first, 0);
  EXPECT_TRUE(bonded(e, asn, nag1));  // ND2 in ASN's slot 7, C1 in the NAG token's slot 0
  EXPECT_EQ(asn.second, atom_slot(amino_acid_index("ASN"), "ND2"));
  EXPECT_TRUE(bonded(e, nag1_o4, nag2));
  EXPECT_TRUE(bonded(e, nag2_o4, bma));
  // Inside NAG 1 of chain C: every CCD bond between its heavy atoms, and nothing else.
  const CcdComponent* nag = c.find("NAG");
  std::set<std::pair<int32_t, int32_t>> expected;
  for (const CcdBond& b : nag->bonds) {
    const auto x = find_atom(e, "C", MolType::kLigand, 1, std::string(nag->atoms[b.a].atom_name()));
    const auto y = find_atom(e, "C", MolType::kLigand, 1, std::string(nag->atoms[b.b].atom_name()));
    if (x.first >= 0 && y.first >= 0) expected.insert({std::min(x.first, y.first), std::max(x.first, y.first)});
  }
  auto in_nag = [&](int i) {
    return e.per_atom(i) && e.chain_ids[e.asym_id[i]] == "C" && e.author_index[i] == 1 && e.residue_code(i) == "NAG";
  };
  std::set<std::pair<int32_t, int32_t>> inside;
  for (const Bond& b : e.bonds) {
    EXPECT_LT(b.i, b.j);
    EXPECT_TRUE(e.per_atom(b.i) || e.per_atom(b.j)) << "standard-standard bond " << b.i << "-" << b.j;
    if (e.per_atom(b.i)) EXPECT_EQ(b.slot_i, 0);
    if (in_nag(b.i) && in_nag(b.j)) inside.insert({b.i, b.j});
  }
  EXPECT_EQ(inside, expected);
  // NAG C 1 has all 14 heavy atoms but the leaving O1 (replaced by the link to ASN 349): all
  // 15 CCD bonds but C1-O1.
  EXPECT_EQ(nag->bonds.size(), 15u);
  EXPECT_EQ(expected.size(), 14u);

  // mmCIF: 2q2k's DNA carries 5-iodo-2'-deoxyuridine (5IU), linked O3'-P to its neighbours.
  const Entry dna = load_entry(kData + "/2q2k.cif.gz");
  ASSERT_EQ(dna.components, std::vector<std::string>{"5IU"});
  for (int i = 0; i < dna.n_tokens(); ++i) {
    if (!dna.per_atom(i) || dna.token_atoms[i].atom_name() != "P") continue;
    EXPECT_EQ(dna.mol(i), MolType::kDna);
    EXPECT_EQ(dna.restype[i], kUnknownDna);  // 5IU's parent DU is no DNA token type
    // The previous residue's O3' is bonded to this P.
    const int prev = dna.author_index[i] - 1;
    const auto o3 = find_atom(dna, dna.chain_ids[dna.asym_id[i]], MolType::kDna, prev, "O3'");
    if (o3.first >= 0) EXPECT_TRUE(bonded(dna, o3, {i, 0}));
  }
}

// Crops keep every ligand, ion and non-standard residue whole or leave it out, for every mode,
// size and seed, stay within the budget and are never empty (1afs: two 48-atom NADPs, crops
// down to 16 tokens).
TEST(Molecules, CropsNeverSplitALigand) {
  ccd();
  const CropWeights all_modes{1, 1, 1};
  for (const std::string file : {"6msm.pdb.gz", "19hc.pdb.gz", "3hsy.pdb.gz", "2q2k.cif.gz", "1afs.pdb.gz"}) {
    const Entry e = load_entry(kData + "/" + file);
    std::map<std::tuple<int, int>, int> size;  // per-atom residue -> tokens
    for (int i = 0; i < e.n_tokens(); ++i)
      if (e.per_atom(i)) ++size[{e.asym_id[i], e.residue_index[i]}];
    ASSERT_FALSE(size.empty()) << file;
    std::mt19937 rng(static_cast<uint32_t>(megafold::testing::fresh_seed()));
    for (int trial = 0; trial < 24; ++trial) {
      const int crop = 16 + static_cast<int>(rng() % 400);
      const uint64_t seed = rng();
      for (const std::vector<int32_t>& keep :
           {contiguous_crop(e, crop, seed), spatial_crop(e, crop, seed, false), spatial_crop(e, crop, seed, true),
            training_crop(e, crop, all_modes, seed)}) {
        EXPECT_LE(static_cast<int>(keep.size()), crop) << file;
        EXPECT_FALSE(keep.empty()) << file << " crop " << crop << " seed " << seed;
        std::map<std::tuple<int, int>, int> kept;
        for (const int32_t i : keep)
          if (e.per_atom(i)) ++kept[{e.asym_id[i], e.residue_index[i]}];
        for (const auto& [residue, n] : kept) EXPECT_EQ(n, size[residue]) << file << " crop " << crop << " seed " << seed;
      }
    }
  }
}

// Cache format 3 keeps every molecule type: an entry with ligands, DNA and a modified
// nucleotide decodes to the same entry, and its batch has the ligands' reference features.
TEST(Molecules, CacheAndBatchKeepLigands) {
  ccd();
  for (const std::string file : {"2q2k.cif.gz", "4jsv.pdb.gz", "3hsy.pdb.gz"}) {
    const Entry e = load_entry(kData + "/" + file);
    const std::string bytes = encode_entry(e);
    const Entry d = decode_entry(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), file);
    EXPECT_EQ(d.restype, e.restype);
    EXPECT_EQ(d.mol_type, e.mol_type);
    EXPECT_EQ(d.coords, e.coords);
    EXPECT_EQ(d.atom_mask, e.atom_mask);
    EXPECT_EQ(d.component, e.component);
    EXPECT_EQ(d.components, e.components);
    EXPECT_EQ(d.bonds, e.bonds);
    for (int i = 0; i < e.n_tokens(); ++i) {
      ASSERT_EQ(d.token_atoms[i].atom_name(), e.token_atoms[i].atom_name());
      ASSERT_EQ(d.token_atoms[i].element, e.token_atoms[i].element);
    }
    // Truncated or corrupted bytes are caught by name.
    EXPECT_THROW(decode_entry(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size() - 5, file), Error);
  }

  const Entry e = load_entry(kData + "/4jsv.pdb.gz");
  const int pad = e.n_tokens() + 3;
  const Batch b = make_batch({&e}, {{}}, pad, {});
  auto mol = b.mol_type.accessor<int64_t, 2>();
  auto uid = b.ref.space_uid.accessor<int64_t, 2>();
  auto element = b.ref.element.accessor<int64_t, 3>();
  auto mask = b.ref.mask.accessor<float, 3>();
  auto bonds = b.token_bonds.accessor<uint8_t, 3>();
  std::set<int64_t> uids;
  for (int i = 0; i < e.n_tokens(); ++i) {
    EXPECT_EQ(mol[0][i], e.mol_type[i]);
    const bool shares = i > 0 && e.per_atom(i) && e.per_atom(i - 1) && e.asym_id[i] == e.asym_id[i - 1] &&
                        e.residue_index[i] == e.residue_index[i - 1];
    if (shares) {
      EXPECT_EQ(uid[0][i], uid[0][i - 1]) << i;
    } else {
      EXPECT_TRUE(uids.insert(uid[0][i]).second) << i;
    }
    if (e.per_atom(i)) {
      EXPECT_EQ(element[0][i][0], e.token_atoms[i].element);
      EXPECT_EQ(mask[0][i][0], 1.f);
      for (int s = 1; s < kMaxAtomsPerToken; ++s) EXPECT_EQ(mask[0][i][s], 0.f);
    } else {
      for (int s = 0; s < kMaxAtomsPerToken; ++s) EXPECT_EQ(mask[0][i][s], s < atom_count(e.restype[i]) ? 1.f : 0.f);
    }
  }
  int64_t n_bonds = 0;
  // The atom list: every slot each token has, token by token; a ligand token has one.
  int64_t atoms = 0;
  for (int i = 0; i < e.n_tokens(); ++i) atoms += e.per_atom(i) ? 1 : atom_count(e.restype[i]);
  ASSERT_EQ(b.atom_index.size(1), atoms);
  EXPECT_EQ(b.atom_exists.sum().item<double>(), static_cast<double>(atoms));
  for (int i = 0; i < pad; ++i)
    for (int j = 0; j < pad; ++j) {
      EXPECT_EQ(bonds[0][i][j], bonds[0][j][i]);
      n_bonds += bonds[0][i][j];
    }
  std::set<std::pair<int32_t, int32_t>> token_pairs;
  for (const Bond& bond : e.bonds) token_pairs.insert({bond.i, bond.j});
  EXPECT_EQ(n_bonds, 2 * static_cast<int64_t>(token_pairs.size()));
  ASSERT_EQ(b.bond_atoms.size(1), static_cast<int64_t>(e.bonds.size()));
  for (size_t k = 0; k < e.bonds.size(); ++k) {
    const Bond& bond = e.bonds[k];
    EXPECT_EQ(bonds[0][bond.i][bond.j], 1);
    // Bond atoms index the atom list, whose entries name the dense slots.
    EXPECT_EQ(b.atom_index[0][b.bond_atoms[0][k][0].item<int64_t>()].item<int64_t>(), bond.i * kMaxAtomsPerToken + bond.slot_i);
    EXPECT_EQ(b.atom_index[0][b.bond_atoms[0][k][1].item<int64_t>()].item<int64_t>(), bond.j * kMaxAtomsPerToken + bond.slot_j);
  }
}

// A component the CCD lacks is skipped with a warning naming the file, chain and residue; a
// ligand with no resolved atom likewise; the rest of the entry is kept. Without a CCD table,
// ligands are skipped with one warning naming where the table was looked for.
TEST(Molecules, MalformedComponentsAreSkippedByName) {
  ccd();
  TempDir dir;
  const std::string pdb = gunzip(kData + "/1a28.pdb.gz");
  std::string unknown, unplaced;
  std::istringstream in(pdb);
  for (std::string l; std::getline(in, l);) {
    std::string u = l, p = l;
    if (l.rfind("HETATM", 0) == 0 && l.substr(17, 3) == "STR") {
      if (l[21] == 'A') u.replace(17, 3, "Z0Q");  // no such CCD code (checked below)
      if (l[21] == 'B') p.replace(30, 24, "   nan     nan     nan  ");
    }
    unknown += u + "\n";
    unplaced += p + "\n";
  }
  ASSERT_EQ(ccd().find("Z0Q"), nullptr);
  const Entry a = load_entry(dir.write("unknown.pdb", unknown));
  EXPECT_EQ(a.components, std::vector<std::string>{"STR"});  // chain B's steroid stays
  bool named = false;
  for (const std::string& w : a.warnings)
    named |= w.find("unknown.pdb: chain A residue Z0Q") != std::string::npos && w.find("not in the CCD") != std::string::npos;
  EXPECT_TRUE(named) << ::testing::PrintToString(a.warnings);
  const Entry b = load_entry(dir.write("unplaced.pdb", unplaced));
  int ligand_chains = 0;
  for (int c = 0; c < b.n_chains(); ++c) ligand_chains += b.chain_mol_type(c) == MolType::kLigand;
  EXPECT_EQ(ligand_chains, 1);
  named = false;
  for (const std::string& w : b.warnings) named |= w.find("unplaced.pdb: chain B residue STR") != std::string::npos;
  EXPECT_TRUE(named) << ::testing::PrintToString(b.warnings);

  const Entry none = load_entry(kData + "/1a28.pdb.gz", nullptr);
  EXPECT_TRUE(none.components.empty());
  EXPECT_EQ(none.n_chains(), 2);
  ASSERT_FALSE(none.warnings.empty());
  EXPECT_NE(none.warnings.front().find("no CCD table"), std::string::npos) << none.warnings.front();
}

// FASTA records of every kind (Boltz's header convention): DNA, RNA, ligands by CCD code with
// the CCD's atoms and bonds, unknown codes and unusable SMILES skipped with warnings naming
// file, line and chain; nucleotide letters checked per molecule type.
TEST(Molecules, FastaRecordsOfEveryKind) {
  const Ccd& c = ccd();
  TempDir dir;
  const std::string p = dir.write("mix.fasta",
                                  ">A|protein\nMKTAY\n>B|DNA\nacgtn\n>C|rna|msa.a3m\nACGUX\n>D|ccd\nATP, mg\n"
                                  ">E|ccd\nZ0Q\n>F|smiles\nC1CC(\n>sp|P69905|HBA_HUMAN\nMVLS\n");
  ASSERT_EQ(c.find("Z0Q"), nullptr);
  const Entry e = load_fasta(p);
  ASSERT_EQ(e.n_chains(), 5);
  EXPECT_EQ(e.chain_mol_type(0), MolType::kProtein);
  EXPECT_EQ(e.chain_mol_type(1), MolType::kDna);
  EXPECT_EQ(e.sequence(1), "ACGTN");
  EXPECT_EQ(e.chain_mol_type(2), MolType::kRna);
  EXPECT_EQ(e.sequence(2), "ACGUN");
  EXPECT_EQ(e.chain_mol_type(3), MolType::kLigand);
  EXPECT_EQ(e.sequence(3), "ATP.MG");
  EXPECT_EQ(e.chain_mol_type(4), MolType::kProtein);  // a UniProt header is a protein record
  int atp_atoms = 0;
  for (const CcdAtom& a : c.find("ATP")->atoms) atp_atoms += !a.leaving();
  int ligand_tokens = 0;
  for (int i = 0; i < e.n_tokens(); ++i) ligand_tokens += e.asym_id[i] == 3;
  EXPECT_EQ(ligand_tokens, atp_atoms + 1);
  int atp_bonds = 0;
  for (const CcdBond& b : c.find("ATP")->bonds) atp_bonds += !c.find("ATP")->atoms[b.a].leaving() && !c.find("ATP")->atoms[b.b].leaving();
  EXPECT_EQ(static_cast<int>(e.bonds.size()), atp_bonds);
  EXPECT_TRUE(std::all_of(e.atom_mask.begin(), e.atom_mask.end(), [](uint8_t m) { return m == 0; }));
  ASSERT_EQ(e.warnings.size(), 2u);
  EXPECT_NE(e.warnings[0].find("mix.fasta:9: chain E component Z0Q is not in the CCD"), std::string::npos) << e.warnings[0];
  // Unparsable with RDKit, or no RDKit: skipped either way, by name.
  EXPECT_NE(e.warnings[1].find("mix.fasta:11: chain E SMILES 'C1CC('"), std::string::npos) << e.warnings[1];

  auto error = [&](const std::string& text) {
    try {
      load_fasta(dir.write("bad.fasta", text));
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(">A|dna\nACGU\n").find(":2:4: 'U' is not a DNA nucleotide code"), std::string::npos);
  EXPECT_NE(error(">A|rna\nACGT\n").find(":2:4: 'T' is not an RNA nucleotide code"), std::string::npos);
  EXPECT_NE(error(">A|ccd\nZ0Q\n").find("no residues or ligands left"), std::string::npos);
}

// Scores of structures with ligands: the ground truth and any rigid motion of it score lDDT 1
// per molecule type and ligand RMSD 0; a ligand shifted by 2 A off its pocket scores RMSD 2
// whatever the whole prediction's frame; types an entry lacks are NaN.
TEST(Molecules, ScoresPerMoleculeTypeAndLigandRmsd) {
  ccd();
  const Entry e = load_entry(kData + "/1a28.pdb.gz");  // protein and two steroid chains
  const Batch b = make_batch({&e}, {{}}, 0, {});
  const int64_t A = b.n_tokens() * kMaxAtomsPerToken;
  const at::Tensor truth = b.atom_coords.reshape({1, A, 3});
  const at::Tensor rot = std::get<0>(at::linalg_qr(at::randn({3, 3}, at::kDouble))).to(at::kFloat);
  const at::Tensor moved = at::matmul(truth, rot) + 5.0;
  // Ligand chain 2 (the steroid of chain A) shifted by (2, 0, 0) in a copy of the truth.
  at::Tensor shifted = truth.clone();
  const at::Tensor lig = (b.asym_id[0] == 2).repeat_interleave(kMaxAtomsPerToken);
  shifted.select(2, 0).index_put_({at::indexing::Slice(), lig}, shifted.select(2, 0).index({at::indexing::Slice(), lig}) + 2.0);
  const model::StructureScores s = model::score_structures(at::cat({truth, moved, at::matmul(shifted, rot)}), b);
  ASSERT_EQ(s.ligand_rmsd.sizes(), (at::IntArrayRef{3, 2}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(s.lddt_all[r].item<double>(), 1.0, 1e-6);
    EXPECT_NEAR(s.lddt_by_type[r][static_cast<int>(MolType::kProtein)].item<double>(), 1.0, 1e-6);
    EXPECT_NEAR(s.lddt_by_type[r][static_cast<int>(MolType::kLigand)].item<double>(), 1.0, 1e-6);
    EXPECT_TRUE(std::isnan(s.lddt_by_type[r][static_cast<int>(MolType::kDna)].item<double>()));
    EXPECT_NEAR(s.ligand_rmsd[r][0].item<double>(), 0.0, 1e-3);
    EXPECT_NEAR(s.ligand_rmsd[r][1].item<double>(), 0.0, 1e-3);
  }
  EXPECT_NEAR(s.ligand_rmsd[2][0].item<double>(), 2.0, 1e-3);  // the shifted steroid
  EXPECT_NEAR(s.ligand_rmsd[2][1].item<double>(), 0.0, 1e-3);  // the other one is in place
  EXPECT_LT(s.lddt_by_type[2][static_cast<int>(MolType::kLigand)].item<double>(), 1.0);
  EXPECT_NEAR(s.lddt_by_type[2][static_cast<int>(MolType::kProtein)].item<double>(), 1.0, 0.05);
}

// SMILES through the RDKit plugin: aspirin's 13 heavy atoms (C9 O4) and 13 bonds with an
// ETKDG conformer whose bonded distances are chemical (1.1-1.6 A), the same for the same seed;
// a SMILES RDKit cannot parse is an error saying so, and a FASTA smiles record a ligand chain.
TEST(Molecules, SmilesLigandsThroughRdkit) {
  if (rdkit_plugin_path().empty()) GTEST_SKIP() << "built without RDKit (setup installs librdkit-dev)";
  const SmilesLigand a = smiles_ligand("CC(=O)Oc1ccccc1C(=O)O", 7);
  ASSERT_EQ(a.atoms.size(), 13u);
  EXPECT_EQ(a.bonds.size(), 13u);
  std::map<int, int> elements;
  for (const TokenAtom& t : a.atoms) ++elements[t.element];
  EXPECT_EQ(elements[6], 9);
  EXPECT_EQ(elements[8], 4);
  EXPECT_EQ(a.atoms[0].atom_name(), "C1");
  for (const auto& [i, j] : a.bonds) {
    double d2 = 0;
    for (int x = 0; x < 3; ++x) d2 += std::pow(a.atoms[i].ref_pos[x] - a.atoms[j].ref_pos[x], 2);
    EXPECT_GT(std::sqrt(d2), 1.1);
    EXPECT_LT(std::sqrt(d2), 1.6);
  }
  const SmilesLigand again = smiles_ligand("CC(=O)Oc1ccccc1C(=O)O", 7);
  for (size_t k = 0; k < a.atoms.size(); ++k)
    for (int x = 0; x < 3; ++x) EXPECT_EQ(again.atoms[k].ref_pos[x], a.atoms[k].ref_pos[x]);
  const SmilesLigand ion = smiles_ligand("[Mg+2]", 1);
  ASSERT_EQ(ion.atoms.size(), 1u);
  EXPECT_EQ(ion.atoms[0].charge, 2);
  try {
    smiles_ligand("C1CC(", 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot parse"), std::string::npos) << e.what();
  }
  TempDir dir;
  const Entry e = load_fasta(dir.write("lig.fasta", ">A|protein\nMKTAY\n>B|smiles\nCC(=O)Oc1ccccc1C(=O)O\n"));
  ASSERT_EQ(e.n_chains(), 2);
  EXPECT_EQ(e.chain_mol_type(1), MolType::kLigand);
  EXPECT_EQ(e.components, std::vector<std::string>{"LIG"});
  EXPECT_EQ(e.n_tokens(), 5 + 13);
  EXPECT_EQ(e.bonds.size(), 13u);
}

// A damaged CCD table is an error naming the file and what is wrong (bad magic, truncation).
TEST(Molecules, DamagedCcdTablesAreNamed) {
  const Ccd& c = ccd();
  TempDir dir;
  std::ifstream in(c.path(), std::ios::binary);
  std::string bytes(1 << 16, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto error = [](const std::string& path) {
    try {
      Ccd table(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string cut = dir.write("cut.mfccd", bytes);  // the header promises far more
  EXPECT_NE(error(cut).find(cut + ": truncated or corrupt CCD table"), std::string::npos) << error(cut);
  std::string bad = bytes;
  bad[0] = 'X';
  const std::string magic = dir.write("magic.mfccd", bad);
  EXPECT_NE(error(magic).find(magic + ": not a CCD table (bad magic)"), std::string::npos) << error(magic);
  EXPECT_NE(error(dir.str() + "/none.mfccd").find("cannot open the CCD table"), std::string::npos);
}

// The atom list's padding points at slot kMaxAtomsPerToken - 1, which no residue type may use.
TEST(Molecules, TheLastAtomSlotIsFree) {
  for (int t = 0; t < kNumResidueTypes; ++t) EXPECT_LT(atom_count(t), kMaxAtomsPerToken) << residue_name(t);
}

// RNA alignments: letters read with the RNA alphabet (T as U, others as N).
TEST(Molecules, RnaMsaUsesTheNucleotideAlphabet) {
  const Msa m = parse_a3m(">q\nACGU\n>h\nACTX\n>i\nA-gGU\n", "rna.a3m", MolType::kRna);
  ASSERT_EQ(m.depth, 3);
  ASSERT_EQ(m.length, 4);
  EXPECT_EQ(m.tokens[0], kRnaA);
  EXPECT_EQ(m.tokens[3], kRnaU);
  EXPECT_EQ(m.tokens[4 + 2], kRnaU);        // T
  EXPECT_EQ(m.tokens[4 + 3], kUnknownRna);  // X
  EXPECT_EQ(m.tokens[8 + 1], kGapToken);
  EXPECT_EQ(m.deletions[8 + 2], 1);  // the insertion 'g' before G
  EXPECT_THROW(parse_a3m(">q\nAC1U\n", "bad.a3m", MolType::kRna), Error);
}

}  // namespace
}  // namespace megafold::data
