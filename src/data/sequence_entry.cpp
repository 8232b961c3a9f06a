#include "data/sequence_entry.h"

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "core/seed.h"
#include "data/smiles.h"

namespace megafold::data {

void push_residue(Entry& e, int t, int asym, int32_t index) {
  e.restype.push_back(static_cast<int8_t>(t));
  e.mol_type.push_back(static_cast<int8_t>(mol_type_of(t)));
  e.residue_index.push_back(index);
  e.author_index.push_back(index);
  e.insertion_codes.push_back(' ');
  e.asym_id.push_back(asym);
  e.component.push_back(-1);
  e.token_atoms.emplace_back();
}

namespace {

// Index of `code` in e.components, added if new.
int32_t component_index(Entry& e, const std::string& code) {
  auto it = std::find(e.components.begin(), e.components.end(), code);
  if (it == e.components.end()) it = e.components.insert(it, code);
  return static_cast<int32_t>(it - e.components.begin());
}

}  // namespace

std::optional<std::string> push_component(Entry& e, std::string code, int asym, int32_t index, MolType mol,
                                          const Ccd* ccd) {
  std::transform(code.begin(), code.end(), code.begin(), [](unsigned char c) { return std::toupper(c); });
  if (ccd == nullptr)
    return "component " + code + " cannot be built: no CCD table at '" + default_ccd_path() +
           "' (run scripts/setup.sh or set MEGAFOLD_CCD)";
  const CcdComponent* comp = ccd->find(code);
  if (comp == nullptr) return "component " + code + " is not in the CCD";
  const int first = e.n_tokens();
  std::vector<int> token_of(comp->atoms.size(), -1);
  for (size_t k = 0; k < comp->atoms.size(); ++k) {
    const CcdAtom& a = comp->atoms[k];
    if (a.leaving()) continue;
    token_of[k] = e.n_tokens();
    push_residue(e, unknown_type(mol), asym, index);
    e.mol_type.back() = static_cast<int8_t>(mol);
    TokenAtom& t = e.token_atoms.back();
    std::copy(a.name, a.name + 4, t.name);
    t.element = a.element;
    t.charge = a.charge;
    std::copy(a.pos, a.pos + 3, t.ref_pos);
  }
  if (e.n_tokens() == first) return "component " + code + " has no heavy atoms";
  const int32_t component = component_index(e, code);
  for (int i = first; i < e.n_tokens(); ++i) e.component[i] = component;
  for (const CcdBond& b : comp->bonds)
    if (token_of[b.a] >= 0 && token_of[b.b] >= 0)
      e.bonds.push_back({std::min(token_of[b.a], token_of[b.b]), std::max(token_of[b.a], token_of[b.b]), 0, 0});
  return std::nullopt;
}

void push_smiles(Entry& e, const std::string& smiles, int asym) {
  const SmilesLigand lig = smiles_ligand(smiles, fnv1a64(smiles));
  int k = 1;
  std::string code = "LIG";
  while (std::find(e.components.begin(), e.components.end(), code) != e.components.end()) code = "LIG" + std::to_string(++k);
  const int32_t component = component_index(e, code);
  const int first = e.n_tokens();
  for (const TokenAtom& a : lig.atoms) {
    push_residue(e, kUnknownAminoAcid, asym, 1);
    e.mol_type.back() = static_cast<int8_t>(MolType::kLigand);
    e.component.back() = component;
    e.token_atoms.back() = a;
  }
  for (const auto& [i, j] : lig.bonds) e.bonds.push_back({first + std::min(i, j), first + std::max(i, j), 0, 0});
}

std::optional<std::pair<int, int>> find_atom(const Entry& e, int asym, int32_t index, std::string_view name) {
  for (int i = 0; i < e.n_tokens(); ++i) {
    if (e.asym_id[i] != asym || e.residue_index[i] != index) continue;
    if (!e.per_atom(i)) {
      const int slot = atom_slot(e.restype[i], name);
      return slot >= 0 ? std::optional(std::pair{i, slot}) : std::nullopt;
    }
    if (e.token_atoms[i].atom_name() == name) return std::pair{i, 0};
  }
  return std::nullopt;
}

void link_modified_residues(Entry& e, int asym) {
  std::vector<int32_t> residues;  // in chain order
  bool any_per_atom = false;
  for (int i = 0; i < e.n_tokens(); ++i) {
    if (e.asym_id[i] != asym) continue;
    if (residues.empty() || residues.back() != e.residue_index[i]) residues.push_back(e.residue_index[i]);
    any_per_atom = any_per_atom || e.per_atom(i);
  }
  if (!any_per_atom) return;
  const bool protein = e.chain_mol_type(asym) == MolType::kProtein;
  const std::string_view out = protein ? "C" : "O3'", in = protein ? "N" : "P";
  for (size_t r = 0; r + 1 < residues.size(); ++r) {
    const auto a = find_atom(e, asym, residues[r], out), b = find_atom(e, asym, residues[r + 1], in);
    if (!a || !b || (!e.per_atom(a->first) && !e.per_atom(b->first))) continue;
    e.bonds.push_back({a->first, b->first, static_cast<int8_t>(a->second), static_cast<int8_t>(b->second)});
  }
}

void finish_sequence_entry(Entry& e, const std::string& origin) {
  if (e.n_tokens() == 0) throw Error(origin + ": no residues or ligands left to predict");
  std::sort(e.bonds.begin(), e.bonds.end());
  e.coords.assign(static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken * 3, 0.f);
  e.atom_mask.assign(static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken, 0);
  assign_entities(e);
}

}  // namespace megafold::data
