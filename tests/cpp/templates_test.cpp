// Templates (data/templates.h): the global alignment against hand-worked examples; a template
// structure read from a real mmCIF (residues of 1UBQ, tests/fixtures/templates/); the same hit
// as a3m, Stockholm and m8 mapping the same residues onto the same template atoms; every
// filter; the cache round trip and crops; the batch tensors and the seeded selection; and
// templates given in AlphaFold 3 JSON.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/check.h"
#include "data/af3_json.h"
#include "data/alignment.h"
#include "data/cache.h"
#include "data/features.h"
#include "data/sequence_entry.h"
#include "data/templates.h"
#include "testing.h"

namespace megafold::data {
namespace {
namespace fs = std::filesystem;
using namespace megafold::testing;

const std::string kFixtures = MEGAFOLD_TEST_SOURCE_DIR "/tests/fixtures/templates";
const std::string kTemplate = kFixtures + "/1ubq.cif";

// 1UBQ's first 24 residues (the template fixture's modelled ones, residue 17 unmodelled).
const std::string kUbiquitin24 = "MQIFVKTLTGKTITLEVEPSDTIE";
// The query used against it: T7 deleted, A inserted after S20, Q2E and K11R substituted (so the
// hit is no near-duplicate: 21 of 23 aligned residues identical).
const std::string kQuery = "MEIFVKLTGRTITLEVEPSADTIE";
// The hit as AF3's template search writes it in a3m: template residue 7 (T) is an insertion
// (lower case), the query's A has no template residue ('-').
const std::string kHitRow = "MQIFVKtLTGKTITLEVEPS-DTIE";
// Template residue (label_seq_id) each query residue aligns to, 0 for none.
const std::vector<int> kExpected = {1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 0, 21, 22, 23, 24};

std::vector<int8_t> tokens_of(const std::string& letters) {
  std::vector<int8_t> t;
  for (char c : letters) t.push_back(static_cast<int8_t>(amino_acid_of_letter(c)));
  return t;
}

// A sequence-only entry of protein chains (ids A, B, ...), residues numbered from 1.
Entry protein_entry(const std::string& name, const std::vector<std::string>& chains) {
  Entry e;
  e.name = name;
  for (size_t c = 0; c < chains.size(); ++c) {
    for (size_t k = 0; k < chains[c].size(); ++k)
      push_residue(e, amino_acid_of_letter(chains[c][k]), static_cast<int>(c), static_cast<int32_t>(k + 1));
    e.chain_ids.push_back(chain_label(static_cast<int>(c)));
  }
  finish_sequence_entry(e, name);
  return e;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

// Templates of `e` from one hit list `file_name` holding `text`, structures from `mmcif`.
struct Attached {
  Entry entry;
  TemplateCounts counts;
  std::vector<std::string> warnings;
};
Attached attach(Entry e, const std::string& file_name, const std::string& text, const std::string& mmcif = kFixtures,
                const std::string& max_date = "") {
  const TempDir dir;
  dir.write(file_name, text);
  Attached a;
  a.counts = attach_templates(e, {dir.str(), mmcif, max_date}, a.warnings);
  a.entry = std::move(e);
  return a;
}

std::string a3m_hit(const std::string& header, const std::string& row) {
  return ">query\n" + kQuery + "\n>" + header + "\n" + row + "\n";
}

// --- Alignment -------------------------------------------------------------------------------

TEST(TemplateAlignment, Blosum62IsTheNcbiTable) {
  const auto aa = [](char c) { return amino_acid_of_letter(c); };
  EXPECT_EQ(blosum62(aa('W'), aa('W')), 11);
  EXPECT_EQ(blosum62(aa('C'), aa('C')), 9);
  EXPECT_EQ(blosum62(aa('A'), aa('R')), -1);
  EXPECT_EQ(blosum62(aa('I'), aa('V')), 3);
  EXPECT_EQ(blosum62(aa('F'), aa('Y')), 3);
  EXPECT_EQ(blosum62(aa('W'), aa('N')), -4);
  EXPECT_EQ(blosum62(aa('X'), aa('P')), -2);  // UNK scores as X
  for (int a = 0; a <= kUnknownAminoAcid; ++a)
    for (int b = 0; b <= kUnknownAminoAcid; ++b) EXPECT_EQ(blosum62(a, b), blosum62(b, a)) << a << " " << b;
}

// Worked by hand with BLOSUM62 and gaps of 11 + 1 per residue: ACDW against ADW can leave out
// A (-12 + C/A 0 + D/D 6 + W/W 11 = 5), C (4 - 12 + 6 + 11 = 9), D (4 + C/D -3 - 12 + 11 = 0)
// or W (4 - 3 + D/W -4 - 12 = -15): C it is. WWAAWW against WWWW: one gap of two residues
// (4 * 11 - 13 = 31) beats two of one (44 - 24 = 20) and any W/A pairing (-3 each).
TEST(TemplateAlignment, HandWorkedExamples) {
  const GlobalAlignment one = align_global(tokens_of("ACDW"), tokens_of("ADW"));
  EXPECT_EQ(one.score, 9);
  EXPECT_EQ(one.a_to_b, (std::vector<int32_t>{0, -1, 1, 2}));
  const GlobalAlignment two = align_global(tokens_of("WWAAWW"), tokens_of("WWWW"));
  EXPECT_EQ(two.score, 31);
  EXPECT_EQ(two.a_to_b, (std::vector<int32_t>{0, 1, -1, -1, 2, 3}));
  // Gaps in the other sequence, and at the ends.
  const GlobalAlignment three = align_global(tokens_of("HW"), tokens_of("GHWG"));
  EXPECT_EQ(three.score, 8 + 11 - 2 * 12);
  EXPECT_EQ(three.a_to_b, (std::vector<int32_t>{1, 2}));
  const GlobalAlignment empty = align_global({}, tokens_of("AC"));
  EXPECT_EQ(empty.score, -13);
  EXPECT_TRUE(empty.a_to_b.empty());
  // The m8 case of the tests below: the query against template residues 1-24.
  const GlobalAlignment hit = align_global(tokens_of(kQuery), tokens_of(kUbiquitin24));
  for (size_t i = 0; i < kExpected.size(); ++i) EXPECT_EQ(hit.a_to_b[i], kExpected[i] - 1) << i;
}

// --- Template structures ---------------------------------------------------------------------

TEST(TemplateStructures, ReadResiduesAtomsAndRelease) {
  const TemplateStructure st = read_template_structure(kTemplate);
  EXPECT_EQ(st.id, "1ubq");
  EXPECT_EQ(st.release_date, "1987-04-16");  // the first revision, not the deposition
  ASSERT_EQ(st.chains.size(), 1u);
  const TemplateStructure::Chain& c = st.chains[0];
  EXPECT_EQ(c.author_id, "A");
  ASSERT_EQ(c.size(), 76);  // entity_poly_seq, though only 1-24 have atoms
  EXPECT_EQ(st.find_chain("A"), &c);
  EXPECT_EQ(st.find_chain("B"), nullptr);
  auto atom = [&](int residue, int slot, int x) { return c.coords[((residue - 1) * kTemplateAtoms + slot) * 3 + x]; };
  auto mask = [&](int residue, int slot) { return c.mask[(residue - 1) * kTemplateAtoms + slot]; };
  EXPECT_EQ(c.restype[0], amino_acid_of_letter('M'));
  EXPECT_FLOAT_EQ(atom(1, 0, 0), 27.340f);  // MET 1 N
  EXPECT_FLOAT_EQ(atom(1, 0, 2), 2.614f);
  EXPECT_FLOAT_EQ(atom(1, 3, 0), 25.112f);  // MET 1 CB
  EXPECT_FLOAT_EQ(atom(4, 1, 0), 27.272f);  // PHE 4 CA: altloc B (occupancy 0.60 over 0.40)
  EXPECT_FLOAT_EQ(atom(4, 1, 1), 33.436f);
  EXPECT_EQ((std::vector<int>{mask(5, 0), mask(5, 1), mask(5, 2), mask(5, 3)}), (std::vector<int>{1, 1, 1, 0}));  // VAL 5 CB removed
  EXPECT_EQ(c.restype[9], amino_acid_of_letter('G'));
  for (int x = 0; x < 3; ++x) EXPECT_EQ(atom(10, 3, x), atom(10, 1, x));  // GLY 10: CB is CA
  EXPECT_EQ(mask(10, 3), 1);
  EXPECT_FLOAT_EQ(atom(10, 1, 0), 28.978f);
  EXPECT_EQ(c.restype[16], amino_acid_of_letter('V'));  // VAL 17: in the sequence, not modelled
  for (int s = 0; s < kTemplateAtoms; ++s) EXPECT_EQ(mask(17, s), 0);
  EXPECT_EQ(c.restype[29], amino_acid_of_letter('I'));  // ILE 30 from entity_poly_seq
  EXPECT_EQ(mask(30, 1), 0);
  // Not mmCIF: named.
  const TempDir dir;
  const std::string bad = dir.write("9bad.cif", "this is not a structure\n");
  EXPECT_NE(error_of([&] { read_template_structure(bad); }).find(bad), std::string::npos);
  // The mirror layout, gzipped.
  fs::create_directories(fs::path(dir.str()) / "ub");
  write_gzip((fs::path(dir.str()) / "ub" / "1ubq.cif.gz").string(), read_text(kTemplate));
  EXPECT_EQ(find_template_mmcif(dir.str(), "1ubq"), (fs::path(dir.str()) / "ub" / "1ubq.cif.gz").string());
  EXPECT_EQ(find_template_mmcif(kFixtures, "1ubq"), kTemplate);
  EXPECT_EQ(find_template_mmcif(kFixtures, "2abc"), "");
}

// --- Hit lists -------------------------------------------------------------------------------

// Each query residue's template row against the fixture's residue kExpected[i].
void expect_expected_mapping(const ChainTemplate& t) {
  const TemplateStructure st = read_template_structure(kTemplate);
  const TemplateStructure::Chain& c = st.chains[0];
  ASSERT_EQ(t.size(), static_cast<int64_t>(kQuery.size()));
  EXPECT_EQ(t.name, "1ubq_A");
  for (size_t i = 0; i < kExpected.size(); ++i) {
    if (kExpected[i] == 0) {
      EXPECT_EQ(t.restype[i], kGapToken) << i;
      for (int s = 0; s < kTemplateAtoms; ++s) EXPECT_EQ(t.mask[i * kTemplateAtoms + s], 0);
      continue;
    }
    const int r = kExpected[i] - 1;
    EXPECT_EQ(t.restype[i], c.restype[r]) << i;
    EXPECT_EQ(t.restype[i], amino_acid_of_letter(kUbiquitin24[r])) << i;
    for (int k = 0; k < kTemplateAtoms * 3; ++k) EXPECT_EQ(t.coords[i * kTemplateAtoms * 3 + k], c.coords[r * kTemplateAtoms * 3 + k]);
    for (int s = 0; s < kTemplateAtoms; ++s) EXPECT_EQ(t.mask[i * kTemplateAtoms + s], c.mask[r * kTemplateAtoms + s]);
  }
  // The rows the fixture singles out: VAL 5 without CB, GLY 10 with CA as CB, VAL 17 unmodelled.
  EXPECT_EQ(t.mask[4 * kTemplateAtoms + 3], 0);
  EXPECT_EQ(t.mask[4 * kTemplateAtoms + 1], 1);
  EXPECT_EQ(t.restype[8], amino_acid_of_letter('G'));
  EXPECT_EQ(t.coords[8 * kTemplateAtoms * 3 + 9], t.coords[8 * kTemplateAtoms * 3 + 3]);
  EXPECT_EQ(t.mask[8 * kTemplateAtoms + 3], 1);
  EXPECT_EQ(t.restype[15], amino_acid_of_letter('V'));
  EXPECT_EQ(t.mask[15 * kTemplateAtoms + 1], 0);
}

TEST(TemplateHits, A3mStockholmAndM8GiveTheSameResidues) {
  const Entry e = protein_entry("test", {kQuery});
  const std::string a3m = a3m_hit("1ubq_A/1-24 mol:protein length:76  UBIQUITIN", kHitRow);
  // hmmsearch -A: no query row, match states in #=GC RF, two blocks.
  const std::string sto =
      "# STOCKHOLM 1.0\n\n#=GS 1ubq_A/1-24 DE [subseq from] mol:protein length:76  UBIQUITIN\n\n"
      "1ubq_A/1-24         MQIFVKtLTGKTITL\n#=GR 1ubq_A/1-24 PP  ***************\n#=GC PP_cons        ***************\n"
      "#=GC RF             xxxxxx.xxxxxxxx\n\n"
      "1ubq_A/1-24         EVEPS-DTIE\n#=GR 1ubq_A/1-24 PP  **********\n#=GC PP_cons        **********\n"
      "#=GC RF             xxxxxxxxxx\n//\n";
  // A query row first (jackhmmer-style): its gap column holds the template's insertion.
  const std::string sto_query = "# STOCKHOLM 1.0\nquery        MEIFVK-LTGRTITLEVEPSADTIE\n"
                                "1ubq_A/1-24  MQIFVKTLTGKTITLEVEPS-DTIE\n//\n";
  const std::string m8 = "# query target pident alnlen mismatch gapopen qstart qend tstart tend evalue bits\n"
                         "test_A\t1ubq_A\t91.3\t25\t2\t2\t1\t24\t1\t24\t1.2e-12\t45.1\n";
  std::vector<ChainTemplate> results;
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"test_A.a3m", a3m}, {"test_A.sto", sto}, {"test_A.sto", sto_query}, {"test_A.m8", m8}}) {
    const Attached a = attach(e, file, text);
    EXPECT_TRUE(a.warnings.empty()) << file << ": " << joined(a.warnings);
    EXPECT_EQ(a.counts.read, 1) << file;
    ASSERT_EQ(a.counts.kept, 1) << file;
    ASSERT_EQ(a.entry.templates.size(), 1u);
    ASSERT_EQ(a.entry.templates[0].size(), 1u);
    expect_expected_mapping(a.entry.templates[0][0]);
    results.push_back(a.entry.templates[0][0]);
  }
  for (size_t k = 1; k < results.size(); ++k) {
    EXPECT_EQ(results[k].restype, results[0].restype) << k;
    EXPECT_EQ(results[k].coords, results[0].coords) << k;
    EXPECT_EQ(results[k].mask, results[0].mask) << k;
  }
  // Gzipped hit lists read alike.
  const TempDir dir;
  write_gzip(dir.str() + "/test_A.a3m.gz", a3m);
  Entry z = e;
  std::vector<std::string> warnings;
  EXPECT_EQ(attach_templates(z, {dir.str(), kFixtures, ""}, warnings).kept, 1);
  EXPECT_EQ(z.templates[0][0].restype, results[0].restype);
}

TEST(TemplateHits, ParsesNamesRangesInsertionsAndDeletions) {
  const TemplateHits h = parse_template_hits(
      ">1ABC_B/3-7 mol:protein length:50\nAcD-eFG\n>2xyz_AA\n--KLM\n>not a hit\nAAAA\n", "x.a3m", TemplateFormat::kA3m);
  EXPECT_TRUE(h.query.empty());  // the first record is a hit
  // A(q0, r3) c(r4) D(q1, r5) -(q2) e(r6) F(q3, r7) G(q4, r8): six residues, but the range
  // says 3-7; and a record that names no hit.
  ASSERT_EQ(h.hits.size(), 1u);
  EXPECT_EQ(h.hits[0].pdb_id, "2xyz");
  EXPECT_EQ(h.hits[0].chain, "AA");
  EXPECT_EQ(h.hits[0].line, 3);
  ASSERT_EQ(h.malformed.size(), 2u);
  EXPECT_NE(h.malformed[0].find("line 1: 1ABC_B/3-7: the range 3-7 spans 5 residues, the row has 6"), std::string::npos)
      << h.malformed[0];
  EXPECT_NE(h.malformed[1].find("line 5: 'not' is not a <pdbid>_<chain> hit name"), std::string::npos) << h.malformed[1];
  const TemplateHits ok = parse_template_hits(">q\nMKTAY\n>1abc_B/3-8\nAcD-eFG\n>2xyz_AA\n--KLM\n", "x.a3m",
                                              TemplateFormat::kA3m);
  ASSERT_EQ(ok.hits.size(), 2u);
  EXPECT_EQ(ok.query, tokens_of("MKTAY"));
  const std::vector<std::pair<int, int>> want = {{0, 3}, {1, 5}, {3, 7}, {4, 8}};
  ASSERT_EQ(ok.hits[0].pairs.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(ok.hits[0].pairs[k].query, want[k].first) << k;
    EXPECT_EQ(ok.hits[0].pairs[k].residue, want[k].second) << k;
  }
  EXPECT_EQ(ok.hits[0].pairs[1].type, amino_acid_of_letter('D'));
  EXPECT_EQ(ok.hits[1].chain, "AA");
  EXPECT_EQ(ok.hits[1].pairs[0].query, 2);  // no range: template residues from 1
  EXPECT_EQ(ok.hits[1].pairs[0].residue, 1);
  // Rows of another width than the query, and m8 lines without spans, are left out and named.
  const TemplateHits wide = parse_template_hits(">q\nMKT\n>1abc_A\nMKTA\n", "w.a3m", TemplateFormat::kA3m);
  ASSERT_EQ(wide.malformed.size(), 1u);
  EXPECT_NE(wide.malformed[0].find("4 query columns, the query has 3"), std::string::npos);
  const TemplateHits m8 = parse_template_hits("q\t1abc_A\t50\t10\t1\t0\t5\t2\t1\t10\t1e-3\t20\nq\tjunk\n", "m.m8",
                                              TemplateFormat::kM8);
  EXPECT_TRUE(m8.hits.empty());
  ASSERT_EQ(m8.malformed.size(), 2u);
  EXPECT_NE(m8.malformed[0].find("line 1: 1abc_A: qstart, qend, tstart, tend must be 1-based spans"), std::string::npos);
  EXPECT_NE(m8.malformed[1].find("line 2: 2 fields"), std::string::npos);
  // A Stockholm file whose rows differ in width cannot be placed at all.
  EXPECT_NE(error_of([] { parse_template_hits("1abc_A/1-3 MKT\n1abc_B/1-2 MK\n", "s.sto", TemplateFormat::kStockholm); })
                .find("s.sto:2: row 1abc_B/1-2 has 2 columns, 1abc_A/1-3 has 3"),
            std::string::npos);
}

TEST(TemplateHits, RangeOffsetMapsToTheLabelSeqId) {
  const Entry e = protein_entry("test", {kQuery});
  // Residues 5-24 of the template: query residue 4 (V) is label_seq_id 5.
  const Attached a = attach(e, "test_A.a3m", a3m_hit("1ubq_A/5-24", "----VKtLTGKTITLEVEPS-DTIE"));
  ASSERT_EQ(a.counts.kept, 1) << joined(a.warnings);
  const ChainTemplate& t = a.entry.templates[0][0];
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.restype[i], kGapToken);
  EXPECT_EQ(t.restype[4], amino_acid_of_letter('V'));
  EXPECT_FLOAT_EQ(t.coords[4 * kTemplateAtoms * 3 + 0], 28.260f);  // VAL 5 N
  EXPECT_FLOAT_EQ(t.coords[4 * kTemplateAtoms * 3 + 5], 12.503f);  // VAL 5 CA z
  EXPECT_EQ(t.restype[6], amino_acid_of_letter('L'));              // L8, after the inserted T7
  EXPECT_EQ(t.restype[23], amino_acid_of_letter('E'));             // E24
  // One residue off, the hit's letters no longer match the structure: unusable, named.
  const Attached off = attach(e, "test_A.a3m", a3m_hit("1ubq_A/6-25", "----VKtLTGKTITLEVEPS-DTIE"));
  EXPECT_EQ(off.counts.kept, 0);
  EXPECT_EQ(off.counts.unusable, 1);
  const std::string w = joined(off.warnings);
  EXPECT_NE(w.find("test_A.a3m: 1 of 1 hits not used: 1 not matching their structure (first: line 3, 1ubq_A: "
                   "template residue 6 is 'V' in the hit, LYS in the structure)"),
            std::string::npos)
      << w;
}

TEST(TemplateHits, FiltersSelfShortDuplicateAndLaterHits) {
  const std::string full = a3m_hit("1ubq_A/1-24", kHitRow);
  // The entry's own structure.
  const Attached self = attach(protein_entry("1UBQ", {kQuery}), "1UBQ_A.a3m", full);
  EXPECT_EQ(self.counts.self, 1);
  EXPECT_EQ(self.counts.kept, 0);
  EXPECT_TRUE(self.entry.templates.empty());
  EXPECT_TRUE(self.warnings.empty());
  EXPECT_EQ(entry_pdb_id("1ubq-assembly1"), "1ubq");
  EXPECT_EQ(entry_pdb_id("1ubqx"), "");
  EXPECT_EQ(entry_pdb_id("test"), "");
  // Seven aligned residues.
  const Attached short_hit = attach(protein_entry("test", {kQuery}), "test_A.a3m",
                                    a3m_hit("1ubq_A/1-8", "MQIFVKtL" + std::string(17, '-')));
  EXPECT_EQ(short_hit.counts.short_hits, 1);
  EXPECT_EQ(short_hit.counts.kept, 0);
  // The query identical to the template over all 24 residues; 23 of 24 identical (95.8%) is a
  // near-duplicate still (kQuery's 21 of 23, 91%, is kept in the tests above).
  const Attached dup = attach(protein_entry("test", {kUbiquitin24}), "test_A.a3m",
                              ">q\n" + kUbiquitin24 + "\n>1ubq_A/1-24\n" + kUbiquitin24 + "\n");
  EXPECT_EQ(dup.counts.duplicates, 1);
  EXPECT_EQ(dup.counts.kept, 0);
  const std::string one_off = kUbiquitin24.substr(0, 23) + "A";  // E24A: 23 of 24 identical, 95.8%
  const Attached near = attach(protein_entry("test", {one_off}), "test_A.a3m",
                               ">q\n" + one_off + "\n>1ubq_A/1-24\n" + kUbiquitin24 + "\n");
  EXPECT_EQ(near.counts.duplicates, 1);
  // Released 1987-04-16: kept up to that day, dropped before it.
  EXPECT_EQ(attach(protein_entry("test", {kQuery}), "test_A.a3m", full, kFixtures, "1987-04-16").counts.kept, 1);
  const Attached later = attach(protein_entry("test", {kQuery}), "test_A.a3m", full, kFixtures, "1987-04-15");
  EXPECT_EQ(later.counts.released_later, 1);
  EXPECT_EQ(later.counts.kept, 0);
  EXPECT_TRUE(later.warnings.empty());
  // The entry's own deposition date: a template released before it is kept, one released that
  // day or later is not, whatever the maximum date.
  Entry deposited = protein_entry("test", {kQuery});
  deposited.deposition_date = "1987-04-17";
  EXPECT_EQ(attach(deposited, "test_A.a3m", full).counts.kept, 1);
  deposited.deposition_date = "1987-04-16";
  EXPECT_EQ(attach(deposited, "test_A.a3m", full).counts.released_later, 1);
  EXPECT_EQ(attach(deposited, "test_A.a3m", full, kFixtures, "2030-01-01").counts.kept, 0);
  // Structure files give that date: mmCIF's deposition date, a PDB file's HEADER date.
  EXPECT_EQ(load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/3u8v.cif.gz").deposition_date, "2011-10-17");
  EXPECT_EQ(load_entry(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1ubi.pdb.gz").deposition_date, "1994-02-03");
  EXPECT_NE(error_of([] {
              Entry e = protein_entry("test", {kQuery});
              std::vector<std::string> w;
              attach_templates(e, {"d", "m", "1987-4-15"}, w);
            }).find("'1987-4-15' is not YYYY-MM-DD"),
            std::string::npos);
}

// Without a query row, column k is the residue numbered k + 1: rows of 20 columns cannot be a
// 24-residue chain's, and are refused with a warning naming the file rather than shifted.
TEST(TemplateHits, HitRowsWithoutAQueryMustSpanTheChainsNumbering) {
  const Attached narrow = attach(protein_entry("test", {kUbiquitin24}), "test_A.a3m",
                                 ">1ubq_A/1-20\n" + kUbiquitin24.substr(0, 20) + "\n");
  EXPECT_EQ(narrow.counts.kept, 0);
  EXPECT_EQ(narrow.counts.unusable, 1);
  ASSERT_EQ(narrow.warnings.size(), 1u);
  EXPECT_NE(narrow.warnings[0].find("test_A.a3m"), std::string::npos) << narrow.warnings[0];
  EXPECT_NE(narrow.warnings[0].find("20 query columns"), std::string::npos) << narrow.warnings[0];
  // The same hit over all 24 columns is used.
  const Attached whole = attach(protein_entry("test", {kUbiquitin24}), "test_A.a3m",
                                ">1ubq_A/1-20\n" + kUbiquitin24.substr(0, 20) + "----\n");
  EXPECT_EQ(whole.counts.kept, 1);
}

// The structures a cache build shares among its workers: each read once while kept, the least
// recently used dropped past the capacity, a failed read remembered with its reason, and the
// same answers from many threads at once.
TEST(TemplateStructures, ACacheBuildReadsEachStructureOnceWhileKept) {
  const TempDir dir;
  for (const char* id : {"1ubq", "2ubq", "3ubq"}) dir.write(std::string(id) + ".cif", read_text(kTemplate));
  TemplateStructureCache cache(2);
  std::string why;
  const auto a = cache.get(dir.str(), "1ubq", why);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(cache.get(dir.str(), "1ubq", why), a);  // kept: the same object, no second read
  EXPECT_EQ(cache.reads(), 1u);
  cache.get(dir.str(), "2ubq", why);
  cache.get(dir.str(), "1ubq", why);  // 1ubq is now the most recently used
  cache.get(dir.str(), "3ubq", why);  // drops 2ubq
  EXPECT_EQ(cache.reads(), 3u);
  EXPECT_EQ(cache.get(dir.str(), "1ubq", why), a);
  cache.get(dir.str(), "2ubq", why);
  EXPECT_EQ(cache.reads(), 4u);
  EXPECT_EQ(cache.get(dir.str(), "9zzz", why), nullptr);
  EXPECT_NE(why.find("no 9zzz.cif"), std::string::npos) << why;
  // Many threads asking for the structures at once all get them; each is read at most once per thread.
  TemplateStructureCache shared;
  std::vector<std::thread> threads;
  std::atomic<int> found{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      std::string w;
      for (int k = 0; k < 30; ++k)
        found += shared.get(dir.str(), std::string(1, static_cast<char>('1' + k % 3)) + "ubq", w) != nullptr;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(found.load(), 240);
  EXPECT_GE(shared.reads(), 3u);
  EXPECT_LE(shared.reads(), 24u);
}

TEST(TemplateHits, UnusableHitsAreCountedAndNamedOncePerFile) {
  // Rank order kept; a missing structure, a missing chain and a malformed record skipped with one
  // warning naming the file, each reason counted with its first hit; the mirror layout found.
  const std::string text = a3m_hit("9zzz_A/1-24", kHitRow) + ">1ubq_B/1-24\n" + kHitRow + "\n>1ubq_A/5-24\n" +
                           "----VKtLTGKTITLEVEPS-DTIE\n>9zzz_C/1-24\n" + kHitRow + "\n>1ubq_A/1-24\n" + kHitRow +
                           "\n>1ubq_A/1-24\nMQ1\n";
  const TempDir mirror;
  fs::create_directories(fs::path(mirror.str()) / "ub");
  write_gzip((fs::path(mirror.str()) / "ub" / "1ubq.cif.gz").string(), read_text(kTemplate));
  const Attached a = attach(protein_entry("test", {kQuery}), "test_A.a3m", text, mirror.str());
  EXPECT_EQ(a.counts.read, 6);
  EXPECT_EQ(a.counts.kept, 2);
  EXPECT_EQ(a.counts.unusable, 4);
  ASSERT_EQ(a.entry.templates[0].size(), 2u);
  EXPECT_EQ(a.entry.templates[0][0].restype[0], kGapToken);  // the 5-24 hit first, as ranked
  expect_expected_mapping(a.entry.templates[0][1]);
  ASSERT_EQ(a.warnings.size(), 1u) << joined(a.warnings);
  const std::string& w = a.warnings[0];
  for (const std::string& part :
       {std::string("test_A.a3m: 4 of 6 hits not used: "), std::string("1 malformed (first: line 13: 1ubq_A/1-24: '1' is not"),
        "2 without a usable structure (first: line 3, 9zzz_A: no 9zzz.cif or 9zzz.cif.gz in " + mirror.str(),
        std::string("1 without their chain (first: line 5, 1ubq_B: no protein chain 'B' in 1ubq)")})
    EXPECT_NE(w.find(part), std::string::npos) << part << "\n" << w;
  // At most kMaxTemplateHits per chain.
  std::string many = ">query\n" + kQuery + "\n";
  for (int k = 0; k < kMaxTemplateHits + 5; ++k) many += ">1ubq_A/1-24\n" + kHitRow + "\n";
  EXPECT_EQ(attach(protein_entry("test", {kQuery}), "test_A.a3m", many).entry.templates[0].size(),
            static_cast<size_t>(kMaxTemplateHits));
  // A query row that is not the chain's sequence: the whole file is named, nothing used.
  const Attached other = attach(protein_entry("test", {kQuery}), "test_A.a3m",
                                ">query\nMKT\n>1ubq_A/1-3\nMQI\n");
  EXPECT_TRUE(other.entry.templates.empty());
  EXPECT_NE(joined(other.warnings).find("templates not used: "), std::string::npos);
  // Chains of other molecule types get none, and a hit list for a chain that has none is unused.
  Entry rna = protein_entry("test", {kQuery});
  rna.mol_type.assign(rna.mol_type.size(), static_cast<int8_t>(MolType::kRna));
  EXPECT_EQ(attach(rna, "test_A.a3m", a3m_hit("1ubq_A/1-24", kHitRow)).counts.read, 0);
}

// --- Entries: cache and crops ----------------------------------------------------------------

Entry entry_with_templates() {
  Attached a = attach(protein_entry("test", {kQuery, "MKV"}), "test_A.a3m",
                      a3m_hit("1ubq_A/1-24", kHitRow) + ">1ubq_A/5-24\n----VKtLTGKTITLEVEPS-DTIE\n");
  EXPECT_EQ(a.counts.kept, 2);
  return a.entry;
}

TEST(TemplateEntries, CacheRoundTripsTemplatesBitwise) {
  const Entry e = entry_with_templates();
  ASSERT_EQ(e.templates.size(), 2u);
  EXPECT_TRUE(e.templates[1].empty());
  const std::string bytes = encode_entry(e);
  const Entry d = decode_entry(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "mem");
  ASSERT_EQ(d.templates.size(), e.templates.size());
  for (size_t c = 0; c < e.templates.size(); ++c) {
    ASSERT_EQ(d.templates[c].size(), e.templates[c].size());
    for (size_t k = 0; k < e.templates[c].size(); ++k) {
      const ChainTemplate &x = e.templates[c][k], &y = d.templates[c][k];
      EXPECT_EQ(y.name, x.name);
      EXPECT_EQ(y.restype, x.restype);
      EXPECT_EQ(y.mask, x.mask);
      ASSERT_EQ(y.coords.size(), x.coords.size());
      EXPECT_EQ(std::memcmp(y.coords.data(), x.coords.data(), x.coords.size() * sizeof(float)), 0);
    }
  }
  EXPECT_EQ(encode_entry(d), bytes);
  // A template type outside amino acids and the gap is corruption, caught after the checksum.
  Entry bad = e;
  bad.templates[0][0].restype[0] = static_cast<int8_t>(kRnaA);
  const std::string b = encode_entry(bad);
  EXPECT_NE(error_of([&] { decode_entry(reinterpret_cast<const unsigned char*>(b.data()), b.size(), "mem"); })
                .find("mem: corrupt cache entry (template residue type)"),
            std::string::npos);
}

TEST(TemplateEntries, CropsKeepEachKeptResiduesRow) {
  const Entry e = entry_with_templates();
  const std::vector<int32_t> kept = {2, 3, 4, 8, 19, 20, 25};  // token 25: chain B's second residue
  const Entry c = select_tokens(e, kept);
  ASSERT_EQ(c.templates.size(), 2u);
  ASSERT_EQ(c.templates[0].size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const ChainTemplate &from = e.templates[0][k], &to = c.templates[0][k];
    EXPECT_EQ(to.name, from.name);
    ASSERT_EQ(to.size(), 6);
    for (int j = 0; j < 6; ++j) {
      const int i = kept[j];
      EXPECT_EQ(to.restype[j], from.restype[i]) << k << " " << j;
      for (int s = 0; s < kTemplateAtoms; ++s) EXPECT_EQ(to.mask[j * kTemplateAtoms + s], from.mask[i * kTemplateAtoms + s]);
      for (int x = 0; x < kTemplateAtoms * 3; ++x)
        EXPECT_EQ(to.coords[j * kTemplateAtoms * 3 + x], from.coords[i * kTemplateAtoms * 3 + x]);
    }
  }
  EXPECT_EQ(c.templates[0][0].restype[4], kGapToken);  // the query's A (residue 19) has none
  // A batch from the crop equals one from the selection.
  const Batch whole = make_batch({&e}, {kept}, 0);
  const Batch cropped = make_batch({&c}, {{}}, 0);
  EXPECT_TRUE(at::equal(whole.template_restype, cropped.template_restype));
  EXPECT_TRUE(at::equal(whole.template_coords, cropped.template_coords));
  EXPECT_TRUE(at::equal(whole.template_mask, cropped.template_mask));
}

TEST(TemplateEntries, CacheBuildReadsHitListsAndRebuildsWhenTheyChange) {
  const TempDir dir;
  const fs::path root(dir.str());
  fs::create_directories(root / "in");
  fs::create_directories(root / "hits");
  fs::copy(MEGAFOLD_TEST_SOURCE_DIR "/data/pdb/1ubi.pdb.gz", root / "in" / "1ubi.pdb.gz");
  // 1UBI is ubiquitin too: its residues 1-24 against 1UBQ's (identical, but 24 of 76 residues,
  // no near-duplicate), then a hit whose structure is missing.
  std::ofstream(root / "hits" / "1ubi_A.m8") << "1ubi_A\t1ubq_A\t100\t24\t0\t0\t1\t24\t1\t24\t1e-10\t50\n"
                                                 "1ubi_A\t3abc_A\t90\t30\t3\t0\t1\t30\t1\t30\t1e-9\t40\n";
  CacheOptions o;
  o.input = (root / "in").string();
  o.out = (root / "cache").string();
  o.jobs = 1;
  o.quiet = true;
  o.templates = {(root / "hits").string(), kFixtures, ""};
  const CacheSummary s = build_cache(o);
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.templates, 1);
  EXPECT_EQ(s.warnings, 1);  // 3abc: named in skipped.tsv
  EXPECT_NE(read_text((root / "cache" / "skipped.tsv").string()).find("no 3abc.cif or 3abc.cif.gz"), std::string::npos);
  const CacheEntries read = read_cache(o.out);
  ASSERT_EQ(read.entries.size(), 1u);
  const Entry& e = read.entries[0];
  ASSERT_EQ(e.templates.size(), static_cast<size_t>(e.n_chains()));
  ASSERT_EQ(e.templates[0].size(), 1u);
  const ChainTemplate& t = e.templates[0][0];
  EXPECT_EQ(t.name, "1ubq_A");
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t.restype[i], e.restype[i]) << i;
  for (int i = 24; i < t.size(); ++i) EXPECT_EQ(t.restype[i], kGapToken) << i;
  EXPECT_EQ(build_cache(o).reused, 1);
  std::ofstream(root / "hits" / "1ubi_A.m8") << "1ubi_A\t1ubq_A\t100\t20\t0\t0\t5\t24\t5\t24\t1e-10\t50\n";
  const CacheSummary again = build_cache(o);
  EXPECT_EQ(again.built, 1);
  EXPECT_EQ(again.warnings, 0);
  EXPECT_EQ(read_cache(o.out).entries[0].templates[0][0].restype[0], kGapToken);
  // Options are checked before anything is built.
  o.templates.max_release_date = "yesterday";
  EXPECT_NE(error_of([&] { build_cache(o); }).find("'yesterday' is not YYYY-MM-DD"), std::string::npos);
}

// --- Batches ---------------------------------------------------------------------------------

// A template over n residues whose every value names it: restype `type`, coords 100 * id +
// residue + slot / 10, mask 1.
ChainTemplate marked(int id, int64_t n, int type) {
  ChainTemplate t;
  t.name = "t" + std::to_string(id);
  t.restype.assign(n, static_cast<int8_t>(type));
  for (int64_t i = 0; i < n; ++i)
    for (int s = 0; s < kTemplateAtoms; ++s)
      for (int x = 0; x < 3; ++x) t.coords.push_back(static_cast<float>(100 * id + i) + s / 10.f + x / 100.f);
  t.mask.assign(n * kTemplateAtoms, 1);
  return t;
}

TEST(TemplateBatches, ShapesWithoutTemplates) {
  const Entry e = protein_entry("test", {"MKTAY"});
  for (const int64_t max : {int64_t{4}, int64_t{0}}) {
    const Batch b = make_batch({&e}, {{}}, 7, {}, {max});
    EXPECT_EQ(b.template_restype.sizes(), (std::vector<int64_t>{1, 0, 7}));
    EXPECT_EQ(b.template_coords.sizes(), (std::vector<int64_t>{1, 0, 7, 4, 3}));
    EXPECT_EQ(b.template_mask.sizes(), (std::vector<int64_t>{1, 0, 7, 4}));
    EXPECT_EQ(b.template_restype.scalar_type(), at::kLong);
    EXPECT_EQ(b.template_coords.scalar_type(), at::kFloat);
    EXPECT_EQ(b.template_mask.scalar_type(), at::kFloat);
  }
  // max_templates 0 hides templates an entry has.
  Entry with = e;
  with.templates = {{marked(1, 5, 3)}};
  EXPECT_EQ(make_batch({&with}, {{}}, 0, {}, {0}).template_restype.size(1), 0);
  // Every tensor of the batch is listed (moved by to() and pinned()).
  Batch b = make_batch({&with}, {{}}, 0);
  const auto fields = b.tensors();
  for (at::Tensor* t : {&b.template_restype, &b.template_coords, &b.template_mask})
    EXPECT_NE(std::find(fields.begin(), fields.end(), t), fields.end());
}

TEST(TemplateBatches, SlotsStackEachChainsTemplates) {
  // Chain A: 4 residues, the third one per-atom (a modified residue); chain B: 3 residues.
  Entry e = protein_entry("test", {"MKTA", "GWE"});
  e.components = {"SEP"};
  e.component[2] = 0;
  e.templates = {{marked(1, 4, 1), marked(2, 4, 2), marked(3, 4, 3)}, {marked(4, 3, 4)}};
  const Batch b = make_batch({&e, &e}, {{}, {4, 5}}, 9, {}, {4, false, 0});
  ASSERT_EQ(b.template_restype.sizes(), (std::vector<int64_t>{2, 3, 9}));
  auto type = b.template_restype.accessor<int64_t, 3>();
  auto xyz = b.template_coords.accessor<float, 5>();
  auto mask = b.template_mask.accessor<float, 4>();
  // Example 0, slot 0: A's first template on A's tokens, B's on B's.
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(type[0][0][i], 1) << i;
    EXPECT_FLOAT_EQ(xyz[0][0][i][2][1], 100.f + i + 0.2f + 0.01f);
    EXPECT_EQ(mask[0][0][i][3], 1.f);
  }
  EXPECT_EQ(type[0][0][2], kGapToken);  // the per-atom token
  EXPECT_EQ(mask[0][0][2][1], 0.f);
  for (int i = 4; i < 7; ++i) {
    EXPECT_EQ(type[0][0][i], 4) << i;
    EXPECT_FLOAT_EQ(xyz[0][0][i][0][0], 400.f + (i - 4));
  }
  // Slots 1 and 2: A's second and third; B has none there.
  EXPECT_EQ(type[0][1][0], 2);
  EXPECT_EQ(type[0][2][3], 3);
  EXPECT_FLOAT_EQ(xyz[0][2][3][1][2], 303.f + 0.1f + 0.02f);
  for (int t = 1; t < 3; ++t)
    for (int i = 4; i < 9; ++i) {  // B's tokens and the padding
      EXPECT_EQ(type[0][t][i], kGapToken) << t << " " << i;
      for (int s = 0; s < kTemplateAtoms; ++s) {
        EXPECT_EQ(mask[0][t][i][s], 0.f);
        for (int x = 0; x < 3; ++x) EXPECT_EQ(xyz[0][t][i][s][x], 0.f);
      }
    }
  // Example 1 selects B's tokens 0 and 1 only: slot 0 holds them, later slots and padding are gaps.
  EXPECT_EQ(type[1][0][0], 4);
  EXPECT_FLOAT_EQ(xyz[1][0][1][0][0], 401.f);
  EXPECT_EQ(type[1][0][2], kGapToken);
  EXPECT_EQ(type[1][1][0], kGapToken);
  // A batch of only example 1 has one slot: chain A, with three templates, is not in it.
  EXPECT_EQ(make_batch({&e}, {{4, 5}}, 0).template_restype.size(1), 1);
  // max_templates caps the slots at the top ones.
  const Batch two = make_batch({&e}, {{}}, 0, {}, {2, false, 0});
  EXPECT_EQ(two.template_restype.size(1), 2);
  EXPECT_EQ(two.template_restype[0][1][0].item<int64_t>(), 2);
}

TEST(TemplateBatches, RandomSelectionIsAPureFunctionOfTheSeed) {
  Entry e = protein_entry("test", {"MKTAY", "GW"});
  std::vector<ChainTemplate> ten;
  for (int k = 0; k < 10; ++k) ten.push_back(marked(k, 5, k));
  e.templates = {ten, {marked(50, 2, 5), marked(51, 2, 6)}};
  std::set<size_t> sizes;
  std::set<int32_t> drawn;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const auto s = select_templates(e, {4, true, seed});
    EXPECT_EQ(s, select_templates(e, {4, true, seed}));
    ASSERT_EQ(s.size(), 2u);
    EXPECT_LE(s[0].size(), 4u);
    EXPECT_LE(s[1].size(), 2u);
    EXPECT_TRUE(std::is_sorted(s[0].begin(), s[0].end()));
    EXPECT_EQ(std::set<int32_t>(s[0].begin(), s[0].end()).size(), s[0].size());  // without replacement
    for (const int32_t k : s[0]) EXPECT_LT(k, 10);
    sizes.insert(s[0].size());
    drawn.insert(s[0].begin(), s[0].end());
  }
  EXPECT_EQ(sizes, (std::set<size_t>{0, 1, 2, 3, 4}));  // k uniform in 0..4
  EXPECT_EQ(drawn.size(), 10u);                         // from all hits, not only the top four
  EXPECT_EQ(select_templates(e, {4, false, 9}), (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}, {0, 1}}));
  EXPECT_EQ(select_templates(e, {0, true, 9}), (std::vector<std::vector<int32_t>>{{}, {}}));
  // Batches: the same seed gives the same tensors; the slots never exceed max_templates.
  bool differ = false;
  const Batch first = make_batch({&e, &e}, {{}, {}}, 0, {}, {3, true, 11});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Batch a = make_batch({&e, &e}, {{}, {}}, 0, {}, {3, true, seed});
    const Batch b = make_batch({&e, &e}, {{}, {}}, 0, {}, {3, true, seed});
    EXPECT_TRUE(at::equal(a.template_restype, b.template_restype));
    EXPECT_TRUE(at::equal(a.template_coords, b.template_coords));
    EXPECT_LE(a.template_restype.size(1), 3);
    differ = differ || !a.template_restype.sizes().equals(first.template_restype.sizes()) ||
             !at::equal(a.template_restype, first.template_restype);
  }
  EXPECT_TRUE(differ);
}

// --- AlphaFold 3 JSON --------------------------------------------------------------------------

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string af3_job(const std::string& templates) {
  return R"({"name": "t", "modelSeeds": [1], "dialect": "alphafold3", "version": 2, "sequences": [
    {"dna": {"id": "C", "sequence": "GAT"}},
    {"protein": {"id": ["A", "B"], "sequence": ")" + kQuery + R"(", "templates": )" + templates + "}}]}";
}

TEST(TemplateJson, TemplatesAreReadInTheGivenOrder) {
  const TempDir dir;
  fs::copy(kTemplate, fs::path(dir.str()) / "tpl.cif");
  const std::string job = af3_job(R"([
      {"mmcif": )" + json_string(read_text(kTemplate)) + R"(, "queryIndices": [0, 1, 2, 3, 4], "templateIndices": [0, 1, 2, 3, 4]},
      {"mmcifPath": "tpl.cif", "queryIndices": [8, 15], "templateIndices": [9, 16]}])");
  const Entry e = load_af3_json(dir.write("t.json", job), nullptr).entry;
  ASSERT_EQ(e.chain_ids, (std::vector<std::string>{"C", "A", "B"}));
  ASSERT_EQ(e.templates.size(), 3u);
  EXPECT_TRUE(e.templates[0].empty());  // DNA
  for (int c = 1; c <= 2; ++c) {        // both copies
    ASSERT_EQ(e.templates[c].size(), 2u);
    const ChainTemplate &t0 = e.templates[c][0], &t1 = e.templates[c][1];
    EXPECT_EQ(t0.name, "1ubq_A");
    ASSERT_EQ(t0.size(), static_cast<int64_t>(kQuery.size()));
    EXPECT_EQ(t0.restype[1], amino_acid_of_letter('Q'));  // the template's residue, not the query's E
    EXPECT_FLOAT_EQ(t0.coords[0], 27.340f);
    EXPECT_EQ(t0.restype[5], kGapToken);
    EXPECT_EQ(t0.mask[4 * kTemplateAtoms + 3], 0);  // VAL 5 CB
    EXPECT_EQ(t1.restype[8], amino_acid_of_letter('G'));
    EXPECT_EQ(t1.coords[8 * kTemplateAtoms * 3 + 9], t1.coords[8 * kTemplateAtoms * 3 + 3]);
    EXPECT_EQ(t1.restype[15], amino_acid_of_letter('V'));  // residue 17, unmodelled
    EXPECT_EQ(t1.mask[15 * kTemplateAtoms + 1], 0);
    EXPECT_EQ(t1.restype[0], kGapToken);
  }
  const Batch b = make_batch({&e}, {{}}, 0);
  EXPECT_EQ(b.template_restype.size(1), 2);
}

TEST(TemplateJson, MalformedTemplatesNameTheField) {
  const TempDir dir;
  fs::copy(kTemplate, fs::path(dir.str()) / "tpl.cif");
  const std::string ok = R"("mmcifPath": "tpl.cif")";
  const std::string f = "sequences[1].protein.templates[0]";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{}", "sequences[1].protein.templates: expected a list"},
      {R"([{"queryIndices": [0], "templateIndices": [0]}])", f + ": give exactly one of 'mmcif' and 'mmcifPath'"},
      {"[{" + ok + R"(, "mmcif": "x", "queryIndices": [0], "templateIndices": [0]}])",
       f + ": give exactly one of 'mmcif' and 'mmcifPath'"},
      {"[{" + ok + R"(, "queryIndices": [0, 1], "templateIndices": [0]}])",
       f + ".templateIndices: 1 indices, queryIndices has 2"},
      {"[{" + ok + R"(, "queryIndices": [0, 24], "templateIndices": [0, 1]}])",
       f + ".queryIndices[1]: 24 is outside the chain's residues 0-23"},
      {"[{" + ok + R"(, "queryIndices": [0], "templateIndices": [76]}])",
       f + ".templateIndices[0]: 76 is outside the template's residues 0-75"},
      {"[{" + ok + R"(, "queryIndices": [3, 3], "templateIndices": [3, 4]}])", f + ".queryIndices[1]: residue 3 is aligned twice"},
      {"[{" + ok + R"(, "queryIndices": [0.5], "templateIndices": [0]}])", f + ".queryIndices[0]: expected an integer"},
      {"[{" + ok + R"(, "templateIndices": [0]}])", f + ": missing 'queryIndices'"},
      {"[{" + ok + R"(, "queryIndices": [0], "templateIndices": [0], "release": 1}])", f + ".release: unknown field"},
      {R"([{"mmcif": "not an mmCIF", "queryIndices": [0], "templateIndices": [0]}])", f + ".mmcif"},
      {R"([{"mmcifPath": "none.cif", "queryIndices": [0], "templateIndices": [0]}])", f + ".mmcifPath: no file"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string path = dir.write("job" + std::to_string(k) + ".json", af3_job(cases[k].first));
    const std::string what = error_of([&] { load_af3_json(path, nullptr); });
    EXPECT_NE(what.find(path), std::string::npos) << "case " << k << ": " << what;
    EXPECT_NE(what.find(cases[k].second), std::string::npos) << "case " << k << ": " << what;
  }
  // An mmCIF of two protein chains is no single template.
  std::string two = read_text(kTemplate);
  const size_t loop_end = two.rfind("#");
  std::string second;
  for (size_t pos = two.find("ATOM"); pos < loop_end;) {
    const size_t end = two.find('\n', pos);
    std::string line = two.substr(pos, end - pos);
    line.replace(line.find(" A 1 "), 5, " B 1 ");           // label_asym_id
    line.replace(line.rfind(" A "), 3, " B ");              // auth_asym_id
    second += line + "\n";
    pos = end + 1;
  }
  two.insert(loop_end, second);
  const std::string job = af3_job(R"([{"mmcif": )" + json_string(two) + R"(, "queryIndices": [0], "templateIndices": [0]}])");
  const std::string path = dir.write("two.json", job);
  EXPECT_NE(error_of([&] { load_af3_json(path, nullptr); }).find(f + ".mmcif: expected an mmCIF of one protein chain, found 2"),
            std::string::npos);
  // Templates of an RNA chain are not in AF3's input.
  const std::string rna = dir.write("rna.json", R"({"name": "t", "modelSeeds": [1], "dialect": "alphafold3", "version": 2,
      "sequences": [{"rna": {"id": "A", "sequence": "AGCU", "templates": []}}]})");
  EXPECT_NE(error_of([&] { load_af3_json(rna, nullptr); }).find("sequences[0].rna.templates: unknown field"), std::string::npos);
}

}  // namespace
}  // namespace megafold::data
