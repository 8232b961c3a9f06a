// AlphaFold 3 JSON input (af3_json.h). Field names and meanings follow AF3's input
// documentation (docs/input.md of its release); errors name the field as a JSON path.
#include "data/af3_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/check.h"
#include "data/msa.h"
#include "data/sequence_entry.h"
#include "data/templates.h"

namespace megafold::data {
namespace {

using nlohmann::json;

// What one polymer or ligand object reads, by its key in "sequences".
struct Kind {
  const char* key;
  MolType mol;
  std::vector<const char*> fields;  // the keys it may have
  const char* mod_code;             // modification keys: CCD code, 1-based position
  const char* mod_position;
};

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> k = {
      {"protein", MolType::kProtein,
       {"id", "sequence", "modifications", "unpairedMsa", "unpairedMsaPath", "pairedMsa", "pairedMsaPath", "templates",
        "description"},
       "ptmType", "ptmPosition"},
      {"rna", MolType::kRna, {"id", "sequence", "modifications", "unpairedMsa", "unpairedMsaPath", "description"},
       "modificationType", "basePosition"},
      {"dna", MolType::kDna, {"id", "sequence", "modifications", "description"}, "modificationType", "basePosition"},
      {"ligand", MolType::kLigand, {"id", "ccdCodes", "smiles", "description"}, nullptr, nullptr},
  };
  return k;
}

class Reader {
 public:
  Reader(std::string path, const Ccd* ccd) : path_(std::move(path)), ccd_(ccd) {}

  Af3Input read() {
    std::ifstream in(path_);
    if (!in) throw Error(path_ + ": cannot open AlphaFold 3 JSON file");
    json doc;
    try {
      doc = json::parse(in);
    } catch (const json::parse_error& ex) {
      throw Error(path_ + ": not JSON: " + ex.what());
    }
    if (!doc.is_object()) fail("(top level)", "expected an object");
    only(doc, {"name", "modelSeeds", "sequences", "bondedAtomPairs", "userCCD", "userCCDPath", "dialect", "version"}, "");
    const std::string dialect = string(need(doc, "dialect", ""), "dialect");
    if (dialect != "alphafold3")
      fail("dialect", "'" + dialect + "' is not read here; expected 'alphafold3' (AlphaFold Server jobs: convert them first)");
    const json& version = need(doc, "version", "");
    if (!version.is_number_integer() || version.get<int64_t>() < 1 || version.get<int64_t>() > 4)
      fail("version", "expected an integer from 1 to 4, got " + version.dump());
    Af3Input out;
    out.entry.path = path_;
    out.entry.name = file_name(string(need(doc, "name", ""), "name"));
    const json& seeds = need(doc, "modelSeeds", "");
    if (!seeds.is_array() || seeds.empty()) fail("modelSeeds", "expected a non-empty list of integers");
    for (size_t k = 0; k < seeds.size(); ++k) {
      if (!seeds[k].is_number_integer()) fail("modelSeeds[" + std::to_string(k) + "]", "expected an integer");
      out.seeds.push_back(seeds[k].get<int64_t>());
    }
    for (const char* unused : {"userCCD", "userCCDPath"})
      if (doc.contains(unused) && !doc[unused].is_null())
        warn(std::string(unused) + " is not used: components come from the CCD table only");
    const json& sequences = need(doc, "sequences", "");
    if (!sequences.is_array() || sequences.empty()) fail("sequences", "expected a non-empty list");
    Entry& e = out.entry;
    for (size_t k = 0; k < sequences.size(); ++k) entity(e, sequences[k], "sequences[" + std::to_string(k) + "]");
    if (doc.contains("bondedAtomPairs") && !doc["bondedAtomPairs"].is_null()) bonds(e, doc["bondedAtomPairs"]);
    if (!msas_.empty()) {
      e.msas.assign(e.n_chains(), Msa{});
      for (auto& [asym, msa] : msas_) e.msas[asym] = std::move(msa);
    }
    if (!templates_.empty()) {
      e.templates.assign(e.n_chains(), {});
      for (auto& [asym, list] : templates_) e.templates[asym] = std::move(list);
    }
    e.warnings.insert(e.warnings.end(), warnings_.begin(), warnings_.end());
    finish_sequence_entry(e, path_);
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(path_ + ": " + field + ": " + what);
  }
  void warn(const std::string& what) { warnings_.push_back(path_ + ": " + what); }

  const json& need(const json& obj, const char* key, const std::string& field) const {
    if (!obj.contains(key)) fail(field.empty() ? std::string(key) : field, field.empty() ? "missing" : std::string("missing '") + key + "'");
    return obj[key];
  }
  void only(const json& obj, const std::vector<const char*>& keys, const std::string& field) const {
    for (const auto& [key, value] : obj.items())
      if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; }))
        fail(field.empty() ? key : field + "." + key, "unknown field");
  }
  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }

  // AF3's output names (its sanitised_name): the job name in lower case, spaces as '_', other
  // characters outside [a-z0-9_-.] dropped.
  static std::string file_name(const std::string& name) {
    std::string out;
    for (const unsigned char c : name) {
      const char l = static_cast<char>(std::tolower(c));
      if (l == ' ')
        out.push_back('_');
      else if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '_' || l == '-' || l == '.')
        out.push_back(l);
    }
    return out.empty() ? "job" : out;
  }

  // One id or a non-empty list (copies); AF3 ids are upper-case letters, each used once.
  std::vector<std::string> ids(const json& v, const std::string& field) {
    std::vector<std::string> out;
    if (v.is_string()) {
      out.push_back(v.get<std::string>());
    } else if (v.is_array() && !v.empty()) {
      for (size_t k = 0; k < v.size(); ++k) out.push_back(string(v[k], field + "[" + std::to_string(k) + "]"));
    } else {
      fail(field, "expected a chain id or a non-empty list of chain ids");
    }
    for (const std::string& id : out) {
      if (id.empty() || !std::all_of(id.begin(), id.end(), [](unsigned char c) { return c >= 'A' && c <= 'Z'; }))
        fail(field, "chain id '" + id + "' is not upper-case letters");
      if (!used_ids_.insert(id).second) fail(field, "chain id '" + id + "' is used twice");
    }
    return out;
  }

  void entity(Entry& e, const json& item, const std::string& field) {
    if (!item.is_object() || item.size() != 1)
      fail(field, "expected an object with one of 'protein', 'rna', 'dna', 'ligand'");
    const auto& [key, body] = *item.items().begin();
    const auto kind = std::find_if(kinds().begin(), kinds().end(), [&](const Kind& k) { return key == k.key; });
    if (kind == kinds().end()) fail(field + "." + key, "unknown entity type (protein, rna, dna, ligand)");
    const std::string where = field + "." + key;
    if (!body.is_object()) fail(where, "expected an object");
    only(body, kind->fields, where);
    if (kind->mol == MolType::kLigand)
      ligand(e, body, where);
    else
      polymer(e, *kind, body, where);
  }

  void polymer(Entry& e, const Kind& kind, const json& body, const std::string& where) {
    const std::vector<std::string> chain_ids = ids(need(body, "id", where), where + ".id");
    const std::string sequence = string(need(body, "sequence", where), where + ".sequence");
    if (sequence.empty()) fail(where + ".sequence", "empty");
    std::vector<int8_t> types;
    for (size_t k = 0; k < sequence.size(); ++k) {
      const char c = sequence[k];
      const int t = kind.mol == MolType::kProtein ? amino_acid_of_letter(c) : nucleotide_of_letter(kind.mol, c);
      if (t < 0)
        fail(where + ".sequence", "'" + std::string(1, c) + "' at position " + std::to_string(k + 1) + " is not " +
                                      (kind.mol == MolType::kProtein ? "an amino-acid code" : std::string("a ") +
                                       (kind.mol == MolType::kDna ? "DNA" : "RNA") + " nucleotide code"));
      types.push_back(static_cast<int8_t>(t));
    }
    std::map<int32_t, std::string> modified;  // 1-based position -> CCD code
    if (body.contains("modifications") && !body["modifications"].is_null()) {
      const json& mods = body["modifications"];
      if (!mods.is_array()) fail(where + ".modifications", "expected a list");
      for (size_t k = 0; k < mods.size(); ++k) {
        const std::string f = where + ".modifications[" + std::to_string(k) + "]";
        if (!mods[k].is_object()) fail(f, "expected an object");
        only(mods[k], {kind.mod_code, kind.mod_position}, f);
        const std::string code = string(need(mods[k], kind.mod_code, f), f + "." + kind.mod_code);
        const json& pos = need(mods[k], kind.mod_position, f);
        if (!pos.is_number_integer() || pos.get<int64_t>() < 1 || pos.get<int64_t>() > static_cast<int64_t>(types.size()))
          fail(f + "." + kind.mod_position, "expected a position from 1 to " + std::to_string(types.size()) + ", got " + pos.dump());
        if (!modified.emplace(pos.get<int32_t>(), code).second)
          fail(f + "." + kind.mod_position, "position " + pos.dump() + " is modified twice");
      }
    }
    std::vector<int32_t> numbers(types.size());
    for (size_t k = 0; k < types.size(); ++k) numbers[k] = static_cast<int32_t>(k + 1);
    Msa msa = chain_msa(body, "unpairedMsa", kind.mol, types, numbers, where);
    // A given paired MSA (even an empty one) is the pairing, as in AF3; without one, rows are
    // paired by the species the unpaired MSAs' headers name.
    if (has(body, "pairedMsa") || has(body, "pairedMsaPath"))
      msa = with_paired_rows(chain_msa(body, "pairedMsa", kind.mol, types, numbers, where), msa);
    const std::vector<ChainTemplate> chain_templates =
        kind.mol == MolType::kProtein ? templates(body, static_cast<int64_t>(types.size()), where)
                                      : std::vector<ChainTemplate>{};
    for (const std::string& id : chain_ids) {
      const int asym = e.n_chains();
      for (size_t k = 0; k < types.size(); ++k) {
        const int32_t index = numbers[k];
        if (const auto mod = modified.find(index); mod != modified.end()) {
          if (const auto why = push_component(e, mod->second, asym, index, kind.mol, ccd_)) {
            warn(where + ": chain " + id + " residue " + std::to_string(index) + ": " + *why + "; kept as the standard " +
                 std::string(residue_name(types[k])));
            push_residue(e, types[k], asym, index);
          }
        } else {
          push_residue(e, types[k], asym, index);
        }
      }
      link_modified_residues(e, asym);
      e.chain_ids.push_back(id);
      if (msa.depth > 0) msas_.emplace_back(asym, msa);
      if (!chain_templates.empty()) templates_.emplace_back(asym, chain_templates);
    }
  }

  // A protein's "templates": each an mmCIF (text, "mmcif", or a file, "mmcifPath" relative to
  // the JSON file) holding one protein chain, and 0-based queryIndices / templateIndices pairing
  // the chain's residues with the template chain's (its full sequence, in order). The list is
  // the chain's whole template list, in the order given, unfiltered.
  std::vector<ChainTemplate> templates(const json& body, int64_t n_residues, const std::string& where) {
    std::vector<ChainTemplate> out;
    if (!has(body, "templates")) return out;
    const json& list = body["templates"];
    if (!list.is_array()) fail(where + ".templates", "expected a list");
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string f = where + ".templates[" + std::to_string(k) + "]";
      const json& item = list[k];
      if (!item.is_object()) fail(f, "expected an object");
      only(item, {"mmcif", "mmcifPath", "queryIndices", "templateIndices"}, f);
      const bool text = has(item, "mmcif"), file = has(item, "mmcifPath");
      if (text == file) fail(f, "give exactly one of 'mmcif' and 'mmcifPath'");
      TemplateStructure st;
      std::string field;
      try {
        if (text) {
          field = f + ".mmcif";
          st = parse_template_structure(string(item["mmcif"], field), path_ + ": " + field);
        } else {
          field = f + ".mmcifPath";
          std::filesystem::path p = string(item["mmcifPath"], field);
          if (p.is_relative()) p = std::filesystem::path(path_).parent_path() / p;
          if (!std::filesystem::is_regular_file(p)) fail(field, "no file " + p.string());
          st = read_template_structure(p.string());
        }
      } catch (const Error& ex) {
        const std::string what = ex.what();
        if (what.rfind(path_ + ": ", 0) == 0) throw;  // named already
        fail(field, what);
      }
      if (st.chains.size() != 1)
        fail(field, "expected an mmCIF of one protein chain, found " + std::to_string(st.chains.size()));
      const std::vector<int64_t> query = indices(need(item, "queryIndices", f), f + ".queryIndices");
      const std::vector<int64_t> templ = indices(need(item, "templateIndices", f), f + ".templateIndices");
      const TemplateStructure::Chain& chain = st.chains.front();
      try {
        out.push_back(template_from_indices((st.id.empty() ? "template" : st.id) + "_" + chain.author_id, chain,
                                            n_residues, query, templ, f));
      } catch (const Error& ex) {
        throw Error(path_ + ": " + ex.what());
      }
    }
    return out;
  }

  std::vector<int64_t> indices(const json& v, const std::string& field) const {
    if (!v.is_array()) fail(field, "expected a list of 0-based residue indices");
    std::vector<int64_t> out;
    for (size_t k = 0; k < v.size(); ++k) {
      if (!v[k].is_number_integer()) fail(field + "[" + std::to_string(k) + "]", "expected an integer, got " + v[k].dump());
      out.push_back(v[k].get<int64_t>());
    }
    return out;
  }

  static bool has(const json& body, const std::string& key) { return body.contains(key) && !body[key].is_null(); }

  // One of the chain's MSAs (field "unpairedMsa" or "pairedMsa"): a3m text (<field>) or a file
  // (<field>Path, relative to the JSON file); single-sequence when absent or empty.
  Msa chain_msa(const json& body, const std::string& field, MolType mol, const std::vector<int8_t>& types,
                const std::vector<int32_t>& numbers, const std::string& where) {
    if (mol == MolType::kDna) return {};
    const std::string path_field = field + "Path";
    const bool text = has(body, field), file = has(body, path_field);
    if (text && file) fail(where, "give " + field + " or " + path_field + ", not both");
    Msa raw;
    std::string origin;
    if (text) {
      origin = path_ + ": " + where + "." + field;
      raw = parse_a3m(string(body[field], where + "." + field), origin, mol);
    } else if (file) {
      std::filesystem::path p = string(body[path_field], where + "." + path_field);
      if (p.is_relative()) p = std::filesystem::path(path_).parent_path() / p;
      origin = p.string();
      raw = load_a3m(origin, mol);
    }
    if (raw.depth == 0) return {};
    return msa_for_chain(raw, types, numbers, origin);
  }

  void ligand(Entry& e, const json& body, const std::string& where) {
    const std::vector<std::string> chain_ids = ids(need(body, "id", where), where + ".id");
    const bool ccd = body.contains("ccdCodes"), smiles = body.contains("smiles");
    if (ccd == smiles) fail(where, "give exactly one of 'ccdCodes' and 'smiles'");
    std::vector<std::string> codes;
    if (ccd) {
      const json& list = body["ccdCodes"];
      if (!list.is_array() || list.empty()) fail(where + ".ccdCodes", "expected a non-empty list of CCD codes");
      for (size_t k = 0; k < list.size(); ++k) codes.push_back(string(list[k], where + ".ccdCodes[" + std::to_string(k) + "]"));
    }
    const std::string text = smiles ? string(body["smiles"], where + ".smiles") : std::string();
    if (smiles && text.empty()) fail(where + ".smiles", "empty");
    for (const std::string& id : chain_ids) {
      const int asym = e.n_chains();
      const int before = e.n_tokens();
      if (smiles) {
        try {
          push_smiles(e, text, asym);
        } catch (const Error& ex) {
          warn(where + ": chain " + id + " SMILES '" + text + "': " + ex.what() + "; skipped");
        }
      } else {
        // Residues keep their place in the list (1-based), so bondedAtomPairs can name them.
        for (size_t r = 0; r < codes.size(); ++r)
          if (const auto why = push_component(e, codes[r], asym, static_cast<int32_t>(r + 1), MolType::kLigand, ccd_))
            warn(where + ": chain " + id + " " + *why + "; skipped");
      }
      if (e.n_tokens() > before) {
        e.chain_ids.push_back(id);
      } else {
        warn(where + ": chain " + id + " has no atoms left; skipped");
        skipped_ids_.insert(id);
      }
    }
  }

  // bondedAtomPairs: [[chain id, residue (1-based), atom name], [...]] per bond.
  void bonds(Entry& e, const json& pairs) {
    if (!pairs.is_array()) fail("bondedAtomPairs", "expected a list of atom pairs");
    for (size_t k = 0; k < pairs.size(); ++k) {
      const std::string f = "bondedAtomPairs[" + std::to_string(k) + "]";
      if (!pairs[k].is_array() || pairs[k].size() != 2) fail(f, "expected two atoms");
      std::pair<int, int> ends[2];
      bool skipped = false;
      for (int s = 0; s < 2; ++s) {
        const std::string g = f + "[" + std::to_string(s) + "]";
        const json& a = pairs[k][s];
        if (!a.is_array() || a.size() != 3 || !a[0].is_string() || !a[1].is_number_integer() || !a[2].is_string())
          fail(g, "expected [chain id, residue number, atom name]");
        const std::string id = a[0].get<std::string>(), name = a[2].get<std::string>();
        const int32_t residue = a[1].get<int32_t>();
        if (skipped_ids_.count(id)) {
          skipped = true;
          break;
        }
        const auto chain = std::find(e.chain_ids.begin(), e.chain_ids.end(), id);
        if (chain == e.chain_ids.end()) fail(g, "no chain '" + id + "' in sequences");
        const auto atom = find_atom(e, static_cast<int>(chain - e.chain_ids.begin()), residue, name);
        if (!atom) fail(g, "chain " + id + " residue " + std::to_string(residue) + " has no atom '" + name + "'");
        ends[s] = *atom;
      }
      if (skipped) {
        warn(f + ": a bond to a skipped chain; left out");
        continue;
      }
      if (ends[0].first > ends[1].first) std::swap(ends[0], ends[1]);
      if (ends[0].first == ends[1].first) fail(f, "both atoms are in one token");
      e.bonds.push_back({ends[0].first, ends[1].first, static_cast<int8_t>(ends[0].second),
                         static_cast<int8_t>(ends[1].second)});
    }
  }

  std::string path_;
  const Ccd* ccd_;
  std::set<std::string> used_ids_, skipped_ids_;
  std::vector<std::pair<int, Msa>> msas_;
  std::vector<std::pair<int, std::vector<ChainTemplate>>> templates_;
  std::vector<std::string> warnings_;
};

}  // namespace

bool is_json_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".json";
}

Af3Input load_af3_json(const std::string& path) {
  std::string why;
  const Ccd* ccd = usable_default_ccd(&why);  // only ligands and modified residues need it
  Af3Input in = load_af3_json(path, ccd);
  if (!why.empty()) in.entry.warnings.insert(in.entry.warnings.begin(), why + "; ligands and modifications skipped");
  return in;
}

Af3Input load_af3_json(const std::string& path, const Ccd* ccd) { return Reader(path, ccd).read(); }

}  // namespace megafold::data
