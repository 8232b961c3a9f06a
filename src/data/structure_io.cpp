// The only translation unit that includes gemmi (it is header-only and slow to compile).
// Number formatting for the mmCIF writer through std::snprintf: Debian's gemmi-dev expects
// a system stb_sprintf.h otherwise, one more package for a path that is not hot.
#define USE_STD_SNPRINTF
#include <gemmi/gz.hpp>
#include <gemmi/mmread.hpp>
#include <gemmi/polyheur.hpp>
#include <gemmi/to_cif.hpp>
// gemmi 0.5 keeps the mmCIF writer's definitions behind this macro: compiled here, once.
#define GEMMI_WRITE_IMPLEMENTATION
#include <gemmi/to_mmcif.hpp>
#undef GEMMI_WRITE_IMPLEMENTATION

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/check.h"
#include "core/files.h"
#include "data/structure.h"

namespace megafold::data {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

[[noreturn]] void reject(const std::string& path, const std::string& why) {
  throw Error(path + ": " + why);
}

bool is_peptide_chain(const gemmi::ConstResidueSpan& polymer) {
  const gemmi::PolymerType t = gemmi::check_polymer_type(polymer);
  return t == gemmi::PolymerType::PeptideL || t == gemmi::PolymerType::PeptideD;
}

bool usable_position(const gemmi::Position& p) {
  for (const double v : {p.x, p.y, p.z})
    if (!std::isfinite(v) || std::fabs(v) > kMaxCoordinate) return false;
  return true;
}

std::string format_position(const gemmi::Position& p) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "(%g, %g, %g)", p.x, p.y, p.z);
  return buf;
}

// Appends one token for residue `res` of amino-acid type t. Returns false when no heavy
// atom of the residue fits the dense layout (the residue is then not a token). Atoms with
// unusable coordinates are skipped and counted in `bad_atoms`, the first few named.
bool append_token(Entry& e, const gemmi::Chain& chain, const gemmi::Residue& res, int t, int asym, int32_t index,
                  int& bad_atoms) {
  std::array<float, kMaxAtomsPerToken * 3> xyz{};
  std::array<uint8_t, kMaxAtomsPerToken> mask{};
  std::array<float, kMaxAtomsPerToken> best_occ{};
  for (const gemmi::Atom& a : res.atoms) {
    if (a.is_hydrogen()) {
      ++e.dropped_hydrogens;
      continue;
    }
    const int slot = atom_slot(t, a.name);
    if (slot < 0) continue;  // OXT and atoms outside the layout
    if (!usable_position(a.pos)) {
      if (++bad_atoms <= kMaxCoordinateWarnings)
        e.warnings.push_back(e.path + ": chain " + chain.name + " residue " + res.name + " " + res.seqid.str() +
                             " atom " + a.name + ": coordinates " + format_position(a.pos) +
                             " are not finite or beyond " + std::to_string(static_cast<int>(kMaxCoordinate)) +
                             " A; atom skipped");
      continue;
    }
    // Altlocs: keep the highest occupancy, the first conformer on ties.
    if (mask[slot] && a.occ <= best_occ[slot]) continue;
    mask[slot] = 1;
    best_occ[slot] = a.occ;
    xyz[slot * 3 + 0] = static_cast<float>(a.pos.x);
    xyz[slot * 3 + 1] = static_cast<float>(a.pos.y);
    xyz[slot * 3 + 2] = static_cast<float>(a.pos.z);
  }
  if (std::none_of(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; })) return false;
  e.restype.push_back(static_cast<int8_t>(t));
  e.residue_index.push_back(index);
  e.author_index.push_back(res.seqid.num.value);
  e.insertion_codes.push_back(res.seqid.icode == '\0' ? ' ' : res.seqid.icode);
  e.asym_id.push_back(asym);
  e.coords.insert(e.coords.end(), xyz.begin(), xyz.end());
  e.atom_mask.insert(e.atom_mask.end(), mask.begin(), mask.end());
  return true;
}

}  // namespace

std::string entry_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

bool is_structure_file(const std::string& path) {
  std::string p = path;
  std::transform(p.begin(), p.end(), p.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ends_with(p, ".gz")) p.resize(p.size() - 3);
  return ends_with(p, ".cif") || ends_with(p, ".mmcif") || ends_with(p, ".pdb") || ends_with(p, ".ent");
}

void assign_entities(Entry& e) {
  // Rule 8: entities by identical sequence, sym_id by copy number within the entity.
  std::map<std::string, std::pair<int, int>> entity_of;  // sequence -> (entity, copies)
  std::vector<int> chain_entity(e.n_chains()), chain_sym(e.n_chains());
  for (int c = 0; c < e.n_chains(); ++c) {
    auto [it, inserted] = entity_of.try_emplace(e.sequence(c), static_cast<int>(entity_of.size()), 0);
    chain_entity[c] = it->second.first;
    chain_sym[c] = it->second.second++;
  }
  e.entity_id.clear();
  e.sym_id.clear();
  for (int i = 0; i < e.n_tokens(); ++i) {
    e.entity_id.push_back(chain_entity[e.asym_id[i]]);
    e.sym_id.push_back(chain_sym[e.asym_id[i]]);
  }
}

std::string Entry::sequence(int asym) const {
  std::string s;
  for (int i = 0; i < n_tokens(); ++i)
    if (asym_id[i] == asym) s.push_back(amino_acid_letter(restype[i]));
  return s;
}

Entry load_entry(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) reject(path, "not a readable file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) reject(path, "cannot read: " + ec.message());
  if (size == 0) reject(path, "empty file");
  gemmi::Structure st;
  try {
    st = gemmi::read_structure(gemmi::MaybeGzipped(path));
    gemmi::setup_entities(st);
  } catch (const std::out_of_range&) {  // gemmi indexing past the end of an empty or cut payload
    reject(path, "cannot parse structure: no structure data (an empty or cut file)");
  } catch (const std::exception& ex) {
    const std::string what = ex.what();
    if (ends_with(path, ".gz") && (what.find("uncompressed size") != std::string::npos ||
                                   what.find("zlib") != std::string::npos || what.find("gzip") != std::string::npos))
      reject(path, "truncated or corrupt gzip file (" + what.substr(0, what.find('\n')) + ")");
    reject(path, "cannot parse structure: " + what.substr(0, what.find('\n')));
  }
  size_t atoms = 0;
  for (const gemmi::Model& m : st.models)
    for (const gemmi::Chain& c : m.chains)
      for (const gemmi::Residue& r : c.residues) atoms += r.atoms.size();
  if (atoms == 0)
    reject(path, "no atoms: no ATOM/HETATM records or _atom_site loop (is it a PDB/mmCIF structure file?)");

  Entry e;
  e.path = path;
  e.name = entry_name(path);
  const gemmi::Model& model = st.models.front();  // rule 1: first model only
  int bad_atoms = 0;
  for (const gemmi::Chain& chain : model.chains) {
    const gemmi::ConstResidueSpan polymer = chain.get_polymer();
    const int n_before = e.n_tokens();
    if (polymer.empty() || !is_peptide_chain(polymer)) {
      e.dropped_residues += static_cast<int>(chain.residues.size());
      continue;
    }
    const int asym = e.n_chains();
    int32_t last_index = INT32_MIN;
    const gemmi::Residue* prev = nullptr;
    for (const gemmi::Residue& res : polymer) {
      if (prev && prev->seqid == res.seqid) continue;  // microheterogeneity: keep the first
      prev = &res;
      int t = amino_acid_index(res.name);
      if (t < 0) t = kUnknownAminoAcid;  // other peptide-linked residues: rule 3
      int32_t index = res.label_seq ? static_cast<int32_t>(*res.label_seq) : res.seqid.num.value;
      if (index <= last_index) index = last_index + 1;  // insertion codes: rule 7
      if (append_token(e, chain, res, t, asym, index, bad_atoms)) last_index = index;
    }
    e.dropped_residues += static_cast<int>(chain.residues.size() - polymer.size());
    if (e.n_tokens() > n_before) e.chain_ids.push_back(chain.name);
  }
  if (bad_atoms > kMaxCoordinateWarnings)
    e.warnings.push_back(path + ": " + std::to_string(bad_atoms - kMaxCoordinateWarnings) +
                         " more atoms with unusable coordinates skipped");
  if (e.n_tokens() == 0 && bad_atoms > 0)
    reject(path, "no usable coordinates: " + std::to_string(bad_atoms) +
                     " atoms have non-finite or absurd coordinates (" + e.warnings.front().substr(path.size() + 2) + ")");
  if (e.n_tokens() == 0)
    reject(path, "no protein chain with resolved residues (" +
                     std::to_string(e.dropped_residues) + " non-protein residues dropped)");

  assign_entities(e);
  return e;
}

void write_mmcif(const Entry& e, const std::string& path, const std::vector<float>& coords,
                 const std::vector<float>& b_factors) {
  const std::vector<float>& xyz = coords.empty() ? e.coords : coords;
  if (xyz.size() != e.coords.size())
    throw Error(path + ": " + std::to_string(xyz.size()) + " coordinates given, the entry has " +
                std::to_string(e.coords.size()) + " (n_token * " + std::to_string(kMaxAtomsPerToken) + " * 3)");
  if (!b_factors.empty() && b_factors.size() != e.atom_mask.size())
    throw Error(path + ": " + std::to_string(b_factors.size()) + " B-factors given, the entry has " +
                std::to_string(e.atom_mask.size()) + " atom slots");
  gemmi::Structure st;
  st.name = e.name;
  st.models.emplace_back("1");
  gemmi::Model& model = st.models.back();
  int serial = 0;
  for (int i = 0; i < e.n_tokens(); ++i) {
    if (i == 0 || e.asym_id[i] != e.asym_id[i - 1]) model.chains.emplace_back(e.chain_ids.at(e.asym_id[i]));
    gemmi::Residue res;
    res.name = std::string(amino_acid_name(e.restype[i]));
    const bool author = e.author_index.size() == e.restype.size();
    res.seqid = author ? gemmi::SeqId(e.author_index[i], e.insertion_codes.at(i)) : gemmi::SeqId(e.residue_index[i], ' ');
    res.label_seq = e.residue_index[i];
    res.entity_type = gemmi::EntityType::Polymer;
    res.subchain = e.chain_ids.at(e.asym_id[i]);  // label_asym_id = the author chain id
    res.entity_id = std::to_string(e.entity_id.at(i) + 1);
    res.het_flag = 'A';
    const auto& names = atom_names(e.restype[i]);
    for (int a = 0; a < kMaxAtomsPerToken; ++a) {
      const size_t k = static_cast<size_t>(i) * kMaxAtomsPerToken + a;
      if (!e.atom_mask[k]) continue;
      gemmi::Atom atom;
      atom.name = std::string(names[a]);
      atom.element = gemmi::Element(atom.name.substr(0, 1));  // protein heavy atoms: N, C, O, S
      atom.pos = gemmi::Position(xyz[3 * k], xyz[3 * k + 1], xyz[3 * k + 2]);
      atom.occ = 1.f;
      atom.b_iso = b_factors.empty() ? 0.f : b_factors[k];
      atom.serial = ++serial;
      res.atoms.push_back(std::move(atom));
    }
    model.chains.back().residues.push_back(std::move(res));
  }
  // Entities numbered 1, 2, ... from the entry's entity ids (chains with one sequence share one).
  for (int i = 0; i < e.n_tokens(); ++i) {
    const std::string name = std::to_string(e.entity_id[i] + 1);
    auto it = std::find_if(st.entities.begin(), st.entities.end(), [&](const gemmi::Entity& x) { return x.name == name; });
    if (it == st.entities.end()) {
      st.entities.emplace_back(name);
      it = std::prev(st.entities.end());
      it->entity_type = gemmi::EntityType::Polymer;
      it->polymer_type = gemmi::PolymerType::PeptideL;
    }
    const std::string& chain = e.chain_ids.at(e.asym_id[i]);
    if (std::find(it->subchains.begin(), it->subchains.end(), chain) == it->subchains.end()) {
      it->subchains.push_back(chain);
    } else if (it->subchains.front() != chain) {
      continue;  // the sequence is recorded from the entity's first chain
    }
    it->full_sequence.emplace_back(amino_acid_name(e.restype[i]));
  }
  // Models, not crystals: no unit cell or symmetry; ATOM records marked as such.
  gemmi::MmcifOutputGroups groups(true);
  groups.group_pdb = true;
  groups.cell = false;
  groups.symmetry = false;
  std::ostringstream text;
  gemmi::cif::write_cif_to_stream(text, gemmi::make_mmcif_document(st, groups));
  write_file_atomically(path, text.str());
}

}  // namespace megafold::data
