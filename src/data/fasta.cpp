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
#include "data/sequence_entry.h"
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
// residue of per-atom tokens, unplaced. An unknown code is skipped with a warning.
void add_ligands(Entry& e, const Record& r, const std::string& path, int asym, const Ccd* ccd) {
  std::string text = r.text;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  int32_t index = 0;
  for (std::string code; in >> code;)
    if (const auto why = push_component(e, code, asym, index + 1, MolType::kLigand, ccd))
      e.warnings.push_back(path + ":" + std::to_string(r.line) + ": chain " + chain_label(asym) + " " + *why + "; skipped");
    else
      ++index;
}

// A smiles record: one ligand (push_smiles). A SMILES RDKit cannot use (or no RDKit) is
// skipped with a warning giving the reason.
void add_smiles(Entry& e, const Record& r, const std::string& path, int asym) {
  std::string smiles;
  for (const char c : r.text)
    if (!std::isspace(static_cast<unsigned char>(c))) smiles.push_back(c);
  const std::string where = path + ":" + std::to_string(r.line) + ": chain " + chain_label(asym);
  if (smiles.empty()) throw Error(where + ": smiles record without a SMILES");
  try {
    push_smiles(e, smiles, asym);
  } catch (const Error& ex) {
    e.warnings.push_back(where + " SMILES '" + smiles + "': " + ex.what() + "; skipped");
  }
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
  finish_sequence_entry(e, path);
  return e;
}

}  // namespace megafold::data
