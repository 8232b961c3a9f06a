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
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/check.h"
#include "core/files.h"
#include "data/ccd.h"
#include "data/elements.h"
#include "data/reference_atoms.h"
#include "data/structure.h"

namespace megafold::data {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

[[noreturn]] void reject(const std::string& path, const std::string& why) {
  throw Error(path + ": " + why);
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

// AF3 SI Table 9: crystallisation aids, removed from the training structures.
bool is_crystallisation_aid(const std::string& code) {
  static const std::set<std::string> kAids = {"SO4", "GOL", "EDO", "PO4", "ACT", "PEG", "DMS", "TRS",
                                              "PGE", "PG4", "FMT", "EPE", "MPD", "MES", "CD",  "IOD"};
  return kAids.count(code) > 0;
}

bool is_water(const gemmi::Residue& res) {
  return res.entity_type == gemmi::EntityType::Water || res.name == "HOH" || res.name == "DOD" || res.name == "WAT";
}

// Molecule type of a subchain (rule 2); hybrids are resolved per residue by the caller.
MolType subchain_type(const gemmi::Structure& st, const gemmi::ConstResidueSpan& sub, bool& hybrid) {
  hybrid = false;
  if (sub.empty() || sub[0].entity_type != gemmi::EntityType::Polymer) return MolType::kLigand;
  const gemmi::Entity* ent = st.get_entity_of(sub);
  gemmi::PolymerType t = ent ? ent->polymer_type : gemmi::PolymerType::Unknown;
  if (t == gemmi::PolymerType::Unknown) t = gemmi::check_polymer_type(sub);
  switch (t) {
    case gemmi::PolymerType::PeptideL:
    case gemmi::PolymerType::PeptideD: return MolType::kProtein;
    case gemmi::PolymerType::Rna: return MolType::kRna;
    case gemmi::PolymerType::Dna: return MolType::kDna;
    case gemmi::PolymerType::DnaRnaHybrid: hybrid = true; return MolType::kDna;
    default: return MolType::kLigand;
  }
}

// The tokens one residue became: where to find its atoms for bonds.
struct ResidueTokens {
  int first = -1, count = 0;
  bool per_atom = false;
  MolType mol = MolType::kProtein;
  int32_t index = 0;  // residue_index
};

class EntryBuilder {
 public:
  EntryBuilder(Entry& e, const Ccd* ccd) : e_(e), ccd_(ccd) {}

  // One subchain of `chain` (rule 2-5); returns whether it gave tokens.
  bool add_subchain(const gemmi::Structure& st, const gemmi::Chain& chain, const gemmi::ConstResidueSpan& sub);
  // Rule 6, after every subchain.
  void add_bonds(const gemmi::Structure& st, const gemmi::Model& model);
  void finish();
  int bad_atoms() const { return bad_atoms_; }

 private:
  // A standard residue of type t; false if none of its atoms fits the layout.
  bool add_residue(const gemmi::Chain& chain, const gemmi::Residue& res, int t, int asym, int32_t index);
  // A residue as per-atom tokens from its CCD component; false (with a warning) when the
  // component is unknown or no atom is resolved.
  bool add_atoms(const gemmi::Chain& chain, const gemmi::Residue& res, MolType mol, int asym, int32_t index);
  bool usable(const gemmi::Chain& chain, const gemmi::Residue& res, const gemmi::Atom& a);
  void warn(const gemmi::Chain& chain, const gemmi::Residue& res, const std::string& what);
  void push_token(int t, MolType mol, int asym, int32_t index, const gemmi::Residue& res, int32_t component);
  // Token and slot of atom `name` of residue `res`, or {-1, -1}.
  std::pair<int, int> locate(const gemmi::Residue* res, std::string_view name) const;
  void add_bond(std::pair<int, int> a, std::pair<int, int> b);

  Entry& e_;
  const Ccd* ccd_;
  int bad_atoms_ = 0;
  bool warned_no_ccd_ = false;
  std::map<const gemmi::Residue*, ResidueTokens> where_;
  std::vector<const gemmi::Residue*> order_;  // residues in token order
  std::set<Bond> bonds_;
};

void EntryBuilder::warn(const gemmi::Chain& chain, const gemmi::Residue& res, const std::string& what) {
  e_.warnings.push_back(e_.path + ": chain " + chain.name + " residue " + res.name + " " + res.seqid.str() + ": " + what);
}

bool EntryBuilder::usable(const gemmi::Chain& chain, const gemmi::Residue& res, const gemmi::Atom& a) {
  if (usable_position(a.pos)) return true;
  if (++bad_atoms_ <= kMaxCoordinateWarnings)
    e_.warnings.push_back(e_.path + ": chain " + chain.name + " residue " + res.name + " " + res.seqid.str() +
                          " atom " + a.name + ": coordinates " + format_position(a.pos) + " are not finite or beyond " +
                          std::to_string(static_cast<int>(kMaxCoordinate)) + " A; atom skipped");
  return false;
}

void EntryBuilder::push_token(int t, MolType mol, int asym, int32_t index, const gemmi::Residue& res,
                              int32_t component) {
  e_.restype.push_back(static_cast<int8_t>(t));
  e_.mol_type.push_back(static_cast<int8_t>(mol));
  e_.residue_index.push_back(index);
  e_.author_index.push_back(res.seqid.num.value);
  e_.insertion_codes.push_back(res.seqid.icode == '\0' ? ' ' : res.seqid.icode);
  e_.asym_id.push_back(asym);
  e_.component.push_back(component);
  e_.token_atoms.emplace_back();
  e_.coords.resize(e_.coords.size() + kMaxAtomsPerToken * 3, 0.f);
  e_.atom_mask.resize(e_.atom_mask.size() + kMaxAtomsPerToken, 0);
}

bool EntryBuilder::add_residue(const gemmi::Chain& chain, const gemmi::Residue& res, int t, int asym, int32_t index) {
  std::array<float, kMaxAtomsPerToken * 3> xyz{};
  std::array<uint8_t, kMaxAtomsPerToken> mask{};
  std::array<float, kMaxAtomsPerToken> best_occ{};
  for (const gemmi::Atom& a : res.atoms) {
    if (a.is_hydrogen()) {
      ++e_.dropped_hydrogens;
      continue;
    }
    const int slot = atom_slot(t, a.name);
    if (slot < 0) continue;  // OXT, OP3 and atoms outside the layout
    if (!usable(chain, res, a)) continue;
    // Altlocs: keep the highest occupancy, the first conformer on ties.
    if (mask[slot] && a.occ <= best_occ[slot]) continue;
    mask[slot] = 1;
    best_occ[slot] = a.occ;
    xyz[slot * 3 + 0] = static_cast<float>(a.pos.x);
    xyz[slot * 3 + 1] = static_cast<float>(a.pos.y);
    xyz[slot * 3 + 2] = static_cast<float>(a.pos.z);
  }
  if (std::none_of(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; })) return false;
  where_[&res] = {e_.n_tokens(), 1, false, mol_type_of(t), index};
  order_.push_back(&res);
  push_token(t, mol_type_of(t), asym, index, res, -1);
  std::copy(xyz.begin(), xyz.end(), e_.coords.end() - kMaxAtomsPerToken * 3);
  std::copy(mask.begin(), mask.end(), e_.atom_mask.end() - kMaxAtomsPerToken);
  return true;
}

bool EntryBuilder::add_atoms(const gemmi::Chain& chain, const gemmi::Residue& res, MolType mol, int asym,
                             int32_t index) {
  if (!ccd_) {
    if (!warned_no_ccd_)
      e_.warnings.push_back(e_.path + ": no CCD table at '" + default_ccd_path() +
                            "' (run scripts/setup.sh or set MEGAFOLD_CCD); ligands and non-standard residues skipped");
    warned_no_ccd_ = true;
    return false;
  }
  const CcdComponent* comp = ccd_->find(res.name);
  if (!comp || comp->atoms.empty()) {
    warn(chain, res, "component " + res.name + " is not in the CCD; skipped");
    return false;
  }
  // The file's atoms by name: best altloc, usable coordinates.
  std::map<std::string, const gemmi::Atom*> found;
  std::vector<std::string> unknown;
  for (const gemmi::Atom& a : res.atoms) {
    if (a.is_hydrogen()) {
      ++e_.dropped_hydrogens;
      continue;
    }
    if (comp->atom_index(a.name) < 0) {
      if (std::find(unknown.begin(), unknown.end(), a.name) == unknown.end()) unknown.push_back(a.name);
      continue;
    }
    if (!usable(chain, res, a)) continue;
    auto [it, inserted] = found.try_emplace(a.name, &a);
    if (!inserted && a.occ > it->second->occ) it->second = &a;
  }
  if (found.empty()) {
    warn(chain, res, "component " + res.name + " has no resolved atom; skipped");
    return false;
  }
  if (!unknown.empty()) {
    std::string names;
    for (const std::string& n : unknown) names += (names.empty() ? "" : " ") + n;
    warn(chain, res, "atoms not in the CCD's " + res.name + " skipped: " + names);
  }
  // restype: the standard parent within the chain's type, else the type's unknown residue.
  int t = unknown_type(mol);
  if (mol != MolType::kLigand) {
    const int parent = residue_type(mol, comp->parent);
    if (parent >= 0) t = parent;
  }
  auto cit = std::find(e_.components.begin(), e_.components.end(), res.name);
  if (cit == e_.components.end()) cit = e_.components.insert(cit, res.name);
  const auto component = static_cast<int32_t>(cit - e_.components.begin());
  const int first = e_.n_tokens();
  for (const CcdAtom& ca : comp->atoms) {
    const auto hit = found.find(std::string(ca.atom_name()));
    if (ca.leaving() && hit == found.end()) continue;  // leaving atoms only where the file has them
    push_token(t, mol, asym, index, res, component);
    TokenAtom& ta = e_.token_atoms.back();
    std::copy(ca.name, ca.name + 4, ta.name);
    ta.element = ca.element;
    ta.charge = ca.charge;
    std::copy(ca.pos, ca.pos + 3, ta.ref_pos);
    if (hit != found.end()) {
      float* xyz = &e_.coords[e_.coords.size() - kMaxAtomsPerToken * 3];
      xyz[0] = static_cast<float>(hit->second->pos.x);
      xyz[1] = static_cast<float>(hit->second->pos.y);
      xyz[2] = static_cast<float>(hit->second->pos.z);
      e_.atom_mask[e_.atom_mask.size() - kMaxAtomsPerToken] = 1;
    }
  }
  where_[&res] = {first, e_.n_tokens() - first, true, mol, index};
  order_.push_back(&res);
  return true;
}

bool EntryBuilder::add_subchain(const gemmi::Structure& st, const gemmi::Chain& chain,
                                const gemmi::ConstResidueSpan& sub) {
  bool hybrid = false;
  const MolType chain_type = subchain_type(st, sub, hybrid);
  const int asym = e_.n_chains();
  const int n_before = e_.n_tokens();
  int32_t last_index = INT32_MIN;
  const gemmi::Residue* prev = nullptr;
  for (const gemmi::Residue& res : sub) {
    if (prev && prev->seqid == res.seqid) continue;  // microheterogeneity: keep the first
    prev = &res;
    if (is_water(res) || (chain_type == MolType::kLigand && is_crystallisation_aid(res.name))) {
      ++e_.dropped_residues;
      continue;
    }
    int32_t index = res.label_seq ? static_cast<int32_t>(*res.label_seq) : res.seqid.num.value;
    if (index <= last_index) index = last_index + 1;  // insertion codes: rule 5
    MolType mol = chain_type;
    int t = residue_type(mol, res.name);
    if (hybrid && t < 0 && residue_type(MolType::kRna, res.name) >= 0) {
      mol = MolType::kRna;
      t = residue_type(mol, res.name);
    }
    bool added = false;
    if (t >= 0) {
      added = add_residue(chain, res, t, asym, index);
    } else {
      added = add_atoms(chain, res, mol, asym, index);
      if (!added && mol != MolType::kLigand) {
        // A polymer keeps its residue count: the unknown residue of its type, backbone atoms only.
        added = add_residue(chain, res, unknown_type(mol), asym, index);
      }
    }
    if (added) {
      last_index = index;
    } else {
      ++e_.dropped_residues;
    }
  }
  if (e_.n_tokens() == n_before) return false;
  e_.chain_ids.push_back(chain.name);
  return true;
}

std::pair<int, int> EntryBuilder::locate(const gemmi::Residue* res, std::string_view name) const {
  const auto it = where_.find(res);
  if (it == where_.end()) return {-1, -1};
  const ResidueTokens& r = it->second;
  if (!r.per_atom) {
    const int slot = atom_slot(e_.restype[r.first], name);
    return slot < 0 ? std::pair{-1, -1} : std::pair{r.first, slot};
  }
  for (int k = 0; k < r.count; ++k)
    if (e_.token_atoms[r.first + k].atom_name() == name) return {r.first + k, 0};
  return {-1, -1};
}

void EntryBuilder::add_bond(std::pair<int, int> a, std::pair<int, int> b) {
  if (a.first < 0 || b.first < 0 || a.first == b.first) return;
  if (!e_.per_atom(a.first) && !e_.per_atom(b.first)) return;  // standard-standard: not a token bond
  const size_t ka = static_cast<size_t>(a.first) * kMaxAtomsPerToken + a.second;
  const size_t kb = static_cast<size_t>(b.first) * kMaxAtomsPerToken + b.second;
  if (e_.atom_mask[ka] && e_.atom_mask[kb]) {
    double d2 = 0;
    for (int x = 0; x < 3; ++x) {
      const double d = e_.coords[3 * ka + x] - e_.coords[3 * kb + x];
      d2 += d * d;
    }
    if (d2 > kMaxBondLength * kMaxBondLength) return;
  }
  if (a.first > b.first) std::swap(a, b);
  bonds_.insert({a.first, b.first, static_cast<int8_t>(a.second), static_cast<int8_t>(b.second)});
}

void EntryBuilder::add_bonds(const gemmi::Structure& st, const gemmi::Model& model) {
  // Inside each per-atom residue, from the CCD.
  for (const gemmi::Residue* res : order_) {
    const ResidueTokens& r = where_.at(res);
    if (!r.per_atom) continue;
    const CcdComponent* comp = ccd_->find(res->name);
    for (const CcdBond& b : comp->bonds)
      add_bond(locate(res, comp->atoms[b.a].atom_name()), locate(res, comp->atoms[b.b].atom_name()));
  }
  // Polymer links of per-atom residues to their sequence neighbours.
  for (size_t k = 1; k < order_.size(); ++k) {
    const gemmi::Residue *p = order_[k - 1], *q = order_[k];
    const ResidueTokens &rp = where_.at(p), &rq = where_.at(q);
    if (!(rp.per_atom || rq.per_atom) || e_.asym_id[rp.first] != e_.asym_id[rq.first]) continue;
    if (rp.mol == MolType::kLigand || rq.mol == MolType::kLigand || rq.index != rp.index + 1) continue;
    if (rp.mol == MolType::kProtein)
      add_bond(locate(p, "C"), locate(q, "N"));
    else
      add_bond(locate(p, "O3'"), locate(q, "P"));
  }
  // The file's covalent links (struct_conn / LINK).
  for (const gemmi::Connection& c : st.connections) {
    if (c.type != gemmi::Connection::Covale) continue;
    const gemmi::const_CRA a = model.find_cra(c.partner1, true), b = model.find_cra(c.partner2, true);
    if (!a.residue || !b.residue || !a.atom || !b.atom) continue;
    add_bond(locate(a.residue, a.atom->name), locate(b.residue, b.atom->name));
  }
  e_.bonds.assign(bonds_.begin(), bonds_.end());
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
  // Rule 7: entities by molecule type and sequence, sym_id by copy number within the entity.
  std::map<std::string, std::pair<int, int>> entity_of;  // key -> (entity, copies)
  std::vector<int> chain_entity(e.n_chains()), chain_sym(e.n_chains());
  for (int c = 0; c < e.n_chains(); ++c) {
    const std::string key = std::string(mol_type_name(e.chain_mol_type(c))) + ":" + e.sequence(c);
    auto [it, inserted] = entity_of.try_emplace(key, static_cast<int>(entity_of.size()), 0);
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

MolType Entry::chain_mol_type(int asym) const {
  for (int i = 0; i < n_tokens(); ++i)
    if (asym_id[i] == asym) return mol(i);
  return MolType::kProtein;
}

std::string_view Entry::residue_code(int i) const {
  return per_atom(i) ? std::string_view(components[component[i]]) : residue_name(restype[i]);
}

std::string Entry::sequence(int asym) const {
  std::string s;
  const bool ligand = chain_mol_type(asym) == MolType::kLigand;
  for (int i = 0; i < n_tokens(); ++i) {
    if (asym_id[i] != asym) continue;
    const bool same_residue = i > 0 && asym_id[i - 1] == asym && residue_index[i - 1] == residue_index[i];
    if (same_residue) continue;
    if (ligand) {
      if (!s.empty()) s.push_back('.');
      s += residue_code(i);
    } else {
      s.push_back(residue_letter(restype[i]));
    }
  }
  return s;
}

void Entry::fill_residue_defaults() {
  mol_type.resize(restype.size());
  for (size_t i = 0; i < restype.size(); ++i) mol_type[i] = static_cast<int8_t>(mol_type_of(restype[i]));
  component.assign(restype.size(), -1);
  token_atoms.assign(restype.size(), TokenAtom{});
}

std::string chain_label(int k) {
  std::string id;
  for (++k; k > 0; k = (k - 1) / 26) id.insert(id.begin(), static_cast<char>('A' + (k - 1) % 26));
  return id;
}

Entry load_entry(const std::string& path) {
  std::string why;
  const Ccd* ccd = usable_default_ccd(&why);
  Entry e = load_entry(path, ccd);
  if (!why.empty()) e.warnings.insert(e.warnings.begin(), why + "; ligands and non-standard residues skipped");
  return e;
}

Entry load_entry(const std::string& path, const Ccd* ccd) {
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
  // gemmi keeps the date of mmCIF's _pdbx_database_status and of a PDB HEADER under this key.
  if (const std::string date = st.get_info("_pdbx_database_status.recvd_initial_deposition_date"); is_release_date(date))
    e.deposition_date = date;
  const gemmi::Model& model = st.models.front();  // rule 1: first model only
  EntryBuilder builder(e, ccd);
  for (const gemmi::Chain& chain : model.chains)
    for (const gemmi::ConstResidueSpan& sub : chain.subchains()) builder.add_subchain(st, chain, sub);
  builder.add_bonds(st, model);
  const int bad_atoms = builder.bad_atoms();
  if (bad_atoms > kMaxCoordinateWarnings)
    e.warnings.push_back(path + ": " + std::to_string(bad_atoms - kMaxCoordinateWarnings) +
                         " more atoms with unusable coordinates skipped");
  if (e.n_tokens() == 0 && bad_atoms > 0)
    reject(path, "no usable coordinates: " + std::to_string(bad_atoms) +
                     " atoms have non-finite or absurd coordinates (" + e.warnings.front().substr(path.size() + 2) + ")");
  const bool polymer = std::any_of(e.mol_type.begin(), e.mol_type.end(),
                                   [](int8_t m) { return static_cast<MolType>(m) != MolType::kLigand; });
  if (!polymer)
    reject(path, "no polymer chain (protein, DNA or RNA) with resolved residues (" +
                     std::to_string(e.n_tokens()) + " ligand atoms, " + std::to_string(e.dropped_residues) +
                     " residues dropped: waters, crystallisation aids, unknown components)");
  assign_entities(e);
  return e;
}

namespace {


gemmi::PolymerType polymer_type_of(MolType m) {
  switch (m) {
    case MolType::kRna: return gemmi::PolymerType::Rna;
    case MolType::kDna: return gemmi::PolymerType::Dna;
    default: return gemmi::PolymerType::PeptideL;
  }
}

}  // namespace

void write_mmcif(const Entry& e, const std::string& path, const std::vector<float>& coords,
                 const std::vector<float>& b_factors) {
  const std::vector<float>& xyz = coords.empty() ? e.coords : coords;
  if (xyz.size() != e.coords.size())
    throw Error(path + ": " + std::to_string(xyz.size()) + " coordinates given, the entry has " +
                std::to_string(e.coords.size()) + " (n_token * " + std::to_string(kMaxAtomsPerToken) + " * 3)");
  if (!b_factors.empty() && b_factors.size() != e.atom_mask.size())
    throw Error(path + ": " + std::to_string(b_factors.size()) + " B-factors given, the entry has " +
                std::to_string(e.atom_mask.size()) + " atom slots");
  const ReferenceTable& ref = reference_atoms();
  gemmi::Structure st;
  st.name = e.name;
  st.models.emplace_back("1");
  gemmi::Model& model = st.models.back();
  const bool author = e.author_index.size() == e.restype.size();
  int serial = 0;
  auto add_atom = [&](gemmi::Residue& res, size_t k, std::string name, int element) {
    gemmi::Atom atom;
    atom.name = std::move(name);
    atom.element = gemmi::Element(std::string(element_symbol(element)));
    atom.pos = gemmi::Position(xyz[3 * k], xyz[3 * k + 1], xyz[3 * k + 2]);
    atom.occ = 1.f;
    atom.b_iso = b_factors.empty() ? 0.f : b_factors[k];
    atom.serial = ++serial;
    res.atoms.push_back(std::move(atom));
  };
  for (int i = 0; i < e.n_tokens(); ++i) {
    const int asym = e.asym_id[i];
    const bool new_chain = i == 0 || asym != e.asym_id[i - 1];
    if (new_chain && (model.chains.empty() || model.chains.back().name != e.chain_ids.at(asym)))
      model.chains.emplace_back(e.chain_ids.at(asym));
    const bool new_residue = new_chain || !e.per_atom(i) || !e.per_atom(i - 1) ||
                             e.residue_index[i] != e.residue_index[i - 1] || e.component[i] != e.component[i - 1];
    const MolType mol = e.mol(i);
    if (new_residue) {
      gemmi::Residue res;
      res.name = std::string(e.residue_code(i));
      res.seqid = author ? gemmi::SeqId(e.author_index[i], e.insertion_codes.at(i)) : gemmi::SeqId(e.residue_index[i], ' ');
      if (mol != MolType::kLigand) res.label_seq = e.residue_index[i];
      res.entity_type = mol == MolType::kLigand ? gemmi::EntityType::NonPolymer : gemmi::EntityType::Polymer;
      res.subchain = chain_label(asym);
      res.entity_id = std::to_string(e.entity_id.at(i) + 1);
      res.het_flag = e.per_atom(i) ? 'H' : 'A';
      model.chains.back().residues.push_back(std::move(res));
    }
    gemmi::Residue& res = model.chains.back().residues.back();
    const size_t k0 = static_cast<size_t>(i) * kMaxAtomsPerToken;
    if (e.per_atom(i)) {
      if (e.atom_mask[k0]) add_atom(res, k0, std::string(e.token_atoms[i].atom_name()), e.token_atoms[i].element);
      continue;
    }
    const auto& names = atom_names(e.restype[i]);
    for (int a = 0; a < kMaxAtomsPerToken; ++a)
      if (e.atom_mask[k0 + a]) add_atom(res, k0 + a, std::string(names[a]), ref[e.restype[i]][a].element);
  }
  // Entities numbered 1, 2, ... from the entry's entity ids; a polymer's sequence is recorded
  // from its first chain.
  for (int i = 0; i < e.n_tokens(); ++i) {
    const std::string name = std::to_string(e.entity_id[i] + 1);
    auto it = std::find_if(st.entities.begin(), st.entities.end(), [&](const gemmi::Entity& x) { return x.name == name; });
    const MolType mol = e.mol(i);
    if (it == st.entities.end()) {
      st.entities.emplace_back(name);
      it = std::prev(st.entities.end());
      it->entity_type = mol == MolType::kLigand ? gemmi::EntityType::NonPolymer : gemmi::EntityType::Polymer;
      if (mol != MolType::kLigand) it->polymer_type = polymer_type_of(mol);
    }
    const std::string chain = chain_label(e.asym_id[i]);
    if (std::find(it->subchains.begin(), it->subchains.end(), chain) == it->subchains.end()) {
      it->subchains.push_back(chain);
    } else if (it->subchains.front() != chain) {
      continue;
    }
    const bool same_residue = i > 0 && e.asym_id[i - 1] == e.asym_id[i] && e.residue_index[i - 1] == e.residue_index[i];
    if (mol != MolType::kLigand && !same_residue) it->full_sequence.emplace_back(e.residue_code(i));
  }
  // Models, not crystals: no unit cell or symmetry; ATOM/HETATM records marked as such.
  gemmi::MmcifOutputGroups groups(true);
  groups.group_pdb = true;
  groups.cell = false;
  groups.symmetry = false;
  std::ostringstream text;
  gemmi::cif::write_cif_to_stream(text, gemmi::make_mmcif_document(st, groups));
  write_file_atomically(path, text.str());
}

namespace {

// Template residue type (templates.h): the amino acids, MSE as MET, anything else UNK.
int template_type(const std::string& code) {
  const int t = residue_type(MolType::kProtein, code);
  return t >= 0 ? t : kUnknownAminoAcid;
}

// Slot of a template atom name (N, CA, C, CB), -1 for any other atom.
int template_slot(const std::string& name) {
  static const std::array<std::string_view, kTemplateAtoms> kNames = {"N", "CA", "C", "CB"};
  for (int k = 0; k < kTemplateAtoms; ++k)
    if (name == kNames[k]) return k;
  return -1;
}

// One protein subchain of a template: sequence positions from entity_poly_seq (or the highest
// label_seq_id), atoms of the modelled residues.
TemplateStructure::Chain template_chain(const gemmi::Structure& st, const gemmi::Chain& chain,
                                        const gemmi::ConstResidueSpan& sub) {
  TemplateStructure::Chain c;
  c.author_id = chain.name;
  c.label_id = sub.subchain_id();
  const gemmi::Entity* entity = st.get_entity_of(sub);
  size_t n = entity ? entity->full_sequence.size() : 0;
  for (const gemmi::Residue& res : sub)
    if (res.label_seq && *res.label_seq > 0) n = std::max(n, static_cast<size_t>(*res.label_seq));
  c.restype.assign(n, static_cast<int8_t>(kUnknownAminoAcid));
  c.coords.assign(n * kTemplateAtoms * 3, 0.f);
  c.mask.assign(n * kTemplateAtoms, 0);
  if (entity)
    for (size_t k = 0; k < entity->full_sequence.size(); ++k)
      c.restype[k] = static_cast<int8_t>(template_type(gemmi::Entity::first_mon(entity->full_sequence[k])));
  std::vector<bool> seen(n, false);
  const int gly = residue_type(MolType::kProtein, "GLY");
  for (const gemmi::Residue& res : sub) {
    if (!res.label_seq || *res.label_seq <= 0) continue;  // no sequence position to align to
    const size_t k = static_cast<size_t>(*res.label_seq) - 1;
    if (seen[k]) continue;  // microheterogeneity: the first residue, as load_entry keeps
    seen[k] = true;
    const int t = template_type(res.name);  // the modelled residue's type, whose atoms these are
    c.restype[k] = static_cast<int8_t>(t);
    float* xyz = &c.coords[k * kTemplateAtoms * 3];
    uint8_t* mask = &c.mask[k * kTemplateAtoms];
    std::array<float, kTemplateAtoms> best_occ{};
    for (const gemmi::Atom& a : res.atoms) {
      const int slot = template_slot(a.name);
      if (slot < 0 || a.is_hydrogen() || !usable_position(a.pos)) continue;
      if (mask[slot] && a.occ <= best_occ[slot]) continue;  // altlocs: highest occupancy, first on ties
      mask[slot] = 1;
      best_occ[slot] = a.occ;
      xyz[3 * slot + 0] = static_cast<float>(a.pos.x);
      xyz[3 * slot + 1] = static_cast<float>(a.pos.y);
      xyz[3 * slot + 2] = static_cast<float>(a.pos.z);
    }
    if (t == gly) {  // the pseudo-beta atom of glycine is CA
      std::copy_n(xyz + 3, 3, xyz + 9);
      mask[3] = mask[1];
    }
  }
  return c;
}

// The earliest release (first revision) date of an entry; "" if the block records none as
// YYYY-MM-DD. Not the deposition date: a structure deposited before a cutoff may be released
// after it.
std::string release_date(const gemmi::cif::Block& block) {
  std::string date;
  for (const std::string& v : const_cast<gemmi::cif::Block&>(block).find_values("_pdbx_audit_revision_history.revision_date")) {
    if (gemmi::cif::is_null(v)) continue;
    const std::string d = gemmi::cif::as_string(v);
    if (is_release_date(d) && (date.empty() || d < date)) date = d;
  }
  return date;
}

TemplateStructure template_structure(const gemmi::cif::Document& doc, const std::string& origin) {
  if (doc.blocks.empty()) throw Error(origin + ": not a template mmCIF (no data block)");
  gemmi::Structure st;
  try {
    st = gemmi::make_structure_from_block(doc.blocks.front());
    gemmi::setup_entities(st);
  } catch (const std::exception& ex) {
    const std::string what = ex.what();
    throw Error(origin + ": cannot read the template structure: " + what.substr(0, what.find('\n')));
  }
  if (st.models.empty()) throw Error(origin + ": no atoms: the template mmCIF has no _atom_site loop");
  TemplateStructure out;
  out.id = st.name;
  std::transform(out.id.begin(), out.id.end(), out.id.begin(), [](unsigned char c) { return std::tolower(c); });
  out.release_date = release_date(doc.blocks.front());
  for (const gemmi::Chain& chain : st.models.front().chains)
    for (const gemmi::ConstResidueSpan& sub : chain.subchains()) {
      bool hybrid = false;
      if (subchain_type(st, sub, hybrid) == MolType::kProtein) out.chains.push_back(template_chain(st, chain, sub));
    }
  return out;
}

}  // namespace

TemplateStructure read_template_structure(const std::string& path) {
  gemmi::cif::Document doc;
  try {
    doc = gemmi::cif::read(gemmi::MaybeGzipped(path));
  } catch (const std::exception& ex) {
    const std::string what = ex.what();
    throw Error(path + ": cannot parse template mmCIF: " + what.substr(0, what.find('\n')));
  }
  return template_structure(doc, path);
}

TemplateStructure parse_template_structure(const std::string& text, const std::string& origin) {
  gemmi::cif::Document doc;
  try {
    doc = gemmi::cif::read_memory(text.data(), text.size(), origin.c_str());
  } catch (const std::exception& ex) {
    const std::string what = ex.what();
    throw Error(origin + ": cannot parse template mmCIF: " + what.substr(0, what.find('\n')));
  }
  return template_structure(doc, origin);
}

}  // namespace megafold::data
