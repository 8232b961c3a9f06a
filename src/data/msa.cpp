#include "data/msa.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "core/check.h"
#include "core/files.h"
#include "core/seed.h"
#include "data/residue_constants.h"
#include "data/structure.h"

namespace megafold::data {
namespace {

// One sequence being read: its aligned columns and deletions so far.
struct Row {
  std::vector<int8_t> tokens;
  std::vector<uint8_t> deletions;
  int pending = 0;  // insertions since the last aligned column
  int first_line = 0;
  uint64_t species = 0;
};

uint64_t species_key(std::string_view kind, std::string_view value) {
  const uint64_t h = fnv1a64(std::string(kind) + ":" + std::string(value));
  return h == 0 ? 1 : h;
}

// The digits after `tag` in `header` ("OX=9606 ..." -> "9606"); empty if absent.
std::string_view number_after(std::string_view header, std::string_view tag) {
  const size_t at = header.find(tag);
  if (at == std::string_view::npos) return {};
  size_t end = at + tag.size();
  while (end < header.size() && header[end] >= '0' && header[end] <= '9') ++end;
  return header.substr(at + tag.size(), end - at - tag.size());
}

}  // namespace

namespace {

// Token type of an aligned a3m letter (upper case) for a chain of type mol; -1 if none.
int a3m_token(char c, MolType mol) {
  if (c == '-') return kGapToken;
  if (mol != MolType::kRna) return amino_acid_of_letter(c);
  if (c == 'T') c = 'U';
  const int t = nucleotide_of_letter(MolType::kRna, c);
  return t >= 0 ? t : (c >= 'A' && c <= 'Z' ? kUnknownRna : -1);
}

}  // namespace

uint64_t species_of_header(std::string_view header) {
  if (!header.empty() && header[0] == '>') header.remove_prefix(1);
  for (const std::string_view tag : {std::string_view("OX="), std::string_view("TaxID=")})
    if (const std::string_view id = number_after(header, tag); !id.empty()) return species_key("taxid", id);
  std::string_view name = header.substr(0, header.find_first_of(" \t"));
  if (const size_t bar = name.rfind('|'); bar != std::string_view::npos) name = name.substr(bar + 1);
  const size_t underscore = name.rfind('_');
  if (underscore == std::string_view::npos || underscore == 0) return 0;
  // An entry name is upper-case letters and digits, its species code 3-5 of them with a letter
  // (HUMAN, PIG, 9BACT); PDB ids (101m_A) and numbered names (seq_1) are not.
  const std::string_view entry = name.substr(0, underscore), mnemonic = name.substr(underscore + 1);
  auto upper = [](std::string_view x) {
    return std::all_of(x.begin(), x.end(), [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); });
  };
  const bool code = mnemonic.size() >= 3 && mnemonic.size() <= 5 && upper(mnemonic) && upper(entry) &&
                    std::any_of(mnemonic.begin(), mnemonic.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  return code ? species_key("mnemonic", mnemonic) : 0;
}

Msa parse_a3m(std::string_view text, const std::string& origin, MolType mol) {
  std::vector<Row> rows;
  bool in_record = false;
  int line_no = 0;
  auto close = [&](const std::string& where) {
    if (!in_record) return;
    Row& r = rows.back();
    if (r.tokens.empty()) throw Error(where + ": sequence " + std::to_string(rows.size()) + " has no aligned column");
    if (rows.size() > 1 && r.tokens.size() != rows.front().tokens.size())
      throw Error(origin + ":" + std::to_string(r.first_line) + ": sequence " + std::to_string(rows.size()) + " has " +
                  std::to_string(r.tokens.size()) + " aligned columns, the query has " +
                  std::to_string(rows.front().tokens.size()));
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = origin + ":" + std::to_string(line_no);
    if (line[0] == '>') {
      close(where);
      rows.emplace_back();
      rows.back().first_line = line_no;
      rows.back().species = rows.size() == 1 ? 0 : species_of_header(line);  // the query pairs with nothing
      in_record = true;
      continue;
    }
    if (!in_record) throw Error(where + ": sequence before the first '>' header");
    Row& r = rows.back();
    for (size_t k = 0; k < line.size(); ++k) {
      const char c = line[k];
      if (c == '.' || c == ' ' || c == '\t' || c == '*') continue;
      if (c >= 'a' && c <= 'z') {
        ++r.pending;
        continue;
      }
      const int t = a3m_token(c, mol);
      if (t < 0)
        throw Error(where + ":" + std::to_string(k + 1) + ": '" + std::string(1, c) + "' is not " +
                    (mol == MolType::kRna ? "a nucleotide code" : "an amino-acid code") + ", '-' or an insertion");
      r.tokens.push_back(static_cast<int8_t>(t));
      r.deletions.push_back(static_cast<uint8_t>(std::min(r.pending, 255)));
      r.pending = 0;
    }
  }
  close(origin + ":" + std::to_string(line_no));
  Msa m;
  if (rows.empty()) return m;
  m.depth = static_cast<int64_t>(rows.size());
  m.length = static_cast<int64_t>(rows.front().tokens.size());
  for (const Row& r : rows) {
    m.tokens.insert(m.tokens.end(), r.tokens.begin(), r.tokens.end());
    m.deletions.insert(m.deletions.end(), r.deletions.begin(), r.deletions.end());
    m.species.push_back(r.species);
  }
  return m;
}

Msa load_a3m(const std::string& path, MolType mol) {
  return parse_a3m(read_maybe_gzipped(path, "MSA file"), path, mol);  // .a3m and .a3m.gz alike
}

std::vector<int64_t> query_columns(const std::vector<int8_t>& query, const std::vector<int8_t>& sequence,
                                   const std::vector<int32_t>& residue_index, const std::string& origin) {
  MF_CHECK(sequence.size() == residue_index.size(), origin, ": sequence and residue_index differ in length");
  const int64_t n = static_cast<int64_t>(sequence.size()), length = static_cast<int64_t>(query.size());
  // Column of each residue: one to one, or by residue_index into the full sequence.
  std::vector<int64_t> column(n);
  auto matches = [&](const std::vector<int64_t>& col) {
    for (int64_t i = 0; i < n; ++i)
      if (col[i] < 0 || col[i] >= length || query[col[i]] != sequence[i]) return i;
    return n;
  };
  for (int64_t i = 0; i < n; ++i) column[i] = i;
  int64_t bad = length == n ? matches(column) : 0;
  if (length != n || bad < n) {
    for (int64_t i = 0; i < n; ++i) column[i] = residue_index[i] - 1;
    bad = matches(column);
    if (bad < n) {
      const bool outside = column[bad] < 0 || column[bad] >= length;
      throw Error(origin + ": the alignment's query (" + std::to_string(length) + " columns) does not match the chain (" +
                  std::to_string(n) + " residues): residue " + std::to_string(residue_index[bad]) + " (" +
                  std::string(1, amino_acid_letter(sequence[bad])) + ") " +
                  (outside ? "is outside the query" : std::string("is '") + amino_acid_letter(query[column[bad]]) + "' in the query"));
    }
  }
  return column;
}

Msa msa_for_chain(const Msa& msa, const std::vector<int8_t>& sequence, const std::vector<int32_t>& residue_index,
                  const std::string& origin) {
  MF_CHECK(sequence.size() == residue_index.size(), origin, ": sequence and residue_index differ in length");
  if (msa.depth == 0) return {};
  const std::vector<int8_t> query(msa.tokens.begin(), msa.tokens.begin() + msa.length);
  return msa_columns(msa, query_columns(query, sequence, residue_index, origin));
}

Msa msa_columns(const Msa& msa, const std::vector<int64_t>& columns) {
  const int64_t n = static_cast<int64_t>(columns.size());
  Msa out;
  out.depth = msa.depth;
  out.length = n;
  out.species = msa.species;
  out.tokens.resize(msa.depth * n);
  out.deletions.resize(msa.depth * n);
  for (int64_t s = 0; s < msa.depth; ++s)
    for (int64_t i = 0; i < n; ++i) {
      out.tokens[s * n + i] = msa.tokens[s * msa.length + columns[i]];
      out.deletions[s * n + i] = msa.deletions[s * msa.length + columns[i]];
    }
  MsaProfile p = msa_profile(out);
  out.profile = std::move(p.profile);
  out.deletion_mean = std::move(p.deletion_mean);
  return out;
}

uint64_t paired_row_species(int64_t row) {
  // Outside species_of_header's keys: those are hashes of "OX=..."-style text, never of this.
  return fnv1a64("paired MSA row " + std::to_string(row));
}

Msa with_paired_rows(const Msa& paired, const Msa& unpaired) {
  if (paired.depth == 0 && unpaired.depth == 0) return {};
  MF_CHECK(paired.depth == 0 || unpaired.depth == 0 || paired.length == unpaired.length,
           "paired and unpaired MSAs of one chain differ in length: ", paired.length, " and ", unpaired.length);
  Msa out;
  out.length = paired.depth > 0 ? paired.length : unpaired.length;
  auto append = [&](const Msa& m, int64_t first, bool own_species) {
    for (int64_t r = first; r < m.depth; ++r) {
      out.tokens.insert(out.tokens.end(), m.tokens.begin() + r * m.length, m.tokens.begin() + (r + 1) * m.length);
      out.deletions.insert(out.deletions.end(), m.deletions.begin() + r * m.length,
                           m.deletions.begin() + (r + 1) * m.length);
      out.species.push_back(own_species && r > 0 ? paired_row_species(r) : 0);
      ++out.depth;
    }
  };
  append(paired, 0, true);
  append(unpaired, paired.depth > 0 ? 1 : 0, false);  // one query row
  MsaProfile p = msa_profile(out);
  out.profile = std::move(p.profile);
  out.deletion_mean = std::move(p.deletion_mean);
  return out;
}

MsaProfile msa_profile(const Msa& msa) {
  MsaProfile p;
  p.profile.assign(msa.length * kNumTokenTypes, 0.f);
  p.deletion_mean.assign(msa.length, 0.f);
  if (msa.depth == 0) return p;
  const float w = 1.f / static_cast<float>(msa.depth);
  for (int64_t s = 0; s < msa.depth; ++s)
    for (int64_t i = 0; i < msa.length; ++i) {
      p.profile[i * kNumTokenTypes + msa.tokens[s * msa.length + i]] += w;
      p.deletion_mean[i] += w * static_cast<float>(msa.deletions[s * msa.length + i]);
    }
  return p;
}

void attach_msas(Entry& e, const std::string& msa_dir, std::vector<std::string>& warnings) {
  namespace fs = std::filesystem;
  if (msa_dir.empty()) return;
  if (e.msas.empty()) e.msas.assign(e.n_chains(), Msa{});
  for (int c = 0; c < e.n_chains(); ++c) {
    const MolType mol = e.chain_mol_type(c);
    if (mol != MolType::kProtein && mol != MolType::kRna) continue;  // DNA and ligands: single sequence
    if (e.msas[c].depth > 0) continue;
    fs::path file = fs::path(msa_dir) / (e.name + "_" + e.chain_ids[c] + ".a3m");
    if (!fs::exists(file)) file += ".gz";
    if (!fs::exists(file)) continue;
    if (!fs::is_regular_file(file)) {  // a FIFO would block the reader
      warnings.push_back("MSA not used: " + file.string() + " is not a regular file");
      continue;
    }
    std::vector<int8_t> seq;  // per residue
    std::vector<int32_t> index;
    for (int i = 0; i < e.n_tokens(); ++i)
      if (e.asym_id[i] == c && (index.empty() || e.residue_index[i] != index.back()))
        seq.push_back(e.restype[i]), index.push_back(e.residue_index[i]);
    try {
      e.msas[c] = msa_for_chain(load_a3m(file.string(), mol), seq, index, file.string());
    } catch (const std::exception& ex) {
      warnings.push_back(std::string("MSA not used: ") + ex.what());
    }
  }
}

}  // namespace megafold::data
