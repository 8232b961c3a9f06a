// Feature cache and MSAs: a3m parsing (insertions as deletions, gaps, malformed lines, empty
// files), mapping an MSA onto a chain's residues, the profile; cache builds that are byte-identical
// for any number of workers, resumable, and whose corrupted or truncated entries are named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/check.h"
#include "data/cache.h"
#include "data/dataset.h"
#include "data/msa.h"
#include "data/structure.h"

namespace megafold::data {
namespace {
namespace fs = std::filesystem;

const std::string kData = MEGAFOLD_TEST_SOURCE_DIR "/data/pdb";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(A3m, InsertionsBecomeDeletionsOfTheNextColumn) {
  const Msa m = parse_a3m(">query\nMKTA\nY\n>hit 1\n-KabTA.yY\n>hit 2\nxxMK---\n", "t.a3m");
  ASSERT_EQ(m.depth, 3);
  ASSERT_EQ(m.length, 5);
  const int M = amino_acid_of_letter('M'), K = amino_acid_of_letter('K'), T = amino_acid_of_letter('T');
  EXPECT_EQ(m.tokens[0], M);
  EXPECT_EQ(m.tokens[5], kGapToken);  // row 1 column 0
  EXPECT_EQ(m.tokens[7], T);
  EXPECT_EQ(m.deletions[7], 2);       // "ab" before T
  EXPECT_EQ(m.deletions[9], 1);       // "y" (after the skipped '.') before the last column
  EXPECT_EQ(m.tokens[10], M);
  EXPECT_EQ(m.deletions[10], 2);      // leading insertions count for the first column
  EXPECT_EQ(m.tokens[11], K);
  const MsaProfile p = msa_profile(m);
  for (int64_t i = 0; i < m.length; ++i) {
    float sum = 0;
    for (int t = 0; t < kNumTokenTypes; ++t) sum += p.profile[i * kNumTokenTypes + t];
    EXPECT_NEAR(sum, 1.f, 1e-6) << i;
  }
  EXPECT_NEAR(p.profile[0 * kNumTokenTypes + M], 2.f / 3, 1e-6);
  EXPECT_NEAR(p.deletion_mean[2], 2.f / 3, 1e-6);  // hit 1's "ab" before T
}

TEST(A3m, MalformedLinesNameFileAndLine) {
  EXPECT_NE(error_of([] { parse_a3m(">q\nMKT\n>h\nMK\n", "x.a3m"); }).find("x.a3m:3: sequence 2 has 2 aligned columns, the query has 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m(">q\nMK1\n", "x.a3m"); }).find("x.a3m:2:3: '1' is not an amino-acid code"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m("MKT\n", "x.a3m"); }).find("x.a3m:1: sequence before the first '>'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_a3m(">q\n>h\nMK\n", "x.a3m"); }).find("sequence 1 has no aligned column"),
            std::string::npos);
  EXPECT_EQ(parse_a3m("", "empty.a3m").depth, 0);  // no alignment: the chain is single-sequence
  EXPECT_EQ(parse_a3m("\n# comment\n", "empty.a3m").depth, 0);
}

TEST(A3m, MapsOntoTheObservedResiduesOfAChain) {
  // Full sequence MKTAYG; residues 2, 3 and 5 observed (label_seq_id).
  const Msa m = parse_a3m(">q\nMKTAYG\n>h\nMR-AYaG\n", "m.a3m");
  const std::vector<int8_t> seq = {static_cast<int8_t>(amino_acid_of_letter('K')), static_cast<int8_t>(amino_acid_of_letter('T')),
                                   static_cast<int8_t>(amino_acid_of_letter('Y'))};
  const Msa c = msa_for_chain(m, seq, {2, 3, 5}, "m.a3m");
  ASSERT_EQ(c.length, 3);
  EXPECT_EQ(c.tokens[3], amino_acid_of_letter('R'));
  EXPECT_EQ(c.tokens[4], kGapToken);
  EXPECT_EQ(c.tokens[5], amino_acid_of_letter('Y'));
  EXPECT_NE(error_of([&] { msa_for_chain(m, seq, {2, 3, 4}, "m.a3m"); }).find("residue 4 (Y) is 'A' in the query"),
            std::string::npos);
  EXPECT_NE(error_of([&] { msa_for_chain(m, seq, {2, 3, 9}, "m.a3m"); }).find("residue 9 (Y) is outside the query"),
            std::string::npos);
}

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("megafold_cache_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "in" / "sub");
    fs::create_directories(root_ / "msa");
    for (const char* f : {"1ubi.pdb.gz", "1a8o.cif.gz", "19hc.pdb.gz"}) fs::copy(kData + "/" + f, root_ / "in" / f);
    fs::copy(kData + "/1a28.pdb.gz", root_ / "in" / "sub" / "1a28.pdb.gz");
    std::ofstream(root_ / "in" / "broken.cif") << "data_broken\n_atom_site.id\n";
    // An MSA for 1ubi chain A: the query and one hit with a gap and an insertion.
    const std::string q = load_entry(kData + "/1ubi.pdb.gz").sequence(0);
    std::ofstream(root_ / "msa" / "1ubi_A.a3m") << ">q\n" << q << "\n>h\n-" << q.substr(1, 30) << "ww" << q.substr(31) << "\n";
    std::ofstream(root_ / "msa" / "1a8o_A.a3m") << ">q\nMKTAYIAKQR\n";  // does not match: reported, not fatal
  }
  void TearDown() override { fs::remove_all(root_); }
  CacheOptions options(const std::string& out, int jobs) const {
    return {(root_ / "in").string(), (root_ / "msa").string(), (root_ / out).string(), jobs, true};
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  fs::path root_;
};

TEST_F(CacheTest, BuildsAreByteIdenticalForAnyWorkerCountAndReadBackExactly) {
  const CacheSummary one = build_cache(options("c1", 1));
  const CacheSummary three = build_cache(options("c3", 3));
  EXPECT_EQ(one.entries, 4);
  EXPECT_EQ(one.skipped, 1);
  EXPECT_EQ(one.msa_rows, 2);
  EXPECT_EQ(one.warnings, 1);  // the mismatching MSA of 1a8o: counted, not silent
  EXPECT_EQ(three.tokens, one.tokens);
  for (const auto& it : fs::recursive_directory_iterator(root_ / "c1")) {
    if (!it.is_regular_file()) continue;
    const fs::path rel = fs::relative(it.path(), root_ / "c1");
    EXPECT_EQ(read(it.path()), read(root_ / "c3" / rel)) << rel;
  }
  const std::string skipped = read(root_ / "c1" / "skipped.tsv");
  EXPECT_NE(skipped.find("broken.cif"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("1a8o_A.a3m"), std::string::npos) << skipped;  // the mismatching MSA

  const CacheEntries cache = read_cache((root_ / "c1").string());
  ASSERT_EQ(cache.entries.size(), 4u);
  EXPECT_TRUE(cache.skipped.empty());
  for (const Entry& c : cache.entries) {
    const Entry e = load_entry(c.path);
    EXPECT_EQ(c.name, e.name);
    EXPECT_EQ(c.restype, e.restype);
    EXPECT_EQ(c.residue_index, e.residue_index);
    EXPECT_EQ(c.author_index, e.author_index);
    EXPECT_EQ(c.insertion_codes, e.insertion_codes);
    EXPECT_EQ(c.asym_id, e.asym_id);
    EXPECT_EQ(c.entity_id, e.entity_id);
    EXPECT_EQ(c.sym_id, e.sym_id);
    EXPECT_EQ(c.coords, e.coords);
    EXPECT_EQ(c.atom_mask, e.atom_mask);
    EXPECT_EQ(c.chain_ids, e.chain_ids);
    ASSERT_EQ(c.msas.size(), static_cast<size_t>(c.n_chains()));
    if (c.name == "1ubi") {
      EXPECT_EQ(c.msas[0].depth, 2);
      EXPECT_EQ(c.msas[0].tokens[c.msas[0].length], kGapToken);
      // The profile is cached with the MSA: the loader does not recompute it.
      const MsaProfile p = msa_profile(c.msas[0]);
      EXPECT_EQ(c.msas[0].profile, p.profile);
      EXPECT_EQ(c.msas[0].deletion_mean, p.deletion_mean);
    } else {
      for (const Msa& m : c.msas) EXPECT_EQ(m.depth, 0);
    }
  }
  // Training reads the cache like a directory of files: same entries, same split.
  const Dataset a = load_dataset((root_ / "c1").string(), true), b = load_dataset((root_ / "in").string(), true);
  ASSERT_EQ(a.train.size() + a.validation.size(), b.train.size() + b.validation.size());
  for (size_t i = 0; i < a.train.size(); ++i) {
    EXPECT_EQ(a.train[i].name(), b.train[i].name());
    EXPECT_EQ(a.train[i].get()->coords, b.train[i].get()->coords);  // decoded on use, the same entry
  }
}

TEST_F(CacheTest, CorruptedAndTruncatedEntriesAreNamedAndRebuilt) {
  build_cache(options("c", 2));
  const fs::path entries = root_ / "c" / "entries";
  {
    std::fstream f(entries / "1ubi.mfe", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  fs::resize_file(entries / "19hc.mfe", fs::file_size(entries / "19hc.mfe") - 10);
  const CacheEntries cache = read_cache((root_ / "c").string());
  EXPECT_EQ(cache.entries.size(), 2u);
  ASSERT_EQ(cache.skipped.size(), 2u);
  std::string all = cache.skipped[0] + "\n" + cache.skipped[1];
  EXPECT_NE(all.find("cache entry 1ubi"), std::string::npos) << all;
  EXPECT_NE(all.find("checksum mismatch"), std::string::npos) << all;
  EXPECT_NE(all.find("cache entry 19hc"), std::string::npos) << all;
  EXPECT_NE(all.find("truncated"), std::string::npos) << all;
  EXPECT_NE(error_of([&] { read_entry_file((entries / "1ubi.mfe").string()); }).find("1ubi.mfe"), std::string::npos);
  // A rerun keeps the valid entries and rebuilds the two bad ones.
  const CacheSummary again = build_cache(options("c", 2));
  EXPECT_EQ(again.reused, 2);
  EXPECT_EQ(again.built, 2);
  EXPECT_TRUE(read_cache((root_ / "c").string()).skipped.empty());
}

// A rerun keys each entry by what it was built from: a changed source file, a first-time MSA
// and an entry file that holds another entry are rebuilt; what did not change is kept.
TEST_F(CacheTest, RerunsRebuildWhatChanged) {
  const CacheSummary first = build_cache(options("c", 2));
  EXPECT_EQ(first.built, 4);
  const CacheSummary same = build_cache(options("c", 2));
  EXPECT_EQ(same.reused, 4);
  EXPECT_EQ(same.built, 0);

  fs::copy_file(kData + "/1ubi.pdb.gz", root_ / "in" / "sub" / "1a28.pdb.gz", fs::copy_options::overwrite_existing);
  const Entry hc = load_entry(kData + "/19hc.pdb.gz");
  std::ofstream(root_ / "msa" / ("19hc_" + hc.chain_ids[0] + ".a3m")) << ">q\n" << hc.sequence(0) << "\n";
  fs::copy_file(root_ / "c" / "entries" / "1ubi.mfe", root_ / "c" / "entries" / "1a8o.mfe",
                fs::copy_options::overwrite_existing);
  const CacheSummary again = build_cache(options("c", 2));
  EXPECT_EQ(again.built, 3);  // 1a28 (source), 19hc (MSA), 1a8o (held 1ubi)
  EXPECT_EQ(again.reused, 1);
  const CacheEntries cache = read_cache((root_ / "c").string());
  EXPECT_TRUE(cache.skipped.empty());
  for (const Entry& e : cache.entries) {
    if (e.name == "1a28") EXPECT_EQ(e.n_tokens(), load_entry(kData + "/1ubi.pdb.gz").n_tokens());
    if (e.name == "19hc") EXPECT_EQ(e.msas.at(0).depth, 1);
  }
}

// Training from a cache holds its index only: entries are mapped and decoded when sampled, so
// a file damaged (or removed) after the start is found then, named, and replaced by another
// draw, the same on every run.
TEST_F(CacheTest, TrainingFromACacheDecodesEntriesWhenSampled) {
  build_cache(options("c", 2));
  const Dataset ds = load_dataset((root_ / "c").string(), true);
  ASSERT_EQ(ds.train.size() + ds.validation.size(), 4u);
  const std::string victim = ds.train[0].name();
  fs::remove(root_ / "c" / "entries" / (victim + ".mfe"));
  EXPECT_THROW(ds.train[0].get(), Error);
  std::set<std::string> drawn;
  for (uint64_t g = 0; g < 3 * ds.train.size(); ++g) {
    const auto [entry, tokens] = sample_or_replace(ds, 1, g, [](const Entry& e, uint64_t, const CropFocus&) { return e.n_tokens(); });
    EXPECT_EQ(tokens, entry->n_tokens());
    drawn.insert(entry->name);
  }
  EXPECT_EQ(drawn.count(victim), 0u);
  EXPECT_EQ(drawn.size(), ds.train.size() - 1);
}

// The synthetic caches of the loader benchmark at scale: entries renamed in order, their MSAs
// as deep as asked with the query first, readable as training reads any cache.
TEST_F(CacheTest, SyntheticCachesReadBackAsAnyCache) {
  const std::vector<Entry> sources = {load_entry(kData + "/1ubi.pdb.gz"), load_entry(kData + "/1a8o.cif.gz")};
  const CacheSummary s = write_synthetic_cache(sources, 12, 5, (root_ / "syn").string());
  EXPECT_EQ(s.entries, 12);
  const Dataset ds = load_dataset((root_ / "syn").string(), true, /*overfit=*/true);
  ASSERT_EQ(ds.train.size(), 12u);
  EXPECT_EQ(ds.train[0].name(), "x00");
  EXPECT_EQ(ds.train[11].name(), "x11");
  const auto e = ds.train[3].get();  // from 1a8o
  EXPECT_EQ(e->restype, sources[1].restype);
  ASSERT_EQ(e->msas.size(), static_cast<size_t>(e->n_chains()));
  EXPECT_EQ(e->msas[0].depth, 5);
  EXPECT_EQ(std::vector<int8_t>(e->msas[0].tokens.begin(), e->msas[0].tokens.begin() + e->msas[0].length),
            std::vector<int8_t>(e->restype.begin(), e->restype.begin() + e->msas[0].length));  // the query
  EXPECT_EQ(e->msas[0].profile, msa_profile(e->msas[0]).profile);
}

TEST_F(CacheTest, NotACacheEntryAndOtherVersionsAreClearErrors) {
  const std::string bytes = encode_entry(load_entry(kData + "/1ubi.pdb.gz"));
  auto decode = [](std::string b) {
    return error_of([&] { decode_entry(reinterpret_cast<const unsigned char*>(b.data()), b.size(), "e.mfe"); });
  };
  EXPECT_NE(decode("hello").find("e.mfe: not a megafold cache entry"), std::string::npos);
  std::string other = bytes;
  other[8] = 9;  // version field
  EXPECT_NE(decode(other).find("cache entry version 9"), std::string::npos);
  EXPECT_EQ(decode(bytes), "no error");
}

}  // namespace
}  // namespace megafold::data
