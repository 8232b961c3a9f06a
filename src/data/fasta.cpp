// FASTA input for prediction: sequences and ligand codes, no gemmi.
#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/check.h"
#include "data/ccd.h"
#include "data/smiles.h"
#include "data/structure.h"

namespace megafold::data {
namespace {

enum class RecordKind { kProtein, kDna, kRna, kCcd, kSmiles };

// The record's kind from its header: the first '|'-separated field after the first that names
// one (protein, dna, rna, ccd, smiles; any case); protein when none does (plain and UniProt
// headers).
RecordKind record_kind(const std::string& header) {
  std::istringstream in(header.substr(1));
  std::string field;
  bool first = true;
  while (std::getline(in, field, '|')) {
    if (std::exchange(first, false)) continue;
    std::string f;
    for (char c : field)
      if (!std::isspace(static_cast<unsigned char>(c))) f.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    if (f == "protein") return RecordKind::kProtein;
    if (f == "dna") return RecordKind::kDna;
    if (f == "rna") return RecordKind::kRna;
    if (f == "ccd") return RecordKind::kCcd;
    if (f == "smiles") return RecordKind::kSmiles;
  }
  return RecordKind::kProtein;
}

struct Record {
  RecordKind kind = RecordKind::kProtein;
  int line = 0;               // of the header
  std::string text;           // the sequence lines joined (whitespace kept for ligand codes)
  std::vector<int> columns;   // line and column of every character of text (for errors)
  std::vector<int> lines;
};

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

// The residues of a polymer record, letter by letter.
void add_polymer(Entry& e, const Record& r, const std::string& path, int asym) {
  const MolType mol = r.kind == RecordKind::kDna ? MolType::kDna : r.kind == RecordKind::kRna ? MolType::kRna : MolType::kProtein;
  bool ended = false;
  int32_t index = 0;
  for (size_t k = 0; k < r.text.size(); ++k) {
    const char c = r.text[k];
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (c == '*' && !ended) {
      ended = true;
      continue;
    }
    const int t = ended ? -1 : mol == MolType::kProtein ? amino_acid_of_letter(c) : nucleotide_of_letter(mol, c);
    if (t < 0)
      throw Error(path + ":" + std::to_string(r.lines[k]) + ":" + std::to_string(r.columns[k]) + ": '" +
                  std::string(1, c) + "' is not " +
                  (mol == MolType::kProtein ? std::string("an amino-acid code")
                                            : std::string(mol == MolType::kDna ? "a DNA" : "an RNA") + " nucleotide code") +
                  (ended ? " (after the record's terminating '*')" : ""));
    push_residue(e, t, asym, ++index);
  }
}

// The components of a ccd record (codes separated by spaces, commas or line breaks), each one
// residue of per-atom tokens with the CCD's non-leaving heavy atoms and bonds, unplaced. An
// unknown code is skipped with a warning.
void add_ligands(Entry& e, const Record& r, const std::string& path, int asym, const Ccd* ccd) {
  std::string text = r.text;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  int32_t index = 0;
  for (std::string code; in >> code;) {
    std::transform(code.begin(), code.end(), code.begin(), [](unsigned char c) { return std::toupper(c); });
    const CcdComponent* comp = ccd ? ccd->find(code) : nullptr;
    if (comp == nullptr) {
      e.warnings.push_back(path + ":" + std::to_string(r.line) + ": chain " + chain_label(asym) + " component " + code +
                           (ccd ? " is not in the CCD" : " cannot be built: no CCD table at '" + default_ccd_path() +
                                                            "' (run scripts/setup.sh or set MEGAFOLD_CCD)") +
                           "; skipped");
      continue;
    }
    auto cit = std::find(e.components.begin(), e.components.end(), code);
    if (cit == e.components.end()) cit = e.components.insert(cit, code);
    const auto component = static_cast<int32_t>(cit - e.components.begin());
    ++index;
    const int first = e.n_tokens();
    std::vector<int> token_of(comp->atoms.size(), -1);
    for (size_t k = 0; k < comp->atoms.size(); ++k) {
      const CcdAtom& a = comp->atoms[k];
      if (a.leaving()) continue;
      token_of[k] = e.n_tokens();
      push_residue(e, kUnknownAminoAcid, asym, index);
      e.mol_type.back() = static_cast<int8_t>(MolType::kLigand);
      e.component.back() = component;
      TokenAtom& t = e.token_atoms.back();
      std::copy(a.name, a.name + 4, t.name);
      t.element = a.element;
      t.charge = a.charge;
      std::copy(a.pos, a.pos + 3, t.ref_pos);
    }
    if (e.n_tokens() == first) {
      e.warnings.push_back(path + ":" + std::to_string(r.line) + ": chain " + chain_label(asym) + " component " + code +
                           " has no heavy atoms; skipped");
      continue;
    }
    for (const CcdBond& b : comp->bonds)
      if (token_of[b.a] >= 0 && token_of[b.b] >= 0)
        e.bonds.push_back({std::min(token_of[b.a], token_of[b.b]), std::max(token_of[b.a], token_of[b.b]), 0, 0});
  }
}

// A smiles record: one ligand residue of per-atom tokens with an RDKit conformer as its
// reference (seeded by the SMILES text, so a prediction is repeatable); named LIG, LIG2, ...
// A SMILES RDKit cannot use (or no RDKit) is skipped with a warning giving the reason.
void add_smiles(Entry& e, const Record& r, const std::string& path, int asym) {
  std::string smiles;
  for (const char c : r.text)
    if (!std::isspace(static_cast<unsigned char>(c))) smiles.push_back(c);
  const std::string where = path + ":" + std::to_string(r.line) + ": chain " + chain_label(asym);
  if (smiles.empty()) throw Error(where + ": smiles record without a SMILES");
  SmilesLigand lig;
  try {
    uint64_t seed = 1469598103934665603ull;  // FNV-1a of the SMILES
    for (const char c : smiles) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    lig = smiles_ligand(smiles, seed);
  } catch (const Error& ex) {
    e.warnings.push_back(where + " SMILES '" + smiles + "': " + ex.what() + "; skipped");
    return;
  }
  int k = 1;
  std::string code = "LIG";
  while (std::find(e.components.begin(), e.components.end(), code) != e.components.end()) code = "LIG" + std::to_string(++k);
  e.components.push_back(code);
  const auto component = static_cast<int32_t>(e.components.size() - 1);
  const int first = e.n_tokens();
  for (const TokenAtom& a : lig.atoms) {
    push_residue(e, kUnknownAminoAcid, asym, 1);
    e.mol_type.back() = static_cast<int8_t>(MolType::kLigand);
    e.component.back() = component;
    e.token_atoms.back() = a;
  }
  for (const auto& [i, j] : lig.bonds) e.bonds.push_back({first + std::min(i, j), first + std::max(i, j), 0, 0});
}

}  // namespace

bool is_fasta_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".fasta" || ext == ".fa" || ext == ".faa" || ext == ".fas";
}

Entry load_fasta(const std::string& path) {
  std::string why;
  const Ccd* ccd = usable_default_ccd(&why);  // only ccd records need it
  Entry e = load_fasta(path, ccd);
  if (!why.empty()) e.warnings.insert(e.warnings.begin(), why + "; ccd records skipped");
  return e;
}

Entry load_fasta(const std::string& path, const Ccd* ccd) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open FASTA file");
  std::vector<Record> records;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == ';') continue;
    if (line[0] == '>') {
      records.push_back({record_kind(line), line_no});
      continue;
    }
    if (records.empty()) throw Error(path + ":" + std::to_string(line_no) + ": sequence before the first '>' header");
    Record& r = records.back();
    for (size_t k = 0; k < line.size(); ++k) {
      r.text.push_back(line[k]);
      r.lines.push_back(line_no);
      r.columns.push_back(static_cast<int>(k + 1));
    }
    r.text.push_back('\n');
    r.lines.push_back(line_no);
    r.columns.push_back(static_cast<int>(line.size() + 1));
  }
  if (in.bad()) throw Error(path + ": read error");
  if (records.empty()) throw Error(path + ": no FASTA record (no line starting with '>')");

  Entry e;
  e.path = path;
  e.name = std::filesystem::path(path).stem().string();
  for (const Record& r : records) {
    const int asym = e.n_chains();
    const int before = e.n_tokens();
    if (r.kind == RecordKind::kSmiles) {
      add_smiles(e, r, path, asym);
    } else if (r.kind == RecordKind::kCcd) {
      add_ligands(e, r, path, asym, ccd);
    } else {
      add_polymer(e, r, path, asym);
      if (e.n_tokens() == before)
        throw Error(path + ":" + std::to_string(r.line) + ": record '" + chain_label(asym) + "' has no residues");
    }
    if (e.n_tokens() > before) e.chain_ids.push_back(chain_label(asym));
  }
  if (e.n_tokens() == 0) throw Error(path + ": no residues or ligands left to predict");
  std::sort(e.bonds.begin(), e.bonds.end());
  e.coords.assign(static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken * 3, 0.f);
  e.atom_mask.assign(static_cast<size_t>(e.n_tokens()) * kMaxAtomsPerToken, 0);
  assign_entities(e);
  return e;
}

}  // namespace megafold::data
