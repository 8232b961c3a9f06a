// AF3's weighted sampling of chains and interfaces (data/sampling.h) and the crops focused on the
// drawn unit: interfaces against brute force, eq. 1 on a hand-made set, draw frequencies within
// a bound derived from the count, streams that are a pure function of (seed, g) whether the
// units come from a cache's units.tsv or from the entries, focused crops, file errors, config.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "config/config.h"
#include "core/check.h"
#include "core/seed.h"
#include "data/cache.h"
#include "data/crop.h"
#include "data/dataset.h"
#include "data/sampling.h"
#include "data/structure.h"
#include "testing.h"

namespace megafold::data {
namespace {
namespace fs = std::filesystem;
using megafold::testing::error_of;
using megafold::testing::TempDir;

const std::string kData = MEGAFOLD_TEST_SOURCE_DIR "/data/pdb";

// Every interface by comparing every pair of resolved heavy atoms of different chains.
std::set<std::pair<int32_t, int32_t>> brute_force_interfaces(const Entry& e, double cutoff) {
  std::vector<std::pair<size_t, int32_t>> atoms;  // (atom index, chain)
  for (int i = 0; i < e.n_tokens(); ++i)
    for (int s = 0; s < kMaxAtomsPerToken; ++s)
      if (e.atom_mask[static_cast<size_t>(i) * kMaxAtomsPerToken + s])
        atoms.emplace_back(static_cast<size_t>(i) * kMaxAtomsPerToken + s, e.asym_id[i]);
  std::set<std::pair<int32_t, int32_t>> out;
  for (size_t p = 0; p < atoms.size(); ++p)
    for (size_t q = p + 1; q < atoms.size(); ++q) {
      const auto [a, ca] = atoms[p];
      const auto [b, cb] = atoms[q];
      if (ca == cb) continue;
      double d2 = 0;
      for (int k = 0; k < 3; ++k) {
        const double d = static_cast<double>(e.coords[3 * a + k]) - e.coords[3 * b + k];
        d2 += d * d;
      }
      if (d2 < cutoff * cutoff) out.emplace(std::min(ca, cb), std::max(ca, cb));
    }
  return out;
}

std::set<std::pair<int32_t, int32_t>> as_set(const std::vector<std::pair<int32_t, int32_t>>& v) { return {v.begin(), v.end()}; }

// One chain of a hand-made entry: its author id, type, residues (CCD codes; a ligand chain is
// one per-atom token per code) and where it lies: token k's centre atom at (x, 3.8 k, 0).
struct ChainSpec {
  std::string author;
  MolType type;
  std::vector<std::string> codes;
  double x;
};

Entry make_entry(const std::string& name, const std::vector<ChainSpec>& chains) {
  Entry e;
  e.name = name;
  for (size_t c = 0; c < chains.size(); ++c) {
    const ChainSpec& spec = chains[c];
    for (size_t k = 0; k < spec.codes.size(); ++k) {
      const int t = spec.type == MolType::kLigand ? unknown_type(MolType::kLigand) : residue_type(spec.type, spec.codes[k]);
      EXPECT_GE(t, 0) << spec.codes[k];
      e.restype.push_back(static_cast<int8_t>(t));
      e.residue_index.push_back(static_cast<int32_t>(k + 1));
      e.asym_id.push_back(static_cast<int32_t>(c));
    }
    e.chain_ids.push_back(spec.author);
  }
  e.fill_residue_defaults();
  e.coords.assign(e.restype.size() * kMaxAtomsPerToken * 3, 0.f);
  e.atom_mask.assign(e.restype.size() * kMaxAtomsPerToken, 0);
  int i = 0;
  for (const ChainSpec& spec : chains)
    for (size_t k = 0; k < spec.codes.size(); ++k, ++i) {
      if (spec.type == MolType::kLigand) {
        e.mol_type[i] = static_cast<int8_t>(MolType::kLigand);
        auto it = std::find(e.components.begin(), e.components.end(), spec.codes[k]);
        if (it == e.components.end()) it = e.components.insert(it, spec.codes[k]);
        e.component[i] = static_cast<int32_t>(it - e.components.begin());
      }
      const size_t a = static_cast<size_t>(i) * kMaxAtomsPerToken + e.centre_slot(i);
      e.atom_mask[a] = 1;
      e.coords[3 * a] = static_cast<float>(spec.x);
      e.coords[3 * a + 1] = static_cast<float>(3.8 * static_cast<double>(k));
    }
  assign_entities(e);
  return e;
}

// The weight of each unit of ds (differences of the running sums).
std::vector<double> unit_weights(const Dataset& ds) {
  std::vector<double> w;
  for (size_t u = 0; u < ds.cumulative_weights.size(); ++u)
    w.push_back(ds.cumulative_weights[u] - (u == 0 ? 0.0 : ds.cumulative_weights[u - 1]));
  return w;
}

// The bundled structures, loaded once.
const Dataset& bundled() {
  static const Dataset ds = load_dataset(kData, true);
  return ds;
}

// Interfaces of a real complex (two proteins, two copies of a ligand, Mn and Zn ions) are those
// that comparing every pair of atoms finds; ligands and ions form interfaces like any chain.
TEST(Sampling, InterfacesOfARealComplexMatchBruteForce) {
  const Entry e = load_entry(kData + "/5a7w.cif.gz");
  ASSERT_EQ(e.n_chains(), 8);
  const std::set<std::pair<int32_t, int32_t>> expected = brute_force_interfaces(e, kInterfaceDistance);
  EXPECT_EQ(as_set(chain_interfaces(e)), expected);
  const auto found = chain_interfaces(e);
  EXPECT_TRUE(std::is_sorted(found.begin(), found.end()));
  int protein_ligand = 0;
  for (const auto& [a, b] : expected)
    protein_ligand += e.chain_mol_type(a) == MolType::kProtein && e.chain_mol_type(b) == MolType::kLigand;
  EXPECT_GE(protein_ligand, 2) << "each protein copy holds its 35M ligand";
  // Other cutoffs give other sets, still the brute-force ones.
  const std::set<std::pair<int32_t, int32_t>> near = brute_force_interfaces(e, 3.0), far = brute_force_interfaces(e, 12.0);
  EXPECT_EQ(as_set(chain_interfaces(e, 3.0)), near);
  EXPECT_EQ(as_set(chain_interfaces(e, 12.0)), far);
  EXPECT_NE(near, far);
}

// Many chains packed in a small box (fresh random coordinates): the cell grid and the bounding
// boxes miss no pair and add none, including pairs that straddle cell edges at negative
// coordinates; the cutoff is strict.
TEST(Sampling, InterfacesOfRandomChainsMatchBruteForce) {
  std::mt19937_64 rng(megafold::testing::fresh_seed());
  std::uniform_real_distribution<double> pos(-30.0, 30.0);
  std::vector<ChainSpec> specs;
  for (int c = 0; c < 60; ++c) specs.push_back({"A", MolType::kLigand, {"ZN"}, 0.0});
  Entry e = make_entry("random", specs);
  for (int i = 0; i < e.n_tokens(); ++i)
    for (int k = 0; k < 3; ++k) e.coords[static_cast<size_t>(i) * kMaxAtomsPerToken * 3 + k] = static_cast<float>(pos(rng));
  EXPECT_EQ(as_set(chain_interfaces(e)), brute_force_interfaces(e, kInterfaceDistance));
  // Exactly at the cutoff is no interface; just inside it is, across the cell edge at 0.
  Entry edge = make_entry("edge", {{"A", MolType::kLigand, {"ZN"}, -0.25}, {"B", MolType::kLigand, {"ZN"}, 4.75},
                                   {"C", MolType::kLigand, {"ZN"}, -5.25}});
  EXPECT_EQ(chain_interfaces(edge), (std::vector<std::pair<int32_t, int32_t>>{}));
  edge.coords[3 * (static_cast<size_t>(1) * kMaxAtomsPerToken)] = 4.74f;
  EXPECT_EQ(chain_interfaces(edge), (std::vector<std::pair<int32_t, int32_t>>{{0, 1}}));
}

// Three hand-made entries; the expected weights are computed by hand from eq. 1 below.
//   p1: A protein ALA x4 at x=0, B protein ALA x4 at x=4, ZN (author A) at x=-3, R RNA A G at x=100
//   p2, p3: A protein ALA x4 at x=0, ZN (author A) at x=50, B protein GLY GLY at x=3
// Interfaces (< 5 A): p1 0-1 (4 A), 0-2 (3 A; ZN is 7 A from B); p2, p3 0-2 (3 A).
// Default clusters: protein ALA4 {p1.0, p1.1, p2.0, p3.0} (4), ZN {p1.2, p2.1, p3.1} (3),
// RNA AG {p1.3} (1), protein GG {p2.2, p3.2} (2); interfaces {ALA4, ALA4} (1), {ALA4, ZN} (1),
// {ALA4, GG} (2).
std::vector<Entry> hand_made_entries() {
  const std::vector<std::string> ala4 = {"ALA", "ALA", "ALA", "ALA"};
  auto p23 = [&](const std::string& name) {
    return make_entry(name, {{"A", MolType::kProtein, ala4, 0.0},
                             {"A", MolType::kLigand, {"ZN"}, 50.0},
                             {"B", MolType::kProtein, {"GLY", "GLY"}, 3.0}});
  };
  return {make_entry("p1", {{"A", MolType::kProtein, ala4, 0.0},
                            {"B", MolType::kProtein, ala4, 4.0},
                            {"A", MolType::kLigand, {"ZN"}, -3.0},
                            {"R", MolType::kRna, {"A", "G"}, 100.0}}),
          p23("p2"), p23("p3")};
}

Dataset hand_made_dataset() {
  Dataset ds;
  for (Entry& e : hand_made_entries()) ds.train.emplace_back(std::move(e));
  return ds;
}

TEST(Sampling, WeightsFollowEquation1) {
  Dataset ds = hand_made_dataset();
  const SamplingSummary s = use_af3_sampling(ds, "", true);
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.chains, 10);
  EXPECT_EQ(s.interfaces, 4);
  EXPECT_EQ(s.chain_clusters, 4);
  EXPECT_EQ(s.interface_clusters, 3);
  // Per entry: chains in asym order, then interfaces. beta_chain 0.5, beta_interface 1,
  // alpha: protein 3, nucleic 3, ligand 1.
  const std::vector<std::tuple<uint32_t, CropFocus, double>> expected = {
      {0, {0, -1}, 0.5 / 4 * 3},  {0, {1, -1}, 0.5 / 4 * 3}, {0, {2, -1}, 0.5 / 3 * 1}, {0, {3, -1}, 0.5 / 1 * 3},
      {0, {0, 1}, 1.0 / 1 * 6},   {0, {0, 2}, 1.0 / 1 * 4},
      {1, {0, -1}, 0.5 / 4 * 3},  {1, {1, -1}, 0.5 / 3 * 1}, {1, {2, -1}, 0.5 / 2 * 3}, {1, {0, 2}, 1.0 / 2 * 6},
      {2, {0, -1}, 0.5 / 4 * 3},  {2, {1, -1}, 0.5 / 3 * 1}, {2, {2, -1}, 0.5 / 2 * 3}, {2, {0, 2}, 1.0 / 2 * 6}};
  ASSERT_EQ(ds.units.size(), expected.size());
  const std::vector<double> w = unit_weights(ds);
  for (size_t u = 0; u < expected.size(); ++u) {
    EXPECT_EQ(ds.units[u].entry, std::get<0>(expected[u])) << u;
    EXPECT_EQ(ds.units[u].focus, std::get<1>(expected[u])) << u;
    EXPECT_NEAR(w[u], std::get<2>(expected[u]), 1e-12) << u;
  }

  // A chain cluster file: the RNA of p1 and the GG chains of p2 and p3 in one cluster "big";
  // p2's author chain A into a cluster of its own, which its ZN (author A too, a ligand) does
  // not join. Lines for a missing chain or a non-training entry change nothing.
  TempDir dir;
  const std::string file = dir.write("chains.tsv", "entry\tchain\tcluster\n# comment\np1\tR\tbig\np2\tB\tbig\n"
                                                   "p3\tB\tbig\np2\tA\tsolo\np1\tZ\tnone\nother\tA\tbig\n");
  Dataset user = hand_made_dataset();
  const SamplingSummary t = use_af3_sampling(user, file, true);
  EXPECT_EQ(t.from_file, 4);
  // Clusters now: ALA4 {p1.0, p1.1, p3.0} (3), solo {p2.0}, ZN (3), big {p1.3, p2.2, p3.2} (3);
  // interfaces {ALA4, ALA4}, {ALA4, ZN}, {solo, big}, {ALA4, big}: one each.
  const std::vector<double> expected_user = {0.5 / 3 * 3, 0.5 / 3 * 3, 0.5 / 3 * 1, 0.5 / 3 * 3, 6, 4,
                                             0.5 / 1 * 3, 0.5 / 3 * 1, 0.5 / 3 * 3, 6,
                                             0.5 / 3 * 3, 0.5 / 3 * 1, 0.5 / 3 * 3, 6};
  const std::vector<double> wu = unit_weights(user);
  ASSERT_EQ(wu.size(), expected_user.size());
  for (size_t u = 0; u < wu.size(); ++u) EXPECT_NEAR(wu[u], expected_user[u], 1e-12) << u;
  EXPECT_EQ(t.chain_clusters, 4);
  EXPECT_EQ(t.interface_clusters, 4);
}

// The largest deviation of a binomial count from its mean that Bernstein's inequality allows at
// probability delta: P(|X - np| >= t) <= 2 exp(-t^2 / (2 (np(1-p) + t/3))).
double bernstein_bound(double n, double p, double delta) {
  const double l = std::log(2.0 / delta), var = n * p * (1 - p);
  return l / 3 + std::sqrt(l * l / 9 + 2 * var * l);
}

// Over many g, every unit of the bundled training set is drawn as often as its share of the
// weights says: each count within the Bernstein bound at a family-wise false-failure probability
// of 1e-6 (split over the units), so the tolerance follows from the count and the weights alone.
TEST(Sampling, DrawFrequenciesFollowTheWeights) {
  Dataset ds = bundled();
  use_af3_sampling(ds, "", true);
  ASSERT_GT(ds.units.size(), 100u);
  std::map<std::tuple<size_t, int32_t, int32_t>, size_t> index;
  for (size_t u = 0; u < ds.units.size(); ++u)
    ASSERT_TRUE(index.emplace(std::make_tuple(ds.units[u].entry, ds.units[u].focus.chain_a, ds.units[u].focus.chain_b), u).second);
  const int64_t n = 400000;
  std::vector<int64_t> count(ds.units.size(), 0);
  const uint64_t seed = megafold::testing::fresh_seed();
  for (int64_t g = 0; g < n; ++g) {
    const Draw d = ds.draw(seed, static_cast<uint64_t>(g));
    const auto it = index.find({d.entry, d.focus.chain_a, d.focus.chain_b});
    ASSERT_NE(it, index.end());
    ++count[it->second];
  }
  const std::vector<double> w = unit_weights(ds);
  const double total = ds.cumulative_weights.back();
  const double delta = 1e-6 / static_cast<double>(ds.units.size());
  int interfaces_drawn = 0;
  for (size_t u = 0; u < w.size(); ++u) {
    const double p = w[u] / total;
    EXPECT_LE(std::abs(static_cast<double>(count[u]) - n * p), bernstein_bound(n, p, delta))
        << "unit " << u << " of entry " << ds.train[ds.units[u].entry].name() << ": " << count[u] << " draws, " << n * p
        << " expected";
    interfaces_drawn += ds.units[u].focus.chain_b >= 0 && count[u] > 0;
  }
  EXPECT_GT(interfaces_drawn, 10);
}

// A cache writes units.tsv; the draws are a pure function of (seed, g) (any order of g), and the
// same whether the units come from units.tsv, from decoding the cache's entries (a cache without
// the file, or with a stale row), or from the structure files themselves.
TEST(Sampling, StreamIsPureAndTheSameFromUnitsFileOrDecoding) {
  TempDir dir;
  const fs::path in = fs::path(dir.str()) / "in";
  fs::create_directories(in);
  for (const char* f : {"5a7w.cif.gz", "1afs.pdb.gz", "7bqu.cif.gz", "1ubi.pdb.gz", "3cro.pdb.gz", "4i6p.cif.gz"})
    fs::copy_file(kData + "/" + f, in / f);
  const std::string cache = (fs::path(dir.str()) / "cache").string();
  build_cache({in.string(), "", cache, 2, true});
  ASSERT_TRUE(fs::exists(fs::path(cache) / kUnitsFile));

  auto stream = [](Dataset ds, uint64_t seed, bool reverse) {
    use_af3_sampling(ds, "", true);
    std::vector<std::string> out(3000);
    for (size_t k = 0; k < out.size(); ++k) {
      const size_t g = reverse ? out.size() - 1 - k : k;
      const Draw d = ds.draw(seed, g);
      out[g] = ds.train[d.entry].name() + ":" + std::to_string(d.focus.chain_a) + "-" + std::to_string(d.focus.chain_b);
    }
    return out;
  };
  const Dataset from_cache = load_dataset(cache, true);
  const auto reference = stream(from_cache, 5, false);
  EXPECT_EQ(stream(from_cache, 5, true), reference);
  EXPECT_NE(stream(from_cache, 6, false), reference);
  std::set<std::string> kinds;
  for (const std::string& s : reference) kinds.insert(s.substr(s.find(':')));
  EXPECT_GT(kinds.size(), 4u) << "chains and interfaces are drawn";

  // The units.tsv rows are what decoding the entries gives.
  const std::vector<EntryUnits> cached_units = training_units(from_cache, true);
  for (size_t i = 0; i < from_cache.train.size(); ++i)
    EXPECT_EQ(cached_units[i], entry_units(*from_cache.train[i].get())) << from_cache.train[i].name();
  EXPECT_EQ(stream(load_dataset(in.string(), true), 5, false), reference);  // the structure files

  // A stale row (another CRC-32 than the index's) is not used: that entry is decoded.
  const fs::path units_file = fs::path(cache) / kUnitsFile;
  std::ifstream original(units_file);
  std::stringstream text;
  text << original.rdbuf();
  std::string edited = text.str();
  const std::string victim = from_cache.train[0].name() + "\t";
  for (size_t at = edited.find("\n" + victim); at != std::string::npos; at = edited.find("\n" + victim, at + 1)) {
    const size_t crc = at + 1 + victim.size();
    edited.replace(crc, edited.find('\t', crc) - crc, "1");
  }
  std::ofstream(units_file) << edited;
  ASSERT_NE(edited, text.str());
  EXPECT_EQ(stream(load_dataset(cache, true), 5, false), reference);
  fs::remove(units_file);  // a cache built before units.tsv
  EXPECT_EQ(stream(load_dataset(cache, true), 5, false), reference);

  // sample_or_replace hands prepare the drawn unit, and replaces a failing draw by the same
  // other unit every time.
  Dataset ds = load_dataset(cache, true);
  use_af3_sampling(ds, "", true);
  for (uint64_t g = 0; g < 200; ++g) {
    const auto [entry, focus] = sample_or_replace(ds, 5, g, [&](const Entry& e, uint64_t draw, const CropFocus& f) {
      EXPECT_EQ(e.name, ds.train[ds.draw(5, draw).entry].name());
      EXPECT_EQ(f, ds.draw(5, draw).focus);
      return f;
    });
    EXPECT_EQ(focus, ds.draw(5, g).focus);
    EXPECT_EQ(entry->name, ds.sample(5, g).name());
  }
  const std::string bad = ds.sample(5, 17).name();
  auto fail_bad = [&](const Entry& e, uint64_t, const CropFocus& f) {
    if (e.name == bad) throw Error("entry " + e.name + ": cannot crop");
    return f;
  };
  const auto replaced = sample_or_replace(ds, 5, 17, fail_bad);
  EXPECT_NE(replaced.first->name, bad);
  EXPECT_EQ(sample_or_replace(ds, 5, 17, fail_bad).second, replaced.second);
}

// The tokens a crop would centre on: every kept token c whose nearest crop_size tokens (by
// centre atom, unresolved last, ties to the lower index) are exactly the crop.
std::vector<int32_t> crop_centres(const Entry& e, const std::vector<int32_t>& crop) {
  auto centre = [&](int i) { return static_cast<size_t>(i) * kMaxAtomsPerToken + e.centre_slot(i); };
  std::vector<int32_t> out;
  for (const int32_t c : crop) {
    std::vector<std::pair<double, int32_t>> d;
    for (int i = 0; i < e.n_tokens(); ++i) {
      double d2 = 0;
      for (int k = 0; k < 3; ++k) d2 += std::pow(e.coords[3 * centre(c) + k] - e.coords[3 * centre(i) + k], 2);
      d.emplace_back(e.atom_mask[centre(i)] ? d2 : INFINITY, i);
    }
    std::sort(d.begin(), d.end());
    std::vector<int32_t> nearest;
    for (size_t j = 0; j < crop.size(); ++j) nearest.push_back(d[j].second);
    std::sort(nearest.begin(), nearest.end());
    if (nearest == crop) out.push_back(c);
  }
  return out;
}

// A crop focused on a chain centres on one of that chain's tokens (spatial crop), or on one of
// its tokens within 15 A of the other chain (interface crop); on two protein chains, where the
// crop is exactly the centre's nearest tokens.
TEST(Crop, ChainFocusedCropsCentreOnTheChain) {
  const Entry e = load_entry(kData + "/4i6p.cif.gz");
  ASSERT_EQ(e.n_chains(), 2);
  ASSERT_TRUE(e.components.empty());
  const std::vector<bool> interface = interface_tokens(e);
  for (int32_t chain : {0, 1})
    for (const bool at_interface : {false, true})
      for (uint64_t seed = 0; seed < 6; ++seed) {
        const std::vector<int32_t> crop = spatial_crop(e, 64, seed, at_interface, {chain, -1});
        ASSERT_EQ(crop.size(), 64u);
        bool centred = false;
        for (const int32_t c : crop_centres(e, crop))
          centred = centred || (e.asym_id[c] == chain && (!at_interface || interface[c]));
        EXPECT_TRUE(centred) << "chain " << chain << " interface " << at_interface << " seed " << seed;
        EXPECT_EQ(crop, spatial_crop(e, 64, seed, at_interface, {chain, -1}));
        // training_crop passes the focus to its spatial crops.
        EXPECT_EQ(training_crop(e, 64, {0, !at_interface ? 1.0 : 0.0, at_interface ? 1.0 : 0.0}, seed, {chain, -1}), crop);
      }
  // The contiguous crop takes no focus; no focus is the crop of the entry as a whole.
  EXPECT_EQ(training_crop(e, 64, {1, 0, 0}, 3, {1, -1}), contiguous_crop(e, 64, 3));
  EXPECT_EQ(spatial_crop(e, 64, 3, true, {}), spatial_crop(e, 64, 3, true));
  // A chain the entry does not have is named.
  EXPECT_NE(error_of([&] { spatial_crop(e, 64, 3, false, {2, -1}); }).find("entry 4i6p: crop focus on chains 2"),
            std::string::npos);
}

// An interface-focused crop of a protein-ligand and a protein-protein interface holds tokens of
// both chains, centred within the interface; a ligand chain's crop holds the whole ligand.
TEST(Crop, InterfaceFocusedCropsHoldBothChains) {
  const Entry e = load_entry(kData + "/5a7w.cif.gz");
  const auto interfaces = as_set(chain_interfaces(e));
  ASSERT_TRUE(interfaces.count({0, 1}) && interfaces.count({0, 2}));
  ASSERT_EQ(e.chain_mol_type(2), MolType::kLigand);
  for (const std::pair<int32_t, int32_t> pair : {std::make_pair(0, 1), std::make_pair(0, 2)})
    for (const bool at_interface : {true, false})
      for (uint64_t seed = 0; seed < 8; ++seed) {
        const std::vector<int32_t> crop = spatial_crop(e, 128, seed, at_interface, {pair.first, pair.second});
        ASSERT_EQ(crop.size(), 128u);
        int in_a = 0, in_b = 0;
        for (const int32_t t : crop) in_a += e.asym_id[t] == pair.first, in_b += e.asym_id[t] == pair.second;
        EXPECT_GT(in_a, 0) << pair.first << "-" << pair.second << " seed " << seed;
        EXPECT_GT(in_b, 0) << pair.first << "-" << pair.second << " seed " << seed;
      }
  int ligand_tokens = 0;
  for (int i = 0; i < e.n_tokens(); ++i) ligand_tokens += e.asym_id[i] == 2;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const std::vector<int32_t> crop = spatial_crop(e, 96, seed, false, {2, -1});
    int kept = 0;
    for (const int32_t t : crop) kept += e.asym_id[t] == 2;
    EXPECT_EQ(kept, ligand_tokens) << "seed " << seed;
  }
}

TEST(Sampling, FileErrorsNameFileAndLine) {
  TempDir dir;
  auto clusters = [&](const std::string& text) {
    return error_of([&] { read_chain_clusters(dir.write("chains.tsv", text)); });
  };
  EXPECT_NE(clusters("# c\n1abc\tA\n").find("chains.tsv:2: expected 'entry<TAB>chain<TAB>cluster'"), std::string::npos);
  EXPECT_NE(clusters("1abc\tA\tx\ty\n").find("chains.tsv:1: expected"), std::string::npos);
  EXPECT_NE(clusters("1abc\tA\tx\n1abc\tB\tx\n1abc\tA\ty\n").find("chains.tsv:3: chain 'A' of entry '1abc' is listed twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_chain_clusters(dir.str() + "/missing.tsv"); }).find("missing.tsv: cannot read"),
            std::string::npos);
  // Through the sampler, the same errors stop the setup.
  Dataset ds = hand_made_dataset();
  EXPECT_NE(error_of([&] { use_af3_sampling(ds, dir.write("bad.tsv", "p1\tA\n"), true); }).find("bad.tsv:1:"),
            std::string::npos);
  auto units = [&](const std::string& rows) {
    return error_of([&] { read_units_tsv(dir.write("units.tsv", units_tsv_header() + rows)); });
  };
  EXPECT_NE(units("x\t1\tchain\t1\tA\tprotein\t0000000000000001\n").find("units.tsv:4: chain 1 of entry 'x', expected chain 0"),
            std::string::npos);
  EXPECT_NE(units("x\t1\tchain\t0\tA\tlipid\t0000000000000001\n").find("units.tsv:4: unknown molecule type 'lipid'"),
            std::string::npos);
  EXPECT_NE(units("x\t1\tchain\t0\tA\tligand\t00000001\n").find("units.tsv:4: the cluster is 16 hex digits"),
            std::string::npos);
  EXPECT_NE(units("x\t1\tchain\t0\tA\tligand\t0000000000000001\nx\t1\tinterface\t0\t1\n").find("units.tsv:5: interface 0-1"),
            std::string::npos);
  EXPECT_NE(units("x\t1\tchain\t0\tA\tligand\t0000000000000001\nx\t2\tinterface\t0\t0\n").find("units.tsv:5: entry 'x' has rows with"),
            std::string::npos);
  EXPECT_NE(units("x\t1\tloop\n").find("units.tsv:4: unknown unit 'loop'"), std::string::npos);
  // What units_tsv_rows writes reads back.
  const EntryUnits u = entry_units(hand_made_entries()[0]);
  const auto read = read_units_tsv(dir.write("units.tsv", units_tsv_header() + units_tsv_rows("p1", 42, u)));
  ASSERT_EQ(read.count("p1"), 1u);
  EXPECT_EQ(read.at("p1").crc32, "42");
  EXPECT_EQ(read.at("p1").units, u);
}

// data.sampling: "entry" by default (today's streams), "af3" in AF3's training stages; af3 is
// exclusive with the entry weights, and chain clusters need it; errors name the keys.
TEST(Config, Af3SamplingKeys) {
  EXPECT_EQ(config::load_config("cpu-tiny").data.sampling, "entry");
  for (const char* name : {"af3-full", "af3-finetune", "af3-finetune-768"})
    EXPECT_EQ(config::load_config(name).data.sampling, "af3") << name;
  const std::string weighted = error_of([] { config::load_config("af3-full", {"data.weights=w.tsv"}); });
  EXPECT_NE(weighted.find("'data.sampling' af3"), std::string::npos) << weighted;
  EXPECT_NE(weighted.find("'data.weights'"), std::string::npos) << weighted;
  EXPECT_NE(error_of([] { config::load_config("af3-full", {"data.clusters=c.tsv"}); }).find("'data.clusters'"),
            std::string::npos);
  EXPECT_NO_THROW(config::load_config("af3-full", {"data.sampling=entry", "data.clusters=c.tsv"}));
  EXPECT_NE(error_of([] { config::load_config("cpu-tiny", {"data.chain_clusters=c.tsv"}); }).find("'data.chain_clusters'"),
            std::string::npos);
  EXPECT_NE(error_of([] { config::load_config("cpu-tiny", {"data.sampling=chains"}); }).find("'data.sampling' must be"),
            std::string::npos);
  EXPECT_EQ(config::load_config("af3-full", {"data.chain_clusters=c.tsv"}).data.chain_clusters, "c.tsv");
}

}  // namespace
}  // namespace megafold::data
