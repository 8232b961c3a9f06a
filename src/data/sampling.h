#pragma once
// AlphaFold 3's weighted PDB sampling (AF3 SI Sec. 2.5.1): the training units of an entry are its
// chains and its interfaces (pairs of chains with resolved heavy atoms closer than 5 A); a sample
// draws one unit of the whole training set with weight (AF3 SI eq. 1)
//
//   w = beta_r / N_cluster * (alpha_prot * n_prot + alpha_nuc * n_nuc + alpha_ligand * n_ligand)
//
// with r = chain or interface, n_* the unit's chains of each type (one or two; DNA and RNA are
// nucleic acids; ions count as ligands, as in AF3) and N_cluster the number of training units in
// the unit's cluster. A chain's cluster comes from a user file (read_chain_clusters) or the
// default (default_chain_cluster); an interface's cluster is the unordered pair of its chains'
// clusters. The drawn unit then focuses that sample's spatial crops (AF3 SI Sec. 2.7.2: the
// reference atom comes from the chosen chain or interface; CropFocus in crop.h).
//
// Units of a feature cache come from its units.tsv (written by `megafold cache`, layout below),
// so that training at PDB scale starts without decoding every entry; an older cache without it,
// and structure files, are read once to find them.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/structure.h"

namespace megafold::data {

// AF3 SI Sec. 2.5.1, eq. 1.
inline constexpr double kBetaChain = 0.5, kBetaInterface = 1.0;
inline constexpr double kAlphaProtein = 3.0, kAlphaNucleic = 3.0, kAlphaLigand = 1.0;
// Two chains form an interface when some pair of their resolved heavy atoms is closer than this
// (Angstrom; AF3 SI Sec. 2.5.1).
inline constexpr double kInterfaceDistance = 5.0;

// Interfaces of an entry: the pairs (a, b), a < b asym ids, sorted, whose resolved heavy atoms
// (Entry::coords where atom_mask is set) come closer than `cutoff` Angstrom somewhere. Atoms are
// binned into cells of the cutoff's size and only neighbouring cells are compared, and chains
// whose bounding boxes (grown by the cutoff) meet no other chain's are passed over, so a large
// assembly costs O(atoms x the atoms within reach of each), not O(atoms^2).
std::vector<std::pair<int32_t, int32_t>> chain_interfaces(const Entry& e, double cutoff = kInterfaceDistance);

// The default cluster of chain `asym`: a 64-bit FNV-1a hash of its molecule type and
// Entry::sequence (one letter per residue of a polymer, a modified residue by its standard
// parent as AF3 maps them; CCD codes of a ligand chain). AF3 clusters proteins at 40% sequence
// identity, nucleic acids and peptides at 100% and ligands by CCD identity (SI Sec. 2.5.1);
// exact identity is the part of that which needs no external clustering tool:
// copies of a chain across entries and within an assembly share a cluster, so a protein
// deposited many times is not drawn many times more often, and ligands are clustered as AF3
// does. For 40% protein clusters, pass a file (e.g. from MMseqs2) as data.chain_clusters. A
// collision of two different sequences' hashes merges their clusters (odds ~n^2 / 2^65 for n
// distinct sequences: 3e-8 for a million).
uint64_t default_chain_cluster(const Entry& e, int asym);

struct UnitChain {
  std::string author_id;  // Entry::chain_ids (ligand chains share their polymer's)
  MolType type = MolType::kProtein;  // Entry::chain_mol_type
  uint64_t cluster = 0;   // default_chain_cluster
};

// The sampling units of one entry: each chain (chains[asym]) and each interface.
struct EntryUnits {
  std::vector<UnitChain> chains;
  std::vector<std::pair<int32_t, int32_t>> interfaces;  // chain_interfaces
  bool operator==(const EntryUnits& o) const;
};

EntryUnits entry_units(const Entry& e);

// units.tsv of a feature cache, beside index.tsv and written just before it: the header
// (units_tsv_header: '#' comments naming the format and both kinds of row), then per entry in
// index order one row per chain in asym order and one per interface:
//   <entry> <crc32> chain <asym> <author chain id> <protein|rna|dna|ligand> <16 hex digits: default cluster>
//   <entry> <crc32> interface <asym a> <asym b>
// tab-separated; crc32 is the index's CRC-32 of the entry file the row was computed from, so rows
// of an entry rebuilt since are known to be stale.
inline constexpr const char* kUnitsFile = "units.tsv";
std::string units_tsv_header();
std::string units_tsv_rows(const std::string& name, uint32_t crc32, const EntryUnits& units);

struct CachedUnits {
  std::string crc32;  // as the row writes it (decimal)
  EntryUnits units;
};

// Reads a units.tsv: entry name -> its units. Throws megafold::Error naming the file and line of
// a malformed row (field count, unknown kind or type, chains out of order, an interface of a
// chain not listed before it).
std::map<std::string, CachedUnits> read_units_tsv(const std::string& path);

// The units of each training entry (ds.train order): from the cache's units.tsv where it has a
// row for the entry with the index's CRC-32, else by reading the entry (on every core, progress
// on stderr every 5 s unless quiet; what came from where is said in one line). An entry that
// cannot be read is named in a warning and gets no units (it is never drawn).
std::vector<EntryUnits> training_units(const Dataset& ds, bool quiet = false);

// A chain cluster file: TSV lines "entry<TAB>chain<TAB>cluster" ('#' comments, an optional
// "entry\tchain\tcluster" header), chain being an author chain id (Entry::chain_ids). A line
// names the cluster of the entry's polymer chains with that author id; ligand chains, which
// share their polymer's author id, keep their default cluster (by CCD code, as AF3 clusters
// them). Returns (entry, chain) -> cluster. Throws megafold::Error naming the file and line of a
// malformed or repeated line.
std::map<std::pair<std::string, std::string>, std::string> read_chain_clusters(const std::string& path);

struct SamplingSummary {
  int64_t entries = 0;      // training entries with units
  int64_t chains = 0, interfaces = 0;
  int64_t chain_clusters = 0, interface_clusters = 0;
  int64_t from_file = 0;    // chains whose cluster the chain cluster file gave
  std::string describe() const;  // one line for the training log
};

// Switches ds to AF3's weighted sampling: ds.units gets every unit of the training entries
// (per entry: its chains in asym order, then its interfaces) and ds.cumulative_weights eq. 1's
// running sums, so that Dataset::draw picks units. chain_clusters: a read_chain_clusters file,
// or "" for the default clusters. Polymer chains the file does not list keep their default
// cluster (one warning with the count), as do all chains of entries it does not list; lines that
// name a training entry but none of its polymer chains are counted in a warning. Throws
// megafold::Error when no training entry has a unit.
SamplingSummary use_af3_sampling(Dataset& ds, const std::string& chain_clusters = "", bool quiet = false);

}  // namespace megafold::data
