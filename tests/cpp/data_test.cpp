// Data layer: parsing rules on real files, malformed input, split and cropping.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <sstream>

#include <ATen/ATen.h>

#include "core/check.h"
#include "data/dataset.h"
#include "data/crop.h"
#include "data/features.h"
#include "data/reference_atoms.h"
#include "data/structure.h"
#include "testing.h"

namespace megafold::data {
namespace {
namespace fs = std::filesystem;
using megafold::testing::TempDir;
using megafold::testing::gunzip;

const std::string kData = MEGAFOLD_TEST_SOURCE_DIR "/data/pdb";
const std::string kFixtures = MEGAFOLD_TEST_SOURCE_DIR "/tests/fixtures";

std::string error_of(const std::string& path) {
  try {
    load_entry(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Structure, UbiquitinPdbHasOneChainOf76Residues) {
  const Entry e = load_entry(kData + "/1ubi.pdb.gz");
  EXPECT_EQ(e.name, "1ubi");
  EXPECT_EQ(e.n_chains(), 1);
  EXPECT_EQ(e.n_tokens(), 76);
  EXPECT_EQ(e.sequence(0).substr(0, 10), "MQIFVKTLTG");  // UniProt P0CG48 starts MQIFVKTLTG
  // Every residue of 1UBI is complete except the C-terminal tail; backbone is all there.
  for (int i = 0; i < e.n_tokens(); ++i) EXPECT_TRUE(e.atom_mask[i * kMaxAtomsPerToken + kAtomCA]);
  EXPECT_EQ(e.dropped_hydrogens, 0);
  EXPECT_GT(e.dropped_residues, 0);  // waters
}

TEST(Structure, MmcifAndPdbOfTheSameEntryAgree) {
  const Entry cif = load_entry(kData + "/1ubq.cif.gz");
  const Entry pdb = load_entry(kData + "/1ubi.pdb.gz");
  EXPECT_EQ(cif.sequence(0), pdb.sequence(0));  // 1UBQ and 1UBI are both human ubiquitin
}

TEST(Structure, MultiChainComplexGetsEntitiesAndSymIds) {
  // Find a bundled homo-oligomer and check the entity/sym rule on it.
  bool seen = false;
  for (const auto& it : fs::directory_iterator(kData)) {
    const Entry e = load_entry(it.path().string());
    if (e.n_chains() < 2) continue;
    for (int c = 0; c < e.n_chains(); ++c) {
      for (int d = 0; d < c; ++d) {
        const int tc = static_cast<int>(std::find(e.asym_id.begin(), e.asym_id.end(), c) - e.asym_id.begin());
        const int td = static_cast<int>(std::find(e.asym_id.begin(), e.asym_id.end(), d) - e.asym_id.begin());
        EXPECT_EQ(e.sequence(c) == e.sequence(d), e.entity_id[tc] == e.entity_id[td]) << e.name;
        if (e.entity_id[tc] == e.entity_id[td]) {
          EXPECT_NE(e.sym_id[tc], e.sym_id[td]) << e.name;
          seen = true;
        }
      }
    }
  }
  EXPECT_TRUE(seen) << "the bundle should hold at least one homo-oligomer";
}

TEST(Structure, NmrEnsembleUsesFirstModelOnly) {
  const std::string text = gunzip(kData + "/2juy.pdb.gz");
  ASSERT_NE(text.find("\nMODEL"), std::string::npos) << "2juy is an NMR ensemble";
  const Entry e = load_entry(kData + "/2juy.pdb.gz");
  // Tokens of one model only: each (chain, residue number) is one residue token or one run of
  // per-atom tokens (2juy's SME is one), each atom once.
  std::set<std::pair<int, int>> seen;
  std::set<std::tuple<int, int, std::string>> atoms;
  for (int i = 0; i < e.n_tokens(); ++i) {
    const bool run = i > 0 && e.per_atom(i) && e.per_atom(i - 1) && e.asym_id[i] == e.asym_id[i - 1] &&
                     e.residue_index[i] == e.residue_index[i - 1];
    if (!run) EXPECT_TRUE(seen.insert({e.asym_id[i], e.residue_index[i]}).second);
    if (e.per_atom(i))
      EXPECT_TRUE(atoms.insert({e.asym_id[i], e.residue_index[i], std::string(e.token_atoms[i].atom_name())}).second);
  }
}

TEST(Structure, AltlocsKeepHighestOccupancyFirstOnTies) {
  const Entry e = load_entry(kFixtures + "/disordered.pdb");
  // ARG 27 NH1 has altlocs A and B at occupancy 0.50 each: A (listed first) is kept.
  int arg = -1;
  for (int i = 0; i < e.n_tokens(); ++i)
    if (e.residue_index[i] == 27) arg = i;
  ASSERT_GE(arg, 0);
  const int slot = atom_slot(amino_acid_index("ARG"), "NH1");
  const float* xyz = &e.coords[(arg * kMaxAtomsPerToken + slot) * 3];
  EXPECT_FLOAT_EQ(xyz[0], 57.848f);
  EXPECT_FLOAT_EQ(xyz[1], 21.002f);
  EXPECT_FLOAT_EQ(xyz[2], 24.386f);
}

TEST(Structure, MalformedFilesGiveErrorsNamingFileAndReason) {
  TempDir dir;
  const std::string real = gunzip(kData + "/1ubq.cif.gz");
  const std::string empty = dir.write("empty.cif", "");
  EXPECT_NE(error_of(empty).find("empty.cif: empty file"), std::string::npos) << error_of(empty);

  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  const std::string garbage = dir.write("garbage.cif", noise);
  EXPECT_NE(error_of(garbage).find("garbage.cif"), std::string::npos);

  // A gzip stream cut in the middle cannot be inflated.
  std::ifstream gz(kData + "/1ubq.cif.gz", std::ios::binary);
  const std::string gz_bytes((std::istreambuf_iterator<char>(gz)), std::istreambuf_iterator<char>());
  const std::string cut_gz = dir.write("cut.cif.gz", gz_bytes.substr(0, gz_bytes.size() / 2));
  EXPECT_NE(error_of(cut_gz).find("cut.cif.gz: truncated or corrupt gzip file"), std::string::npos)
      << error_of(cut_gz);
  const std::string noise_pdb = dir.write("noise.pdb", noise);
  EXPECT_NE(error_of(noise_pdb).find("noise.pdb: no atoms"), std::string::npos) << error_of(noise_pdb);
  for (const std::string& e : {error_of(cut_gz), error_of(garbage), error_of(noise_pdb)})
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line: skipped.tsv keeps one row per file

  // A plain mmCIF cut inside the atom_site loop: the parser reports the broken row.
  const std::string truncated = dir.write("truncated.cif", real.substr(0, real.size() * 6 / 10 + 17));
  const std::string msg = error_of(truncated);
  EXPECT_NE(msg.find("truncated.cif"), std::string::npos) << "parsed a truncated file silently";

  const std::string ions = kFixtures + "/ions.pdb";
  EXPECT_NE(error_of(ions).find("no polymer chain"), std::string::npos) << error_of(ions);
}

// Coordinates that cannot be real (nan, inf, placeholders such as 99999, text in the number
// field) skip their atom with a warning naming file, chain, residue, atom and value; a residue
// left without atoms is no token; a file whose every atom is unusable is rejected, by name.
TEST(Structure, UnusableCoordinatesSkipTheirAtomsWithWarnings) {
  TempDir dir;
  const std::string pdb = gunzip(kData + "/1ubi.pdb.gz");
  std::vector<std::string> lines;
  std::istringstream in(pdb);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  // The x field (columns 31-38) of chosen atoms of chain A: residue 1's CA, every atom of
  // residue 2. (Text in a PDB number field reads as 0 in gemmi: not detectable here.)
  auto set_x = [](std::string& l, const std::string& x) { l.replace(30, 8, std::string(8 - x.size(), ' ') + x); };
  const std::vector<std::string> bad = {"inf", "99999", "1e+30", "-nan", "-1e+05"};
  int n_bad = 0;
  for (std::string& l : lines) {
    if (l.rfind("ATOM", 0) != 0) continue;
    const int resnum = std::stoi(l.substr(22, 4));
    if (resnum == 1 && l.substr(12, 4) == " CA ") set_x(l, "nan"), ++n_bad;
    if (resnum == 2) set_x(l, bad[n_bad++ % bad.size()]);
  }
  ASSERT_GT(n_bad, 5);
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  const std::string path = dir.write("1ubi_badxyz.pdb", text);
  const Entry clean = load_entry(kData + "/1ubi.pdb.gz");
  Entry e;
  ASSERT_NO_THROW(e = load_entry(path));
  EXPECT_EQ(e.n_tokens(), clean.n_tokens() - 1);  // residue 2 lost every atom
  for (float v : e.coords) EXPECT_TRUE(std::isfinite(v) && std::fabs(v) <= kMaxCoordinate);
  EXPECT_FALSE(e.atom_mask[0 * kMaxAtomsPerToken + kAtomCA]);  // residue 1's CA
  EXPECT_TRUE(e.atom_mask[0 * kMaxAtomsPerToken + kAtomN]);
  // The first few are named, the rest counted.
  ASSERT_EQ(e.warnings.size(), static_cast<size_t>(kMaxCoordinateWarnings + 1));
  EXPECT_NE(e.warnings[0].find("1ubi_badxyz.pdb: chain A residue MET 1 atom CA: coordinates (nan"),
            std::string::npos)
      << e.warnings[0];
  EXPECT_NE(e.warnings.back().find(": " + std::to_string(n_bad - kMaxCoordinateWarnings) +
                                    " more atoms with unusable coordinates skipped"),
            std::string::npos)
      << e.warnings.back();

  // Every atom unusable: the file is rejected with the reason.
  std::string all_bad;
  for (std::string l : lines) {
    if (l.rfind("ATOM", 0) == 0 || l.rfind("HETATM", 0) == 0) set_x(l, "     nan");
    all_bad += l + "\n";
  }
  const std::string msg = error_of(dir.write("all_nan.pdb", all_bad));
  EXPECT_NE(msg.find("all_nan.pdb: no usable coordinates"), std::string::npos) << msg;

  // Training from a directory with it: the entry trains without the atoms, the warnings show.
  fs::copy_file(kData + "/1ubi.pdb.gz", dir.str() + "/1ubi.pdb.gz");
  const Dataset ds = load_dataset(dir.str(), /*quiet=*/true);
  EXPECT_EQ(ds.train.size() + ds.validation.size(), 2u);
  ASSERT_EQ(ds.skipped.size(), 1u);
  EXPECT_NE(ds.skipped[0].find("all_nan.pdb"), std::string::npos);
}

// Mutated real files (flipped bytes, cut lines, duplicated and dropped lines) either parse or
// fail with megafold::Error naming the file: never a crash or another exception type.
TEST(Structure, MutatedFilesNeverCrash) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  int parsed = 0, rejected = 0;
  for (const char* name : {"1a8o.cif.gz", "1ubi.pdb.gz"}) {
    const std::string real = gunzip(kData + "/" + name);
    const std::string ext = std::string(name).find(".cif") != std::string::npos ? ".cif" : ".pdb";
    for (int trial = 0; trial < 60; ++trial) {
      std::string text = real;
      const int edits = 1 + static_cast<int>(rng() % 20);
      for (int k = 0; k < edits; ++k) {
        const size_t at = rng() % text.size();
        switch (rng() % 4) {
          case 0: text[at] = static_cast<char>(rng()); break;            // flip a byte
          case 1: text.erase(at, std::min<size_t>(rng() % 200, text.size() - at)); break;
          case 2: text.insert(at, text.substr(at, rng() % 120)); break;  // duplicate a span
          case 3: text[at] = "\n \t_#'\";"[rng() % 8]; break;            // syntax characters
        }
        if (text.empty()) text = "x";
      }
      const std::string path = dir.write("mutant" + std::to_string(trial) + ext, text);
      try {
        load_entry(path);
        ++parsed;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        ++rejected;
      }
    }
  }
  EXPECT_EQ(parsed + rejected, 120);
}

TEST(Dataset, BadFilesAreSkippedAndTheRunContinues) {
  TempDir dir;
  fs::copy_file(kData + "/1ubi.pdb.gz", dir.str() + "/1ubi.pdb.gz");
  fs::copy_file(kFixtures + "/ions.pdb", dir.str() + "/ions.pdb");
  dir.write("empty.pdb", "");
  dir.write("notes.txt", "not a structure file, ignored");
  const Dataset ds = load_dataset(dir.str(), /*quiet=*/true);
  EXPECT_EQ(ds.train.size() + ds.validation.size(), 1u);
  ASSERT_EQ(ds.skipped.size(), 2u);
  EXPECT_NE(ds.skipped[0].find("empty.pdb"), std::string::npos);
  EXPECT_NE(ds.skipped[1].find("ions.pdb"), std::string::npos);
}

// Paths that are not plain structure files are passed over by name, and the listing goes on:
// a FIFO (it would block the reader), dangling and looping links, a linked directory (not
// followed: no link cycles), a name with a tab (it would break the cache's TSV index).
TEST(Dataset, OddPathsArePassedOverByName) {
  TempDir dir;
  const fs::path d = dir.str();
  fs::copy_file(kData + "/1ubi.pdb.gz", d / "1ubi.pdb.gz");
  ASSERT_EQ(::mkfifo((d / "pipe.cif").c_str(), 0644), 0);
  fs::create_symlink(d / "missing.pdb", d / "dangling.pdb");
  fs::create_symlink(d / "loop.pdb", d / "loop.pdb");
  fs::create_directories(d / "sub");
  fs::create_directory_symlink(d / "sub", d / "sub" / "cycle");
  fs::copy_file(kData + "/1ubi.pdb.gz", d / "tab\tname.pdb.gz");
  std::vector<std::string> passed;
  const std::vector<std::string> files = list_structure_files(d.string(), &passed);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], (d / "1ubi.pdb.gz").string());
  auto reason = [&](const std::string& needle) {
    return std::any_of(passed.begin(), passed.end(), [&](const std::string& w) { return w.find(needle) != std::string::npos; });
  };
  EXPECT_TRUE(reason("pipe.cif: not a regular file"));
  EXPECT_TRUE(reason("dangling.pdb: symbolic link that is dangling or loops"));
  EXPECT_TRUE(reason("loop.pdb: symbolic link that is dangling or loops"));
  EXPECT_TRUE(reason("cycle: symbolic link to a directory, not followed"));
  EXPECT_TRUE(reason("tab?name.pdb.gz: the file name holds a tab"));
  EXPECT_EQ(passed.size(), 5u);
  for (const std::string& w : passed) EXPECT_EQ(w.find_first_of("\t\n"), std::string::npos) << w;
  const Dataset ds = load_dataset(d.string(), /*quiet=*/true);
  EXPECT_EQ(ds.train.size() + ds.validation.size(), 1u);
  EXPECT_EQ(ds.skipped.size(), 5u);
}

// A split file overrides the name rule for the entries it lists (19hc is validation by the
// rule, 1ubi training); malformed lines name file and line.
TEST(Dataset, SplitFileOverridesTheRuleForListedEntries) {
  TempDir dir;
  for (const char* f : {"1ubi.pdb.gz", "19hc.pdb.gz", "1a28.pdb.gz"}) fs::copy_file(kData + "/" + f, dir.str() + "/" + f);
  ASSERT_TRUE(is_validation_entry("19hc"));
  ASSERT_FALSE(is_validation_entry("1ubi"));
  const std::string split = dir.write("split.tsv", "# entry\tsplit\n1ubi\tvalidation\n19hc\ttrain\n");
  const Dataset ds = load_dataset(dir.str(), /*quiet=*/true, /*overfit=*/false, split);
  std::set<std::string> train, validation;
  for (const EntryRef& e : ds.train) train.insert(e.name());
  for (const EntryRef& e : ds.validation) validation.insert(e.name());
  EXPECT_EQ(train, (std::set<std::string>{"19hc", "1a28"}));  // 1a28: not listed, the rule
  EXPECT_EQ(validation, (std::set<std::string>{"1ubi"}));
  // Parsed on several threads, kept in path order.
  EXPECT_EQ(ds.train[0].name(), "19hc");
  auto error = [&](const std::string& text) {
    try {
      read_split(dir.write("bad.tsv", text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("1ubi\ttest\n").find("bad.tsv:1: expected 'entry<TAB>train'"), std::string::npos);
  // The bundled data/split.tsv is such a file (with its header) and says what the rule says.
  const std::map<std::string, bool> bundled = read_split(MEGAFOLD_TEST_SOURCE_DIR "/data/split.tsv");
  EXPECT_GT(bundled.size(), 50u);
  for (const auto& [name, validation] : bundled) EXPECT_EQ(validation, is_validation_entry(name)) << name;
  EXPECT_NE(error("1ubi\ttrain\n1ubi\tvalidation\n").find("bad.tsv:2: entry '1ubi' is listed twice"),
            std::string::npos);
}

// Cluster weights: every cluster drawn equally often, its entries sharing its draws; entries
// the file does not list are clusters of their own.
TEST(Dataset, ClustersAreDrawnEquallyOften) {
  TempDir dir;
  Dataset ds = load_dataset(kData, true);
  ASSERT_GT(ds.train.size(), 10u);
  std::string tsv = "# entry\tcluster\n";
  for (size_t i = 0; i < 3; ++i) tsv += ds.train[i].name() + "\tbig\n";
  load_clusters(ds, dir.write("clusters.tsv", tsv), /*quiet=*/true);
  const double clusters = static_cast<double>(ds.train.size() - 3 + 1);
  std::map<std::string, int> count;
  const int draws = 30000;
  for (int g = 0; g < draws; ++g) ++count[ds.sample(9, g).name()];
  int big = 0;
  for (size_t i = 0; i < 3; ++i) big += count[ds.train[i].name()];
  const double expected = draws / clusters;  // per cluster
  EXPECT_NEAR(big, expected, 5 * std::sqrt(expected));
  EXPECT_NEAR(count[ds.train[5].name()], expected, 5 * std::sqrt(expected));
  auto error = [&](const std::string& text) {
    try {
      load_clusters(ds, dir.write("bad.tsv", text), true);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("1ubi\n").find("bad.tsv:1: expected 'entry<TAB>cluster'"), std::string::npos);
  EXPECT_NE(error("1ubi\ta\n1ubi\tb\n").find("bad.tsv:2: entry '1ubi' is listed twice"), std::string::npos);
}

// overfit: a validation entry by the split rule trains too, and validation scores the same
// entries (here 19hc, a validation entry, and 1a28, a training one).
TEST(Dataset, OverfitModeTrainsAndValidatesOnEveryEntry) {
  TempDir dir;
  fs::copy_file(kData + "/19hc.pdb.gz", dir.str() + "/19hc.pdb.gz");
  fs::copy_file(kData + "/1a28.pdb.gz", dir.str() + "/1a28.pdb.gz");
  const Dataset split = load_dataset(dir.str(), true);
  EXPECT_EQ(split.train.size(), 1u);
  EXPECT_EQ(split.validation.size(), 1u);
  const Dataset all = load_dataset(dir.str(), true, /*overfit=*/true);
  ASSERT_EQ(all.train.size(), 2u);
  ASSERT_EQ(all.validation.size(), 2u);
  EXPECT_EQ(all.validation[0].name(), all.train[0].name());
  EXPECT_EQ(all.validation[1].name(), all.train[1].name());
}

TEST(Dataset, EmptyDirectoryIsAClearError) {
  TempDir dir;
  try {
    load_dataset(dir.str(), true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable training structure"), std::string::npos);
  }
}

TEST(Dataset, SplitMatchesTheDocumentedTable) {
  std::ifstream in(MEGAFOLD_TEST_SOURCE_DIR "/data/split.tsv");
  std::string line;
  std::getline(in, line);  // header
  int n = 0, val = 0;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    const std::string entry = line.substr(0, tab), split = line.substr(tab + 1);
    EXPECT_EQ(is_validation_entry(entry), split == "validation") << entry;
    ++n;
    val += split == "validation";
  }
  EXPECT_GE(n, 60);
  EXPECT_GE(val, 5);
}

TEST(Dataset, SampleStreamIsAPermutationPerEpochAndSeedDependent) {
  Dataset ds;
  for (int i = 0; i < 7; ++i) {
    Entry e;
    e.name = "e" + std::to_string(i);
    ds.train.emplace_back(e);
  }
  std::set<std::string> epoch0, epoch1;
  for (uint64_t g = 0; g < 7; ++g) epoch0.insert(ds.sample(1, g).name());
  for (uint64_t g = 7; g < 14; ++g) epoch1.insert(ds.sample(1, g).name());
  EXPECT_EQ(epoch0.size(), 7u);
  EXPECT_EQ(epoch1.size(), 7u);
  int same = 0;
  for (uint64_t g = 0; g < 7; ++g) same += ds.sample(1, g).name() == ds.sample(2, g).name();
  EXPECT_LT(same, 7);
  // Every epoch is a permutation for sizes around the Feistel domains' edges (4^k), and the
  // first position is spread over the entries across epochs.
  for (int n : {1, 2, 3, 4, 5, 16, 17, 1000, 4097}) {
    Dataset big;
    for (int i = 0; i < n; ++i) {
      Entry e;
      e.name = std::to_string(i);
      big.train.emplace_back(e);
    }
    for (uint64_t epoch : {0, 1, 9}) {
      std::set<std::string> seen;
      for (uint64_t p = 0; p < static_cast<uint64_t>(n); ++p) seen.insert(big.sample(3, epoch * n + p).name());
      EXPECT_EQ(seen.size(), static_cast<size_t>(n)) << "n=" << n << " epoch " << epoch;
    }
    if (n >= 16) {
      std::set<std::string> firsts;
      for (uint64_t epoch = 0; epoch < 64; ++epoch) firsts.insert(big.sample(3, epoch * n).name());
      EXPECT_GT(firsts.size(), 8u) << "n=" << n;
    }
  }
}

Entry synthetic_entry(const std::vector<int>& chain_lengths) {
  Entry e;
  for (size_t c = 0; c < chain_lengths.size(); ++c) {
    for (int i = 0; i < chain_lengths[c]; ++i) {
      e.restype.push_back(0);
      e.residue_index.push_back(i + 1);
      e.asym_id.push_back(static_cast<int>(c));
    }
    e.chain_ids.push_back(std::string(1, static_cast<char>('A' + c)));
  }
  e.fill_residue_defaults();
  return e;
}

// Weighted sampling: draws follow the weights (zero never drawn), are a pure function of
// (seed, g), and bad weight files name the file and line or the entry.
TEST(Dataset, WeightedSamplingFollowsTheWeights) {
  TempDir dir;
  Dataset ds = load_dataset(kData, true);
  std::string tsv = "# entry\tweight\n";
  for (size_t i = 0; i < ds.train.size(); ++i)
    tsv += ds.train[i].name() + "\t" + (i == 0 ? "0" : i == 1 ? "30" : "1") + "\n";
  load_weights(ds, dir.write("w.tsv", tsv));
  const double total = 30.0 + static_cast<double>(ds.train.size() - 2);
  std::map<std::string, int> count;
  const int draws = 20000;
  for (int g = 0; g < draws; ++g) ++count[ds.sample(5, g).name()];
  EXPECT_EQ(count[ds.train[0].name()], 0);
  const double expected = draws * 30.0 / total;
  EXPECT_NEAR(count[ds.train[1].name()], expected, 5 * std::sqrt(expected));
  EXPECT_EQ(&ds.sample(5, 123), &ds.sample(5, 123));
  auto error = [&](const std::string& text) {
    try {
      Dataset d = load_dataset(kData, true);
      load_weights(d, dir.write("bad.tsv", text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("1a28\tmany\n").find("bad.tsv:1: expected 'entry<TAB>weight'"), std::string::npos);
  EXPECT_NE(error("1a28\t1\n").find("no weight for training entry"), std::string::npos);
}

TEST(Crop, ContiguousCropRespectsBudgetChainsAndSeed) {
  const Entry e = synthetic_entry({50, 7, 120, 1});
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto crop = contiguous_crop(e, 64, seed);
    ASSERT_EQ(crop.size(), 64u) << "total length exceeds the crop, so the budget is filled";
    EXPECT_TRUE(std::is_sorted(crop.begin(), crop.end()));
    // Within each chain the kept tokens are one contiguous span.
    for (size_t i = 1; i < crop.size(); ++i)
      if (e.asym_id[crop[i]] == e.asym_id[crop[i - 1]]) EXPECT_EQ(crop[i], crop[i - 1] + 1);
    EXPECT_EQ(crop, contiguous_crop(e, 64, seed));
  }
  EXPECT_NE(contiguous_crop(e, 64, 1), contiguous_crop(e, 64, 2));
  EXPECT_EQ(contiguous_crop(e, 500, 3).size(), 178u);
}

// Spatial crops hold exactly the nearest tokens (by C-alpha) to their centre; interface crops
// centre on a token with another chain's C-alpha within 15 A; the mix follows its weights.
TEST(Crop, SpatialCropsAreTheCentresNeighbourhood) {
  const Entry e = load_entry(kData + "/4i6p.cif.gz");  // two protein chains, no ligand
  ASSERT_EQ(e.n_chains(), 2);
  ASSERT_TRUE(e.components.empty());
  const std::vector<bool> interface = interface_tokens(e);
  auto ca = [&](int i, int k) { return e.coords[(static_cast<size_t>(i) * kMaxAtomsPerToken + kAtomCA) * 3 + k]; };
  auto dist = [&](int i, int j) {
    double d = 0;
    for (int k = 0; k < 3; ++k) d += (ca(i, k) - ca(j, k)) * (ca(i, k) - ca(j, k));
    return std::sqrt(d);
  };
  for (const bool at_interface : {false, true})
    for (uint64_t seed = 0; seed < 6; ++seed) {
      const auto crop = spatial_crop(e, 96, seed, at_interface);
      ASSERT_EQ(crop.size(), 96u);
      EXPECT_TRUE(std::is_sorted(crop.begin(), crop.end()));
      EXPECT_EQ(crop, spatial_crop(e, 96, seed, at_interface));
      // Some kept token is the centre: the crop is exactly its 96 nearest tokens by C-alpha
      // (tokens without a resolved C-alpha last, ties to the lower index).
      auto nearest = [&](int c) {
        std::vector<std::pair<double, int32_t>> d;
        for (int i = 0; i < e.n_tokens(); ++i) {
          const bool resolved = e.atom_mask[static_cast<size_t>(i) * kMaxAtomsPerToken + kAtomCA] != 0;
          d.emplace_back(resolved ? dist(c, i) * dist(c, i) : INFINITY, i);
        }
        std::sort(d.begin(), d.end());
        std::vector<int32_t> k;
        for (int j = 0; j < 96; ++j) k.push_back(d[j].second);
        std::sort(k.begin(), k.end());
        return k;
      };
      int centres = 0;
      for (int c : crop) centres += nearest(c) == crop;
      EXPECT_GE(centres, 1) << "seed " << seed;
      if (at_interface) {
        bool any = false;
        for (int c : crop) any = any || interface[c];
        EXPECT_TRUE(any);
      }
    }
  EXPECT_NE(spatial_crop(e, 96, 1, false), spatial_crop(e, 96, 2, false));
  // A single chain has no interface: the interface crop falls back to a spatial crop.
  const Entry ubi = load_entry(kData + "/1ubi.pdb.gz");
  EXPECT_EQ(spatial_crop(ubi, 30, 4, true), spatial_crop(ubi, 30, 4, false));
  // The mix: weight 1 on one kind gives exactly that kind.
  EXPECT_EQ(training_crop(e, 64, {1, 0, 0}, 9), contiguous_crop(e, 64, 9));
  EXPECT_EQ(training_crop(e, 64, {0, 1, 0}, 9), spatial_crop(e, 64, 9, false));
  EXPECT_EQ(training_crop(e, 64, {0, 0, 1}, 9), spatial_crop(e, 64, 9, true));
  int contiguous = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) contiguous += training_crop(e, 64, {}, seed) == contiguous_crop(e, 64, seed);
  EXPECT_GT(contiguous, 50);   // ~0.2 * 400 = 80 expected
  EXPECT_LT(contiguous, 115);
}

TEST(Features, BatchPadsAndMasks) {
  const Entry e = load_entry(kData + "/1ubi.pdb.gz");
  const Batch b = make_batch({&e, &e}, {contiguous_crop(e, 40, 1), {}}, 96);
  EXPECT_EQ(b.restype.sizes(), (std::vector<int64_t>{2, 96}));
  EXPECT_EQ(b.token_mask[0].sum().item<float>(), 40.f);
  EXPECT_EQ(b.token_mask[1].sum().item<float>(), 76.f);
  EXPECT_EQ(b.restype[1][80].item<int64_t>(), kGapToken);
  // Glycine's representative atom is CA, others CB.
  for (int i = 0; i < 76; ++i) {
    const int t = b.restype[1][i].item<int64_t>();
    const int slot = representative_atom_slot(t);
    EXPECT_TRUE(at::equal(b.rep_coords[1][i], b.atom_coords[1][i][slot]));
  }
}

// mmCIF output: a written entry (two chains, numbering with gaps) reads back with the same
// chains, numbering, residue types, atoms and coordinates (3 decimals in the file); replaced
// coordinates and B-factors land in the file; size mismatches name the path.
TEST(MmcifWriter, RoundTripsThroughGemmi) {
  const Entry e = load_entry(kData + "/1a28.pdb.gz");  // two protein chains, a steroid on each
  ASSERT_EQ(e.n_chains(), 4);
  ASSERT_EQ(e.components, std::vector<std::string>{"STR"});
  TempDir dir;
  const std::string out = dir.str() + "/1a28.cif";
  write_mmcif(e, out);
  const Entry back = load_entry(out);
  EXPECT_EQ(back.chain_ids, e.chain_ids);
  EXPECT_EQ(back.restype, e.restype);
  EXPECT_EQ(back.mol_type, e.mol_type);
  EXPECT_EQ(back.component, e.component);
  EXPECT_EQ(back.components, e.components);
  EXPECT_EQ(back.bonds, e.bonds);
  for (int i = 0; i < e.n_tokens(); ++i)
    ASSERT_EQ(back.token_atoms[i].atom_name(), e.token_atoms[i].atom_name()) << i;
  EXPECT_EQ(back.residue_index, e.residue_index);
  EXPECT_EQ(back.author_index, e.author_index);
  EXPECT_EQ(back.insertion_codes, e.insertion_codes);
  EXPECT_EQ(back.asym_id, e.asym_id);
  EXPECT_EQ(back.entity_id, e.entity_id);
  EXPECT_EQ(back.atom_mask, e.atom_mask);
  ASSERT_EQ(back.coords.size(), e.coords.size());
  for (size_t k = 0; k < e.coords.size(); ++k) ASSERT_NEAR(back.coords[k], e.coords[k], 5e-4) << k;

  std::vector<float> moved(e.coords), b(e.atom_mask.size(), 0.f);
  for (float& x : moved) x += 1.25f;
  b[0] = 87.5f;  // first atom of the first residue (N)
  write_mmcif(e, out, moved, b);
  const Entry shifted = load_entry(out);
  EXPECT_NEAR(shifted.coords[0], e.coords[0] + 1.25f, 5e-4);
  const std::string text = gunzip(out);  // zlib reads plain files as they are
  EXPECT_NE(text.find("87.5"), std::string::npos) << "B-factor column";

  try {
    write_mmcif(e, out, std::vector<float>(3, 0.f));
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(out), std::string::npos) << err.what();
  }
}

// Author numbering is kept beside label numbering: 1a8o's chain is numbered from 151 by its
// authors and from 1 by label_seq_id; a crop keeps both and the coordinates of its tokens.
TEST(Structure, AuthorNumberingAndTokenSelection) {
  const Entry e = load_entry(kData + "/1a8o.cif.gz");
  ASSERT_EQ(e.author_index.size(), e.restype.size());
  EXPECT_EQ(e.author_index.front(), 151);
  EXPECT_EQ(e.residue_index.front(), 1);
  EXPECT_EQ(e.insertion_codes, std::string(e.n_tokens(), ' '));
  const Entry sub = select_tokens(e, {3, 4, 10});
  EXPECT_EQ(sub.n_tokens(), 3);
  EXPECT_EQ(sub.author_index, (std::vector<int32_t>{154, 155, 161}));
  EXPECT_EQ(sub.residue_index, (std::vector<int32_t>{4, 5, 11}));
  EXPECT_EQ(sub.chain_ids, e.chain_ids);
  for (int a = 0; a < kMaxAtomsPerToken * 3; ++a) EXPECT_EQ(sub.coords[2 * kMaxAtomsPerToken * 3 + a], e.coords[10 * kMaxAtomsPerToken * 3 + a]);
  EXPECT_THROW(select_tokens(e, {e.n_tokens()}), Error);
}

// FASTA input: records become chains A, B, ... numbered from 1; identical sequences share an
// entity; ambiguity codes become UNK; errors name the file, line and column.
TEST(Fasta, RecordsBecomeChains) {
  TempDir dir;
  const std::string p = dir.write("pair.fasta", ">sp|P1 first\nMKT\nayX*\n\n>second copy\r\nMKTAYX\n>third\nGG\n");
  const Entry e = load_fasta(p);
  EXPECT_EQ(e.name, "pair");
  EXPECT_EQ(e.chain_ids, (std::vector<std::string>{"A", "B", "C"}));
  EXPECT_EQ(e.sequence(0), "MKTAYX");
  EXPECT_EQ(e.sequence(1), "MKTAYX");
  EXPECT_EQ(e.restype[5], kUnknownAminoAcid);
  EXPECT_EQ(e.entity_id[0], e.entity_id[6]);
  EXPECT_NE(e.entity_id[0], e.entity_id[12]);
  EXPECT_EQ(e.sym_id[6], 1);
  EXPECT_EQ(e.residue_index[6], 1);
  EXPECT_EQ(e.residue_index[11], 6);
  EXPECT_EQ(e.coords.size(), static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken * 3);
  EXPECT_TRUE(std::all_of(e.atom_mask.begin(), e.atom_mask.end(), [](uint8_t m) { return m == 0; }));
  EXPECT_TRUE(is_fasta_file(p) && is_fasta_file("x.FA") && !is_fasta_file("x.cif"));
}

TEST(Fasta, MalformedFilesNameFileLineAndProblem) {
  TempDir dir;
  auto error = [&](const std::string& name, const std::string& text) {
    const std::string p = dir.write(name, text);
    try {
      load_fasta(p);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("digit.fa", ">a\nMKT\nMK7A\n").find(":3:3: '7' is not an amino-acid code"), std::string::npos);
  EXPECT_NE(error("empty_record.fa", ">a\n>b\nMK\n").find(":1: record 'A' has no residues"), std::string::npos);
  EXPECT_NE(error("headless.fa", "MKT\n").find("before the first '>'"), std::string::npos);
  EXPECT_NE(error("nothing.fa", "").find("no FASTA record"), std::string::npos);
  EXPECT_NE(error("after_stop.fa", ">a\nMK*T\n").find("after the record's terminating '*'"), std::string::npos);
}

// Reference atoms (CCD ideal conformers): every slot of the layout and nothing else; known
// elements and charges; ideal backbone bond lengths; malformed tables name the line.
TEST(ReferenceAtoms, CoverTheSlotLayoutWithIdealGeometry) {
  const ReferenceTable& ref = reference_atoms();
  for (int t = 0; t <= kUnknownAminoAcid; ++t) {
    SCOPED_TRACE(std::string(amino_acid_name(t)));
    for (int a = 0; a < kMaxAtomsPerToken; ++a) EXPECT_EQ(ref[t][a].element > 0, !atom_names(t)[a].empty()) << a;
    EXPECT_EQ(ref[t][kAtomN].element, 7);
    EXPECT_EQ(ref[t][kAtomCA].element, 6);
    EXPECT_EQ(ref[t][kAtomO].element, 8);
    auto dist = [&](int a, int b) {
      float s = 0;
      for (int c = 0; c < 3; ++c) s += (ref[t][a].pos[c] - ref[t][b].pos[c]) * (ref[t][a].pos[c] - ref[t][b].pos[c]);
      return std::sqrt(s);
    };
    EXPECT_NEAR(dist(kAtomN, kAtomCA), 1.46, 0.05);
    EXPECT_NEAR(dist(kAtomCA, kAtomC), 1.52, 0.05);
    EXPECT_NEAR(dist(kAtomC, kAtomO), 1.23, 0.05);
  }
  const int met = amino_acid_index("MET"), lys = amino_acid_index("LYS"), asp = amino_acid_index("ASP");
  EXPECT_EQ(ref[met][atom_slot(met, "SD")].element, 16);
  EXPECT_EQ(ref[lys][atom_slot(lys, "NZ")].charge, 1);
  EXPECT_EQ(ref[asp][atom_slot(asp, "OD2")].charge, 0);  // the CCD's neutral form
}

TEST(ReferenceAtoms, MalformedTablesNameTheLine) {
  const std::string good(reference_atoms_tsv());
  auto error_of_table = [](const std::string& text) {
    try {
      parse_reference_atoms(text, "t.tsv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const size_t first_row = good.find("\nALA\t") + 1;
  const size_t second_row = good.find('\n', first_row) + 1;
  const std::string row = good.substr(first_row, second_row - first_row);  // ALA N
  EXPECT_EQ(error_of_table(good.substr(0, second_row) + row + good.substr(second_row)),
            "t.tsv:4: atom N of ALA given twice");
  EXPECT_EQ(error_of_table(good.substr(0, first_row) + good.substr(second_row)), "t.tsv: no reference atom N for ALA");
  std::string bad = good;
  bad.replace(bad.find('\t', bad.find("\t", first_row) + 1) + 1, 1, "Q");  // element N -> Q
  EXPECT_EQ(error_of_table(bad), "t.tsv:3: unknown element 'Q'");
  EXPECT_EQ(error_of_table(good.substr(0, first_row) + "ALA\tCA\tC\t0\t1.0\tx\t2.0\n"),
            "t.tsv:3: coordinate 'x' is not a number");
}

TEST(ReferenceAtoms, FeaturesGatherByTokenType) {
  const at::Tensor restype = at::tensor({0, 17, 20, kGapToken, 7, 0}, at::kLong).view({2, 3});
  const ReferenceFeatures f = reference_features(restype);
  EXPECT_EQ(f.pos.sizes(), (std::vector<int64_t>{2, 3, kMaxAtomsPerToken, 3}));
  EXPECT_EQ(f.element.sizes(), (std::vector<int64_t>{2, 3, kMaxAtomsPerToken}));
  const ReferenceTable& ref = reference_atoms();
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i) {
      const int t = static_cast<int>(restype[b][i].item<int64_t>());
      for (int a = 0; a < kMaxAtomsPerToken; ++a) {
        const ReferenceAtom want = t <= kUnknownAminoAcid ? ref[t][a] : ReferenceAtom{};
        EXPECT_EQ(f.element[b][i][a].item<int64_t>(), want.element);
        EXPECT_EQ(f.mask[b][i][a].item<float>(), want.element > 0 ? 1.f : 0.f);
        EXPECT_EQ(f.charge[b][i][a].item<float>(), static_cast<float>(want.charge));
        for (int c = 0; c < 3; ++c) EXPECT_EQ(f.pos[b][i][a][c].item<float>(), want.pos[c]);
      }
    }
  EXPECT_EQ(f.mask[0][1].sum().item<float>(), 14.f);  // TRP
  // ALA's CB: 'C' 'B' then padding; TRP's CZ3 (slot 12): 'C' 'Z' '3'.
  EXPECT_TRUE(at::equal(f.name_chars[0][0][kAtomCB], at::tensor({'C' - 32, 'B' - 32, 0, 0}, at::kLong)));
  EXPECT_TRUE(at::equal(f.name_chars[0][1][12], at::tensor({'C' - 32, 'Z' - 32, '3' - 32, 0}, at::kLong)));
  EXPECT_EQ(f.name_chars[1][0].abs().sum().item<int64_t>(), 0);  // gap token: no atoms
  EXPECT_THROW(reference_features(at::full({1, 1}, kNumTokenTypes, at::kLong)), Error);
}

}  // namespace
}  // namespace megafold::data
