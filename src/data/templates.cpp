#include "data/templates.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "core/check.h"
#include "core/files.h"
#include "core/seed.h"
#include "data/alignment.h"
#include "data/msa.h"
#include "data/msa_features.h"
#include "data/structure.h"

namespace megafold::data {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A PDB id: a digit 1-9, then three letters or digits.
bool is_pdb_id(std::string_view s) {
  return s.size() == 4 && s[0] >= '1' && s[0] <= '9' && std::all_of(s.begin(), s.end(), is_alnum);
}

// "<pdbid>_<chain>[/<start>-<end>]", the first word of a hit's header or its Stockholm name.
struct HitName {
  std::string pdb_id, chain;
  bool range = false;
  int32_t start = 1, end = 0;
};

std::optional<int32_t> number(std::string_view s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), is_digit)) return std::nullopt;
  return std::stoi(std::string(s));
}

std::optional<HitName> parse_hit_name(std::string_view word) {
  const size_t underscore = word.find('_');
  if (underscore != 4 || !is_pdb_id(word.substr(0, 4))) return std::nullopt;
  HitName h;
  h.pdb_id = lower(std::string(word.substr(0, 4)));
  std::string_view rest = word.substr(5);
  const size_t slash = rest.find('/');
  h.chain = std::string(rest.substr(0, slash));
  if (h.chain.empty() || !std::all_of(h.chain.begin(), h.chain.end(), is_alnum)) return std::nullopt;
  if (slash == std::string_view::npos) return h;
  const std::string_view range = rest.substr(slash + 1);
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto start = number(range.substr(0, dash)), end = number(range.substr(dash + 1));
  if (!start || !end || *start < 1 || *end < *start) return std::nullopt;
  h.range = true;
  h.start = *start;
  h.end = *end;
  return h;
}

std::string_view first_word(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  s.remove_prefix(begin);
  return s.substr(0, s.find_first_of(" \t"));
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t pos = 0;;) {
    const size_t begin = s.find_first_not_of(" \t", pos);
    if (begin == std::string_view::npos) break;
    const size_t end = std::min(s.find_first_of(" \t", begin), s.size());
    out.push_back(s.substr(begin, end - begin));
    pos = end;
  }
  return out;
}

// Lines of `text` without line ends, numbered from 1.
template <typename F>
void for_each_line(std::string_view text, F&& f) {
  int line_no = 0;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!f(line, line_no)) break;
  }
}

// The aligned pairs of one hit row in a3m convention: upper-case letters and '-' are query
// columns, lower-case letters template residues between them, '.' and '*' nothing. `columns`
// receives the number of query columns seen; false (with `why`) for a character of no meaning.
bool walk_row(std::string_view row, int32_t start, TemplateHit& hit, int32_t& columns, int32_t& residues,
              std::string& why) {
  int32_t q = 0, r = start;
  residues = 0;
  for (const char c : row) {
    if (c == '.' || c == '*' || c == ' ' || c == '\t') continue;
    if (c >= 'a' && c <= 'z') {
      ++r, ++residues;
      continue;
    }
    if (c == '-') {
      ++q;
      continue;
    }
    if (c >= 'A' && c <= 'Z') {
      const int t = amino_acid_of_letter(c);
      hit.pairs.push_back({q, r, static_cast<int8_t>(t >= 0 && t < kNumAminoAcids ? t : -1)});
      ++q, ++r, ++residues;
      continue;
    }
    why = std::string("'") + c + "' is not an amino-acid letter, '-' or '.'";
    return false;
  }
  columns = q;
  return true;
}

// A hit record of an a3m or Stockholm file, its row already in a3m convention.
void add_hit(TemplateHits& out, const std::string& name, int line, std::string_view row, int32_t& expected_columns) {
  const auto hn = parse_hit_name(name);
  const std::string where = "line " + std::to_string(line) + ": ";
  if (!hn) {
    out.malformed.push_back(where + "'" + name + "' is not a <pdbid>_<chain> hit name");
    return;
  }
  TemplateHit hit;
  hit.pdb_id = hn->pdb_id;
  hit.chain = hn->chain;
  hit.line = line;
  int32_t columns = 0, residues = 0;
  std::string why;
  if (!walk_row(row, hn->start, hit, columns, residues, why)) {
    out.malformed.push_back(where + name + ": " + why);
    return;
  }
  if (expected_columns < 0) expected_columns = columns;
  if (columns != expected_columns) {
    out.malformed.push_back(where + name + ": " + std::to_string(columns) + " query columns, the " +
                            (out.query.empty() ? "first hit has " : "query has ") + std::to_string(expected_columns));
    return;
  }
  if (hn->range && residues != hn->end - hn->start + 1) {
    out.malformed.push_back(where + name + ": the range " + std::to_string(hn->start) + "-" + std::to_string(hn->end) +
                            " spans " + std::to_string(hn->end - hn->start + 1) + " residues, the row has " +
                            std::to_string(residues));
    return;
  }
  out.hits.push_back(std::move(hit));
}

// The query row's token types; throws (naming the file) for a row that is not a protein
// sequence without gaps, since then no column of the file can be placed on the chain.
std::vector<int8_t> query_tokens(std::string_view row, const std::string& where) {
  std::vector<int8_t> out;
  for (const char c : row) {
    if (c == '.' || c == '-' || c == '*' || c == ' ' || c == '\t') continue;
    const int t = amino_acid_of_letter(c);
    if (t < 0) throw Error(where + ": '" + std::string(1, c) + "' in the query row is not an amino-acid letter");
    out.push_back(static_cast<int8_t>(t));
  }
  return out;
}

TemplateHits parse_a3m_hits(std::string_view text, const std::string& origin) {
  struct Record {
    std::string name;
    int line = 0;
    std::string row;
  };
  std::vector<Record> records;
  for_each_line(text, [&](std::string_view line, int line_no) {
    if (line.empty() || line[0] == '#') return true;
    if (line[0] == '>') {
      records.push_back({std::string(first_word(line.substr(1))), line_no, {}});
    } else if (!records.empty()) {
      records.back().row.append(line);
    } else {
      throw Error(origin + ":" + std::to_string(line_no) + ": sequence before the first '>' header");
    }
    return true;
  });
  TemplateHits out;
  if (records.empty()) return out;
  size_t first = 0;
  std::vector<bool> query_column;  // per aligned column of the query row: a query residue
  if (!parse_hit_name(records[0].name)) {
    first = 1;
    const Record& q = records[0];
    out.query = query_tokens(q.row, origin + ":" + std::to_string(q.line));
    for (const char c : q.row) {
      if (c >= 'a' && c <= 'z') throw Error(origin + ":" + std::to_string(q.line) + ": the query row has insertions");
      if (c == '-' || (c >= 'A' && c <= 'Z')) query_column.push_back(c != '-');
    }
  }
  int32_t expected = out.query.empty() ? -1 : static_cast<int32_t>(out.query.size());
  for (size_t k = first; k < records.size(); ++k) {
    const Record& r = records[k];
    if (query_column.empty() || std::all_of(query_column.begin(), query_column.end(), [](bool b) { return b; })) {
      add_hit(out, r.name, r.line, r.row, expected);
      continue;
    }
    // A query row with gaps: its gap columns hold template residues between query columns.
    std::string row;
    size_t col = 0;
    bool too_long = false;
    for (const char c : r.row) {
      if (c == '-' || (c >= 'A' && c <= 'Z')) {
        if (col >= query_column.size()) {
          too_long = true;
          break;
        }
        if (query_column[col++])
          row.push_back(c);
        else if (c != '-')
          row.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      } else {
        row.push_back(c);
      }
    }
    if (too_long || col != query_column.size()) {
      out.malformed.push_back("line " + std::to_string(r.line) + ": " + r.name + ": " +
                              "its aligned columns are not the query row's " + std::to_string(query_column.size()));
      continue;
    }
    add_hit(out, r.name, r.line, row, expected);
  }
  out.columns = expected;
  return out;
}

TemplateHits parse_stockholm_hits(std::string_view text, const std::string& origin) {
  std::vector<std::string> names;
  std::map<std::string, std::pair<int, std::string>> rows;  // name -> (first line, row)
  std::string rf;
  for_each_line(text, [&](std::string_view line, int line_no) {
    if (line.rfind("//", 0) == 0) return false;  // end of the (first) alignment
    const auto w = words(line);
    if (w.empty()) return true;
    if (w[0] == "#=GC") {
      if (w.size() >= 3 && w[1] == "RF") rf.append(w[2]);
      return true;
    }
    if (w[0][0] == '#') return true;  // header, #=GF, #=GS, #=GR
    if (w.size() != 2) throw Error(origin + ":" + std::to_string(line_no) + ": expected '<name> <aligned sequence>'");
    auto [it, inserted] = rows.try_emplace(std::string(w[0]), line_no, std::string());
    if (inserted) names.push_back(std::string(w[0]));
    it->second.second.append(w[1]);
    return true;
  });
  TemplateHits out;
  if (names.empty()) return out;
  const size_t width = rows[names[0]].second.size();
  for (const std::string& n : names)
    if (rows[n].second.size() != width)
      throw Error(origin + ":" + std::to_string(rows[n].first) + ": row " + n + " has " +
                  std::to_string(rows[n].second.size()) + " columns, " + names[0] + " has " + std::to_string(width));
  if (!rf.empty() && rf.size() != width)
    throw Error(origin + ": #=GC RF has " + std::to_string(rf.size()) + " columns, the rows have " + std::to_string(width));
  auto is_gap = [](char c) { return c == '-' || c == '.' || c == '~'; };
  // Which columns are the query's: a query row's residues, else RF's match states, else none
  // known (each letter's case then tells, as in a3m).
  std::vector<int8_t> query_column(width, -1);  // 1 query, 0 insert, -1 by the letter's case
  size_t first = 0;
  if (!parse_hit_name(names[0])) {
    first = 1;
    const std::string& q = rows[names[0]].second;
    out.query = query_tokens(q, origin + ":" + std::to_string(rows[names[0]].first));
    for (size_t k = 0; k < width; ++k) query_column[k] = is_gap(q[k]) ? 0 : 1;
  } else if (!rf.empty()) {
    for (size_t k = 0; k < width; ++k) query_column[k] = is_gap(rf[k]) ? 0 : 1;
  }
  int32_t expected = out.query.empty() ? -1 : static_cast<int32_t>(out.query.size());
  for (size_t k = first; k < names.size(); ++k) {
    const auto& [line, aligned] = rows[names[k]];
    std::string row;  // in a3m convention
    for (size_t col = 0; col < width; ++col) {
      const char c = aligned[col];
      if (query_column[col] < 0) {
        if (c != '.') row.push_back(c);
      } else if (query_column[col] == 1) {
        row.push_back(is_gap(c) ? '-' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
      } else if (!is_gap(c)) {
        row.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      }
    }
    add_hit(out, names[k], line, row, expected);
  }
  out.columns = expected;
  return out;
}

TemplateHits parse_m8_hits(std::string_view text) {
  TemplateHits out;
  for_each_line(text, [&](std::string_view line, int line_no) {
    const auto w = words(line);
    if (w.empty() || w[0][0] == '#') return true;
    const std::string where = "line " + std::to_string(line_no) + ": ";
    if (w.size() < 10) {
      out.malformed.push_back(where + std::to_string(w.size()) + " fields, BLAST tabular (m8) has 12");
      return true;
    }
    const auto hn = parse_hit_name(w[1]);
    if (!hn) {
      out.malformed.push_back(where + "'" + std::string(w[1]) + "' is not a <pdbid>_<chain> hit name");
      return true;
    }
    const auto qs = number(w[6]), qe = number(w[7]), ts = number(w[8]), te = number(w[9]);
    if (!qs || !qe || !ts || !te || *qs < 1 || *qe < *qs || *ts < 1 || *te < *ts) {
      out.malformed.push_back(where + std::string(w[1]) + ": qstart, qend, tstart, tend must be 1-based spans, got " +
                              std::string(w[6]) + " " + std::string(w[7]) + " " + std::string(w[8]) + " " +
                              std::string(w[9]));
      return true;
    }
    TemplateHit hit;
    hit.pdb_id = hn->pdb_id;
    hit.chain = hn->chain;
    hit.line = line_no;
    hit.spans_only = true;
    hit.query_start = *qs, hit.query_end = *qe, hit.template_start = *ts, hit.template_end = *te;
    out.hits.push_back(std::move(hit));
    return true;
  });
  return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The residues of chain c (a per-atom residue once): their token types and residue_index.
void chain_residues(const Entry& e, int c, std::vector<int8_t>& seq, std::vector<int32_t>& index) {
  for (int i = 0; i < e.n_tokens(); ++i)
    if (e.asym_id[i] == c && (index.empty() || e.residue_index[i] != index.back()))
      seq.push_back(e.restype[i]), index.push_back(e.residue_index[i]);
}

// Why hits of one file were not used: a count and the first hit's description per reason.
class Unusable {
 public:
  void add(const std::string& reason, const std::string& detail) {
    auto it = std::find_if(reasons_.begin(), reasons_.end(), [&](const Reason& r) { return r.reason == reason; });
    if (it == reasons_.end()) {
      reasons_.push_back({reason, 0, detail});
      it = std::prev(reasons_.end());
    }
    ++it->count;
    ++total_;
  }
  int64_t total() const { return total_; }
  std::string summary() const {
    std::string s;
    for (const Reason& r : reasons_)
      s += (s.empty() ? "" : "; ") + std::to_string(r.count) + " " + r.reason + " (first: " + r.first + ")";
    return s;
  }

 private:
  struct Reason {
    std::string reason;
    int64_t count;
    std::string first;
  };
  std::vector<Reason> reasons_;
  int64_t total_ = 0;
};

std::string describe(const TemplateHit& h) { return "line " + std::to_string(h.line) + ", " + h.name(); }

// Chain c's hits, filtered and made features (the header comment's rules), appended to `out`.
TemplateCounts chain_templates(const Entry& e, int c, const TemplateHits& hits, const std::string& origin,
                               const TemplateOptions& options, TemplateStructureCache& structures, std::vector<ChainTemplate>& out,
                               std::vector<std::string>& warnings) {
  TemplateCounts n;
  n.read = static_cast<int64_t>(hits.hits.size() + hits.malformed.size());
  Unusable unusable;
  for (const std::string& m : hits.malformed) unusable.add("malformed", m);
  std::vector<int8_t> seq;
  std::vector<int32_t> index;
  chain_residues(e, c, seq, index);
  const int64_t n_res = static_cast<int64_t>(seq.size());
  // The query column of each residue, and the residue of each column (-1: unobserved).
  std::vector<int64_t> column(n_res);
  if (!hits.query.empty()) {
    try {
      column = query_columns(hits.query, seq, index, origin);
    } catch (const std::exception& ex) {
      warnings.push_back(std::string("templates not used: ") + ex.what());
      n.unusable = n.read;
      return n;
    }
  } else {
    // Column k is residue_index k + 1: rows narrower than the chain's numbering cannot be its
    // residues (an HMM's match states without --hand, say), and would shift every hit silently.
    const int64_t last = n_res > 0 ? *std::max_element(index.begin(), index.end()) : 0;
    if (hits.columns >= 0 && hits.columns < last) {
      warnings.push_back(origin + ": templates not used: its rows have " + std::to_string(hits.columns) +
                         " query columns and no query row, but the chain's residues are numbered up to " +
                         std::to_string(last) + ": give the query as the first row");
      n.unusable = n.read;
      return n;
    }
    for (int64_t i = 0; i < n_res; ++i) column[i] = index[i] - 1;
  }
  std::vector<int32_t> residue_at;
  for (int64_t i = 0; i < n_res; ++i)
    if (column[i] >= 0) {
      if (column[i] >= static_cast<int64_t>(residue_at.size())) residue_at.resize(column[i] + 1, -1);
      residue_at[column[i]] = static_cast<int32_t>(i);
    }
  auto residue_of = [&](int64_t col) { return col >= 0 && col < static_cast<int64_t>(residue_at.size()) ? residue_at[col] : -1; };

  const std::string self = entry_pdb_id(e.name);
  for (const TemplateHit& hit : hits.hits) {
    if (static_cast<int>(out.size()) >= kMaxTemplateHits) break;
    if (hit.pdb_id == self) {
      ++n.self;
      continue;
    }
    std::string why;
    const std::shared_ptr<const TemplateStructure> structure = structures.get(options.mmcif, hit.pdb_id, why);
    if (!structure) {
      unusable.add("without a usable structure", describe(hit) + ": " + why);
      continue;
    }
    const TemplateStructure& st = *structure;
    // Released on or before the maximum date, and before the entry was deposited.
    if (!options.max_release_date.empty() || !e.deposition_date.empty()) {
      if (st.release_date.empty()) {
        unusable.add("without a release date", describe(hit) + ": its mmCIF records no revision date");
        continue;
      }
      if ((!options.max_release_date.empty() && st.release_date > options.max_release_date) ||
          (!e.deposition_date.empty() && st.release_date >= e.deposition_date)) {
        ++n.released_later;
        continue;
      }
    }
    const TemplateStructure::Chain* chain = st.find_chain(hit.chain);
    if (chain == nullptr) {
      unusable.add("without their chain", describe(hit) + ": no protein chain '" + hit.chain + "' in " + st.id);
      continue;
    }
    std::vector<std::pair<int32_t, int32_t>> pairs;  // (chain residue, template residue, 0-based)
    std::string bad;
    if (hit.spans_only) {
      if (hit.template_end > chain->size()) {
        bad = "template residues " + std::to_string(hit.template_start) + "-" + std::to_string(hit.template_end) +
              " beyond the chain's " + std::to_string(chain->size());
      } else {
        std::vector<int32_t> query_res;
        std::vector<int8_t> a, b(chain->restype.begin() + hit.template_start - 1, chain->restype.begin() + hit.template_end);
        for (int64_t i = 0; i < n_res; ++i)
          if (column[i] >= hit.query_start - 1 && column[i] <= hit.query_end - 1)
            query_res.push_back(static_cast<int32_t>(i)), a.push_back(seq[i]);
        const GlobalAlignment al = align_global(a, b);
        for (size_t k = 0; k < a.size(); ++k)
          if (al.a_to_b[k] >= 0) pairs.emplace_back(query_res[k], hit.template_start - 1 + al.a_to_b[k]);
      }
    } else {
      for (const TemplateHit::Pair& p : hit.pairs) {
        if (p.residue > chain->size()) {
          bad = "template residue " + std::to_string(p.residue) + " beyond the chain's " + std::to_string(chain->size());
          break;
        }
        const int8_t t = chain->restype[p.residue - 1];
        if (p.type >= 0 && t < kNumAminoAcids && p.type != t) {
          bad = "template residue " + std::to_string(p.residue) + " is '" + amino_acid_letter(p.type) + "' in the hit, " +
                std::string(residue_name(t)) + " in the structure";
          break;
        }
        if (const int32_t i = residue_of(p.query); i >= 0) pairs.emplace_back(i, p.residue - 1);
      }
    }
    if (!bad.empty()) {
      unusable.add("not matching their structure", describe(hit) + ": " + bad);
      continue;
    }
    const int64_t aligned = static_cast<int64_t>(pairs.size());
    if (aligned < kMinTemplateAligned) {
      ++n.short_hits;
      continue;
    }
    int64_t same = 0;
    for (const auto& [i, r] : pairs) same += seq[i] == chain->restype[r];
    if (static_cast<double>(same) > kDuplicateIdentity * static_cast<double>(aligned) &&
        static_cast<double>(aligned) > kDuplicateCoverage * static_cast<double>(n_res)) {
      ++n.duplicates;
      continue;
    }
    ChainTemplate t;
    t.name = hit.name();
    t.restype.assign(n_res, static_cast<int8_t>(kGapToken));
    t.coords.assign(n_res * kTemplateAtoms * 3, 0.f);
    t.mask.assign(n_res * kTemplateAtoms, 0);
    for (const auto& [i, r] : pairs) {
      t.restype[i] = chain->restype[r];
      std::copy_n(chain->coords.begin() + r * kTemplateAtoms * 3, kTemplateAtoms * 3, t.coords.begin() + i * kTemplateAtoms * 3);
      std::copy_n(chain->mask.begin() + r * kTemplateAtoms, kTemplateAtoms, t.mask.begin() + i * kTemplateAtoms);
    }
    out.push_back(std::move(t));
    ++n.kept;
  }
  n.unusable = unusable.total();
  if (n.unusable > 0)
    warnings.push_back("templates: " + origin + ": " + std::to_string(n.unusable) + " of " + std::to_string(n.read) +
                       " hits not used: " + unusable.summary());
  return n;
}

}  // namespace

const TemplateStructure::Chain* TemplateStructure::find_chain(const std::string& id) const {
  for (const Chain& c : chains)
    if (c.author_id == id) return &c;
  for (const Chain& c : chains)
    if (c.label_id == id) return &c;
  return nullptr;
}

std::string find_template_mmcif(const std::string& dir, const std::string& pdb_id) {
  if (dir.empty() || pdb_id.size() != 4) return "";
  const fs::path root(dir);
  for (const fs::path& base : {root, root / pdb_id.substr(1, 2)})
    for (const char* ext : {".cif", ".cif.gz"}) {
      const fs::path p = base / (pdb_id + ext);
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) return p.string();
    }
  return "";
}

TemplateHits parse_template_hits(std::string_view text, const std::string& origin, TemplateFormat format) {
  switch (format) {
    case TemplateFormat::kA3m: return parse_a3m_hits(text, origin);
    case TemplateFormat::kStockholm: return parse_stockholm_hits(text, origin);
    case TemplateFormat::kM8: return parse_m8_hits(text);
  }
  throw Error(origin + ": unknown template hit format");
}

TemplateHits load_template_hits(const std::string& path) {
  std::string name = path;
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  TemplateFormat format;
  if (ends_with(name, ".a3m"))
    format = TemplateFormat::kA3m;
  else if (ends_with(name, ".sto"))
    format = TemplateFormat::kStockholm;
  else if (ends_with(name, ".m8"))
    format = TemplateFormat::kM8;
  else
    throw Error(path + ": not a template hit list (.a3m, .sto or .m8, optionally .gz)");
  return parse_template_hits(read_maybe_gzipped(path, "template hit list"), path, format);
}

bool is_release_date(const std::string& d) {
  return d.size() == 10 && d[4] == '-' && d[7] == '-' &&
         std::all_of(d.begin(), d.end(), [](char c) { return c == '-' || is_digit(c); }) &&
         std::count(d.begin(), d.end(), '-') == 2;
}

std::string entry_pdb_id(const std::string& name) {
  if (name.size() < 4 || !is_pdb_id(std::string_view(name).substr(0, 4))) return "";
  if (name.size() > 4 && is_alnum(name[4])) return "";
  return lower(name.substr(0, 4));
}

std::shared_ptr<const TemplateStructure> TemplateStructureCache::get(const std::string& mmcif_dir,
                                                                    const std::string& pdb_id, std::string& why) {
  const std::string key = mmcif_dir + '/' + pdb_id;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = kept_.find(key); it != kept_.end()) {
      used_.splice(used_.begin(), used_, it->second.age);
      why = it->second.why;
      return it->second.structure;
    }
  }
  // Read outside the lock: parsing takes far longer than the lookups of the other threads.
  Kept k;
  const std::string path = find_template_mmcif(mmcif_dir, pdb_id);
  if (path.empty()) {
    k.why = "no " + pdb_id + ".cif or " + pdb_id + ".cif.gz in " + mmcif_dir + " or " +
            (fs::path(mmcif_dir) / pdb_id.substr(1, 2)).string();
  } else {
    ++reads_;
    try {
      k.structure = std::make_shared<const TemplateStructure>(read_template_structure(path));
    } catch (const std::exception& ex) {
      k.why = ex.what();
    }
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = kept_.find(key); it == kept_.end()) {
    used_.push_front(key);
    k.age = used_.begin();
    kept_.emplace(key, k);
    while (kept_.size() > std::max<size_t>(capacity_, 1)) {
      kept_.erase(used_.back());
      used_.pop_back();
    }
  }
  why = k.why;
  return k.structure;
}

TemplateCounts attach_templates(Entry& e, const TemplateOptions& options, std::vector<std::string>& warnings,
                                TemplateStructureCache* shared) {
  if (!options.max_release_date.empty() && !is_release_date(options.max_release_date))
    throw Error("maximum template release date '" + options.max_release_date + "' is not YYYY-MM-DD");
  TemplateCounts total;
  if (options.hits.empty()) return total;
  if (e.templates.empty()) e.templates.assign(e.n_chains(), {});
  TemplateStructureCache own;  // one entry's hits: a structure several of them name is read once
  TemplateStructureCache& structures = shared ? *shared : own;
  for (int c = 0; c < e.n_chains(); ++c) {
    if (e.chain_mol_type(c) != MolType::kProtein || !e.templates[c].empty()) continue;
    std::vector<std::string> files;
    for (const char* ext : {".a3m", ".sto", ".m8"})
      for (const char* gz : {"", ".gz"}) {
        const fs::path p = fs::path(options.hits) / (e.name + "_" + e.chain_ids[c] + ext + gz);
        std::error_code ec;
        if (fs::exists(p, ec)) files.push_back(p.string());
      }
    if (files.empty()) continue;
    const std::string& file = files.front();
    if (files.size() > 1) {
      std::string others;
      for (size_t k = 1; k < files.size(); ++k) others += (k > 1 ? ", " : "") + files[k];
      warnings.push_back("templates: several hit lists for chain " + e.chain_ids[c] + ": " + file + " used, " + others +
                         " not");
    }
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) {  // a FIFO would block the reader
      warnings.push_back("templates not used: " + file + " is not a regular file");
      continue;
    }
    TemplateHits hits;
    try {
      hits = load_template_hits(file);
    } catch (const std::exception& ex) {
      warnings.push_back(std::string("templates not used: ") + ex.what());
      continue;
    }
    const TemplateCounts n = chain_templates(e, c, hits, file, options, structures, e.templates[c], warnings);
    total.read += n.read, total.kept += n.kept, total.self += n.self, total.released_later += n.released_later;
    total.short_hits += n.short_hits, total.duplicates += n.duplicates, total.unusable += n.unusable;
  }
  // An entry without any template stores none (as one built without hit lists).
  if (std::all_of(e.templates.begin(), e.templates.end(), [](const auto& t) { return t.empty(); })) e.templates.clear();
  return total;
}

ChainTemplate template_from_indices(const std::string& name, const TemplateStructure::Chain& chain, int64_t n_residues,
                                    const std::vector<int64_t>& query, const std::vector<int64_t>& templ,
                                    const std::string& field) {
  if (query.size() != templ.size())
    throw Error(field + ".templateIndices: " + std::to_string(templ.size()) + " indices, queryIndices has " +
                std::to_string(query.size()));
  ChainTemplate t;
  t.name = name;
  t.restype.assign(n_residues, static_cast<int8_t>(kGapToken));
  t.coords.assign(n_residues * kTemplateAtoms * 3, 0.f);
  t.mask.assign(n_residues * kTemplateAtoms, 0);
  for (size_t j = 0; j < query.size(); ++j) {
    const int64_t i = query[j], r = templ[j];
    std::string at = "[";  // appended, not "[" + ...: GCC 12 warns of a false overlap there (-Wrestrict)
    at += std::to_string(j);
    at += ']';
    if (i < 0 || i >= n_residues)
      throw Error(field + ".queryIndices" + at + ": " + std::to_string(i) + " is outside the chain's residues 0-" +
                  std::to_string(n_residues - 1));
    if (r < 0 || r >= chain.size())
      throw Error(field + ".templateIndices" + at + ": " + std::to_string(r) + " is outside the template's residues 0-" +
                  std::to_string(chain.size() - 1));
    if (t.restype[i] != kGapToken) throw Error(field + ".queryIndices" + at + ": residue " + std::to_string(i) + " is aligned twice");
    t.restype[i] = chain.restype[r];
    std::copy_n(chain.coords.begin() + r * kTemplateAtoms * 3, kTemplateAtoms * 3, t.coords.begin() + i * kTemplateAtoms * 3);
    std::copy_n(chain.mask.begin() + r * kTemplateAtoms, kTemplateAtoms, t.mask.begin() + i * kTemplateAtoms);
  }
  return t;
}

std::vector<int64_t> chain_residue_counts(const Entry& e) {
  std::vector<int64_t> count(e.n_chains(), 0);
  const std::vector<int64_t> column = chain_columns(e);
  for (int t = 0; t < e.n_tokens(); ++t) count[e.asym_id[t]] = std::max(count[e.asym_id[t]], column[t] + 1);
  return count;
}

std::vector<std::vector<int32_t>> select_templates(const Entry& e, const TemplateSampling& sampling) {
  MF_CHECK(sampling.max_templates >= 0, "template sampling: max_templates must be >= 0, got ", sampling.max_templates);
  std::vector<std::vector<int32_t>> out(e.n_chains());
  if (e.templates.empty()) return out;
  MF_CHECK(static_cast<int>(e.templates.size()) == e.n_chains(), e.name, ": templates for ", e.templates.size(),
           " chains, the entry has ", e.n_chains());
  for (int c = 0; c < e.n_chains(); ++c) {
    const int32_t n = static_cast<int32_t>(e.templates[c].size());
    const int32_t most = static_cast<int32_t>(std::min<int64_t>(sampling.max_templates, n));
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    int32_t k = most;
    if (sampling.random) {
      std::mt19937_64 rng(mix_seed(sampling.seed, static_cast<uint64_t>(c)));
      k = static_cast<int32_t>(rng() % static_cast<uint64_t>(most + 1));
      for (int32_t i = 0; i < k; ++i) std::swap(order[i], order[i + rng() % static_cast<uint64_t>(n - i)]);
      std::sort(order.begin(), order.begin() + k);
    }
    out[c].assign(order.begin(), order.begin() + k);
  }
  return out;
}

ChainTemplate template_columns(const ChainTemplate& t, const std::vector<int64_t>& columns) {
  ChainTemplate out;
  out.name = t.name;
  for (const int64_t i : columns) {
    out.restype.push_back(t.restype[i]);
    out.coords.insert(out.coords.end(), t.coords.begin() + i * kTemplateAtoms * 3, t.coords.begin() + (i + 1) * kTemplateAtoms * 3);
    out.mask.insert(out.mask.end(), t.mask.begin() + i * kTemplateAtoms, t.mask.begin() + (i + 1) * kTemplateAtoms);
  }
  return out;
}

}  // namespace megafold::data
