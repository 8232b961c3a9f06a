#include "data/sampling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/parallel.h"
#include "core/seed.h"
#include "data/cache.h"

namespace megafold::data {
namespace fs = std::filesystem;
namespace {

double alpha(MolType t) {  // AF3 SI eq. 1
  switch (t) {
    case MolType::kProtein: return kAlphaProtein;
    case MolType::kRna:
    case MolType::kDna: return kAlphaNucleic;
    case MolType::kLigand: return kAlphaLigand;
  }
  return kAlphaLigand;
}

std::string hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) f.push_back(line.substr(start, tab - start));
  f.push_back(line.substr(start));
  return f;
}

// A non-negative decimal int32, or -1.
int32_t parse_index(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return static_cast<int32_t>(std::stol(s));
}

}  // namespace

std::vector<std::pair<int32_t, int32_t>> chain_interfaces(const Entry& e, double cutoff) {
  MF_CHECK(cutoff > 0, "chain_interfaces: the cutoff must be > 0, got ", cutoff);
  const int n_chains = e.n_chains();
  struct Atom {
    double x[3];
    int32_t chain;
  };
  std::vector<Atom> atoms;
  std::vector<std::array<double, 6>> box(n_chains, {INFINITY, INFINITY, INFINITY, -INFINITY, -INFINITY, -INFINITY});
  for (int i = 0; i < e.n_tokens(); ++i)
    for (int s = 0; s < kMaxAtomsPerToken; ++s) {
      const size_t a = static_cast<size_t>(i) * kMaxAtomsPerToken + s;
      if (!e.atom_mask[a]) continue;
      Atom atom{{e.coords[3 * a], e.coords[3 * a + 1], e.coords[3 * a + 2]}, e.asym_id[i]};
      for (int k = 0; k < 3; ++k) {
        box[atom.chain][k] = std::min(box[atom.chain][k], atom.x[k]);
        box[atom.chain][3 + k] = std::max(box[atom.chain][3 + k], atom.x[k]);
      }
      atoms.push_back(atom);
    }
  // Candidate pairs: bounding boxes within the cutoff of each other in every axis. `open` holds
  // the candidates not yet found, `open_above[a]` how many of them pair a with a later chain;
  // only atoms of chains in some candidate pair go into the grid.
  auto pair_key = [](int64_t a, int64_t b) { return static_cast<uint64_t>(a) << 32 | static_cast<uint64_t>(b); };
  std::unordered_set<uint64_t> open;
  std::vector<int64_t> open_above(n_chains, 0);
  std::vector<char> candidate(n_chains, 0);
  for (int a = 0; a < n_chains; ++a)
    for (int b = a + 1; b < n_chains; ++b) {
      bool meet = true;
      for (int k = 0; k < 3 && meet; ++k)
        meet = box[a][k] - cutoff < box[b][3 + k] && box[b][k] - cutoff < box[a][3 + k];  // empty boxes never meet
      if (!meet) continue;
      open.insert(pair_key(a, b));
      ++open_above[a];
      candidate[a] = candidate[b] = 1;
    }
  // Cells of the cutoff's size: atoms closer than the cutoff lie in the same or adjacent cells.
  // Coordinates are within kMaxCoordinate of the origin (load_entry), so at a 5 A cutoff cell
  // indices fit 21 bits each; were they to overflow, unrelated cells would share a key, which
  // costs comparisons, never a missed pair (every neighbour is looked up by its own key).
  auto cell_of = [&](const double* x, int k) { return static_cast<int64_t>(std::floor(x[k] / cutoff)); };
  auto cell_key = [](int64_t i, int64_t j, int64_t k) {
    constexpr int64_t kOffset = int64_t{1} << 20;
    return static_cast<uint64_t>(i + kOffset) << 42 ^ static_cast<uint64_t>(j + kOffset) << 21 ^
           static_cast<uint64_t>(k + kOffset);
  };
  std::vector<std::pair<uint64_t, int32_t>> by_cell;  // (cell, atom), sorted by cell
  for (size_t a = 0; a < atoms.size(); ++a)
    if (candidate[atoms[a].chain])
      by_cell.emplace_back(cell_key(cell_of(atoms[a].x, 0), cell_of(atoms[a].x, 1), cell_of(atoms[a].x, 2)),
                           static_cast<int32_t>(a));
  std::sort(by_cell.begin(), by_cell.end());
  std::unordered_map<uint64_t, std::pair<size_t, size_t>> cells;  // cell -> [begin, end) in by_cell
  for (size_t i = 0; i < by_cell.size();) {
    size_t j = i;
    while (j < by_cell.size() && by_cell[j].first == by_cell[i].first) ++j;
    cells.emplace(by_cell[i].first, std::make_pair(i, j));
    i = j;
  }
  const double cutoff2 = cutoff * cutoff;
  std::vector<std::pair<int32_t, int32_t>> found;
  for (const Atom& p : atoms) {
    const int32_t a = p.chain;
    if (open_above[a] == 0) continue;  // every partner of a later chain found, or none possible
    const int64_t ci = cell_of(p.x, 0), cj = cell_of(p.x, 1), ck = cell_of(p.x, 2);
    for (int64_t di = -1; di <= 1; ++di)
      for (int64_t dj = -1; dj <= 1; ++dj)
        for (int64_t dk = -1; dk <= 1; ++dk) {
          const auto it = cells.find(cell_key(ci + di, cj + dj, ck + dk));
          if (it == cells.end()) continue;
          for (size_t q = it->second.first; q < it->second.second && open_above[a] > 0; ++q) {
            const Atom& o = atoms[by_cell[q].second];
            if (o.chain <= a) continue;
            double d2 = 0;
            for (int k = 0; k < 3; ++k) d2 += (p.x[k] - o.x[k]) * (p.x[k] - o.x[k]);
            if (d2 < cutoff2 && open.erase(pair_key(a, o.chain)) > 0) {
              --open_above[a];
              found.emplace_back(a, o.chain);
            }
          }
        }
  }
  std::sort(found.begin(), found.end());
  return found;
}

uint64_t default_chain_cluster(const Entry& e, int asym) {
  return fnv1a64(std::string(mol_type_name(e.chain_mol_type(asym))) + ":" + e.sequence(asym));
}

bool EntryUnits::operator==(const EntryUnits& o) const {
  if (chains.size() != o.chains.size() || interfaces != o.interfaces) return false;
  for (size_t c = 0; c < chains.size(); ++c)
    if (chains[c].author_id != o.chains[c].author_id || chains[c].type != o.chains[c].type ||
        chains[c].cluster != o.chains[c].cluster)
      return false;
  return true;
}

EntryUnits entry_units(const Entry& e) {
  EntryUnits u;
  for (int c = 0; c < e.n_chains(); ++c) u.chains.push_back({e.chain_ids[c], e.chain_mol_type(c), default_chain_cluster(e, c)});
  u.interfaces = chain_interfaces(e);
  return u;
}

std::string units_tsv_header() {
  return "# megafold cache units v1: AF3 SI 2.5.1 sampling units, per entry its chains then its interfaces "
         "(src/data/sampling.h)\n"
         "# entry\tcrc32\tchain\tasym\tauthor_chain_id\ttype\tdefault_cluster\n"
         "# entry\tcrc32\tinterface\tasym_a\tasym_b\n";
}

std::string units_tsv_rows(const std::string& name, uint32_t crc32, const EntryUnits& u) {
  std::ostringstream os;
  for (size_t c = 0; c < u.chains.size(); ++c)
    os << name << "\t" << crc32 << "\tchain\t" << c << "\t" << u.chains[c].author_id << "\t"
       << mol_type_name(u.chains[c].type) << "\t" << hex64(u.chains[c].cluster) << "\n";
  for (const auto& [a, b] : u.interfaces) os << name << "\t" << crc32 << "\tinterface\t" << a << "\t" << b << "\n";
  return os.str();
}

std::map<std::string, CachedUnits> read_units_tsv(const std::string& path) {
  std::ifstream in(path);
  MF_CHECK(in.good(), path, ": cannot read the units file");
  std::map<std::string, CachedUnits> out;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = split_tabs(line);
    auto bad = [&](const std::string& why) { return Error(path + ":" + std::to_string(line_no) + ": " + why); };
    if (f.size() < 3 || f[0].empty()) throw bad("expected 'entry<TAB>crc32<TAB>chain|interface...', got '" + line + "'");
    auto [it, added] = out.try_emplace(f[0]);
    CachedUnits& c = it->second;
    if (added) c.crc32 = f[1];
    if (c.crc32 != f[1]) throw bad("entry '" + f[0] + "' has rows with CRC-32 " + c.crc32 + " and " + f[1]);
    if (f[2] == "chain") {
      if (f.size() != 7) throw bad("a chain row has 7 fields, got " + std::to_string(f.size()));
      if (parse_index(f[3]) != static_cast<int32_t>(c.units.chains.size()))
        throw bad("chain " + f[3] + " of entry '" + f[0] + "', expected chain " + std::to_string(c.units.chains.size()) +
                  " (chain rows come in asym order)");
      UnitChain chain;
      chain.author_id = f[4];
      bool known = false;
      for (int t = 0; t < kNumMolTypes && !known; ++t)
        if (f[5] == mol_type_name(static_cast<MolType>(t))) chain.type = static_cast<MolType>(t), known = true;
      if (!known) throw bad("unknown molecule type '" + f[5] + "' (protein, rna, dna or ligand)");
      if (f[6].size() != 16 || f[6].find_first_not_of("0123456789abcdef") != std::string::npos)
        throw bad("the cluster is 16 hex digits, got '" + f[6] + "'");
      chain.cluster = std::stoull(f[6], nullptr, 16);
      c.units.chains.push_back(std::move(chain));
    } else if (f[2] == "interface") {
      if (f.size() != 5) throw bad("an interface row has 5 fields, got " + std::to_string(f.size()));
      const int32_t a = parse_index(f[3]), b = parse_index(f[4]);
      if (a < 0 || b <= a || b >= static_cast<int32_t>(c.units.chains.size()))
        throw bad("interface " + f[3] + "-" + f[4] + " of entry '" + f[0] + "' is not a pair a < b of its " +
                  std::to_string(c.units.chains.size()) + " chains listed before it");
      c.units.interfaces.emplace_back(a, b);
    } else {
      throw bad("unknown unit '" + f[2] + "' (chain or interface)");
    }
  }
  return out;
}

std::vector<EntryUnits> training_units(const Dataset& ds, bool quiet) {
  std::vector<std::optional<EntryUnits>> units(ds.train.size());
  const fs::path file = fs::path(ds.cache_dir) / kUnitsFile;
  if (!ds.cache_dir.empty() && fs::exists(file)) {
    std::map<std::string, std::string> crc;  // what the index says of each entry file
    for (const CacheIndexRow& row : read_cache_index(ds.cache_dir)) crc[row.name] = row.crc32;
    std::map<std::string, CachedUnits> cached = read_units_tsv(file.string());
    for (size_t i = 0; i < ds.train.size(); ++i) {
      const auto it = cached.find(ds.train[i].name());
      const auto index = crc.find(ds.train[i].name());
      if (it != cached.end() && index != crc.end() && it->second.crc32 == index->second) units[i] = std::move(it->second.units);
    }
  }
  std::vector<size_t> missing;
  for (size_t i = 0; i < units.size(); ++i)
    if (!units[i]) missing.push_back(i);
  if (!missing.empty() && !quiet && !ds.cache_dir.empty())
    std::cerr << "note: " << missing.size() << " of " << ds.train.size() << " training entries of cache "
              << ds.cache_dir << " have no current rows in " << file.string()
              << (fs::exists(file) ? "" : " (a cache built before units.tsv; rerun megafold cache to write it)")
              << ": reading them once to find their chains and interfaces" << std::endl;
  // The rest from the entries themselves, on every core; each result in its own slot, so the
  // order (hence the sample stream) does not depend on the thread count.
  std::vector<std::string> errors(ds.train.size());
  parallel_for(
      missing.size(),
      [&](size_t k) {
        const size_t i = missing[k];
        try {
          units[i] = entry_units(*ds.train[i].get());
        } catch (const std::exception& ex) {
          errors[i] = ex.what();
        }
      },
      [&](size_t done) {
        if (!quiet) std::cerr << "finding sampling units: " << done << " / " << missing.size() << " entries" << std::endl;
      });
  std::vector<EntryUnits> out(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i]) out[i] = std::move(*units[i]);
    else if (!quiet)
      std::cerr << "warning: training entry " << ds.train[i].name() << " is never drawn: cannot read it to find its "
                << "chains and interfaces: " << errors[i] << std::endl;
  }
  return out;
}

std::map<std::pair<std::string, std::string>, std::string> read_chain_clusters(const std::string& path) {
  std::ifstream in(path);
  MF_CHECK(in.good(), path, ": cannot read the chain cluster file");
  std::map<std::pair<std::string, std::string>, std::string> out;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || (line_no == 1 && line == "entry\tchain\tcluster")) continue;
    const std::vector<std::string> f = split_tabs(line);
    MF_CHECK(f.size() == 3 && !f[0].empty() && !f[1].empty() && !f[2].empty(), path, ":", line_no,
             ": expected 'entry<TAB>chain<TAB>cluster' (chain: the author chain id), got '", line, "'");
    MF_CHECK(out.emplace(std::make_pair(f[0], f[1]), f[2]).second, path, ":", line_no, ": chain '", f[1],
             "' of entry '", f[0], "' is listed twice");
  }
  return out;
}

std::string SamplingSummary::describe() const {
  std::ostringstream os;
  os << "sampling: AF3 weighted chains and interfaces (SI 2.5.1 eq. 1) of " << entries << " training entries: " << chains
     << " chains in " << chain_clusters << " clusters, " << interfaces << " interfaces in " << interface_clusters
     << " clusters";
  if (from_file > 0) os << " (" << from_file << " chains clustered by data.chain_clusters)";
  return os.str();
}

SamplingSummary use_af3_sampling(Dataset& ds, const std::string& chain_clusters, bool quiet) {
  const std::vector<EntryUnits> units = training_units(ds, quiet);
  const auto user = chain_clusters.empty() ? std::map<std::pair<std::string, std::string>, std::string>{}
                                           : read_chain_clusters(chain_clusters);
  SamplingSummary s;
  // Each chain's cluster as a number: user clusters and default keys in separate name spaces,
  // so a user's cluster name never merges with a default cluster by accident.
  std::unordered_map<std::string, int32_t> cluster_ids;
  std::vector<std::vector<int32_t>> cluster(units.size());
  std::set<std::pair<std::string, std::string>> used;
  int64_t unlisted = 0;
  for (size_t i = 0; i < units.size(); ++i)
    for (const UnitChain& c : units[i].chains) {
      std::string key;
      if (!user.empty() && c.type != MolType::kLigand) {
        const auto it = user.find({ds.train[i].name(), c.author_id});
        if (it != user.end()) {
          key = "file\t" + it->second;
          used.insert(it->first);
          ++s.from_file;
        } else {
          ++unlisted;
        }
      }
      if (key.empty()) key = "default\t" + hex64(c.cluster);
      cluster[i].push_back(cluster_ids.try_emplace(key, static_cast<int32_t>(cluster_ids.size())).first->second);
    }
  // N_cluster: training units per cluster, chains and interfaces counted apart.
  auto interface_cluster = [&](size_t i, const std::pair<int32_t, int32_t>& f) {
    const int32_t x = cluster[i][f.first], y = cluster[i][f.second];
    return std::make_pair(std::min(x, y), std::max(x, y));
  };
  std::vector<int64_t> chains_in(cluster_ids.size(), 0);
  std::map<std::pair<int32_t, int32_t>, int64_t> interfaces_in;
  for (size_t i = 0; i < units.size(); ++i) {
    for (const int32_t c : cluster[i]) ++chains_in[c];
    for (const auto& f : units[i].interfaces) ++interfaces_in[interface_cluster(i, f)];
  }
  // Eq. 1 per unit, in entry order (chains, then interfaces), as running sums.
  ds.units.clear();
  ds.cumulative_weights.clear();
  double total = 0;
  auto add = [&](size_t i, CropFocus focus, double w) {
    total += w;
    ds.units.push_back({static_cast<uint32_t>(i), focus});
    ds.cumulative_weights.push_back(total);
  };
  for (size_t i = 0; i < units.size(); ++i) {
    const EntryUnits& u = units[i];
    for (size_t c = 0; c < u.chains.size(); ++c)
      add(i, {static_cast<int32_t>(c), -1},
          kBetaChain / static_cast<double>(chains_in[cluster[i][c]]) * alpha(u.chains[c].type));
    for (const auto& f : u.interfaces)
      add(i, {f.first, f.second},
          kBetaInterface / static_cast<double>(interfaces_in.at(interface_cluster(i, f))) *
              (alpha(u.chains[f.first].type) + alpha(u.chains[f.second].type)));
    s.entries += !u.chains.empty();
    s.chains += static_cast<int64_t>(u.chains.size());
    s.interfaces += static_cast<int64_t>(u.interfaces.size());
  }
  MF_CHECK(!ds.units.empty(), "AF3 sampling (data.sampling af3): no training entry could be read to find its chains");
  s.chain_clusters = static_cast<int64_t>(cluster_ids.size());
  s.interface_clusters = static_cast<int64_t>(interfaces_in.size());
  if (!quiet && !user.empty()) {
    if (unlisted > 0)
      std::cerr << "warning: " << unlisted << " polymer chains of training entries are not in " << chain_clusters
                << "; each keeps its default cluster (molecule type and exact sequence)" << std::endl;
    std::set<std::string> training;
    for (const EntryRef& e : ds.train) training.insert(e.name());
    int64_t unmatched = 0;
    for (const auto& [key, name] : user) unmatched += training.count(key.first) && !used.count(key);
    if (unmatched > 0)
      std::cerr << "warning: " << unmatched << " lines of " << chain_clusters
                << " name a training entry but none of its polymer chains (author chain ids); ignored" << std::endl;
  }
  return s;
}

}  // namespace megafold::data
