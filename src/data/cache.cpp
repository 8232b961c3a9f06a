#include "data/cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/files.h"
#include "core/seed.h"
#include "data/ccd.h"
#include "data/dataset.h"
#include "data/elements.h"
#include "data/sampling.h"

namespace megafold::data {
namespace fs = std::filesystem;
namespace {

// Entry file: magic (8 bytes), version (u32), CRC-32 of the payload (u32), payload size (u64),
// payload. Numbers are little-endian (the hosts we run on); arrays are stored contiguously.
constexpr char kMagic[8] = {'M', 'F', 'E', 'N', 'T', 'R', 'Y', '\0'};
constexpr size_t kHeader = 8 + 4 + 4 + 8;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void put(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.append(s);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  Reader(const unsigned char* p, size_t n, const std::string& origin) : p_(p), end_(p + n), origin_(origin) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> vec(uint64_t expected) {
    const uint64_t n = get<uint64_t>();
    if (n != expected)
      throw Error(origin_ + ": corrupt cache entry (an array holds " + std::to_string(n) + " values, " +
                  std::to_string(expected) + " expected); rebuild it with megafold cache");
    return raw<T>(n);
  }
  // An array whose length the file states (checked against the remaining bytes).
  template <typename T>
  std::vector<T> raw(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_) / sizeof(T))
      throw Error(origin_ + ": truncated cache entry; rebuild it with megafold cache");
    std::vector<T> v(n);
    std::memcpy(v.data(), p_, n * sizeof(T));
    p_ += n * sizeof(T);
    return v;
  }
  // The length of the next array without consuming it.
  uint64_t peek_count() const {
    need(sizeof(uint64_t));
    uint64_t n;
    std::memcpy(&n, p_, sizeof n);
    return n;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(uint64_t n) const {
    if (n > static_cast<uint64_t>(end_ - p_))
      throw Error(origin_ + ": truncated cache entry; rebuild it with megafold cache");
  }
  const unsigned char* p_;
  const unsigned char* end_;
  std::string origin_;
};

uint32_t crc_of(const unsigned char* p, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string entry_file_name(const std::string& name) { return name + ".mfe"; }

// Atom slots token i stores: its residue's layout, or slot 0 of a per-atom token. Entry files
// keep only these (a protein token averages ~8 of the 24 slots).
int stored_slots(const Entry& e, int i) { return e.per_atom(i) ? 1 : atom_count(e.restype[i]); }

int64_t msa_rows(const Entry& e) {
  int64_t rows = 0;
  for (const Msa& m : e.msas) rows += m.depth;
  return rows;
}

int64_t template_count(const Entry& e) {
  int64_t n = 0;
  for (const auto& chain : e.templates) n += static_cast<int64_t>(chain.size());
  return n;
}

}  // namespace

std::string encode_entry(const Entry& e) {
  const uint64_t n = e.restype.size(), chains = e.chain_ids.size();
  MF_CHECK(e.msas.empty() || e.msas.size() == chains, e.name, ": ", e.msas.size(), " MSAs for ", chains, " chains");
  MF_CHECK(e.templates.empty() || e.templates.size() == chains, e.name, ": templates for ", e.templates.size(), " of ",
           chains, " chains");
  Writer w;
  w.put(e.name);
  w.put(e.path);
  w.put<uint64_t>(n);
  w.put<uint64_t>(chains);
  w.put(e.restype);
  w.put(e.mol_type);
  w.put(e.residue_index);
  w.put(e.author_index);
  w.put(std::vector<char>(e.insertion_codes.begin(), e.insertion_codes.end()));
  w.put(e.asym_id);
  w.put(e.entity_id);
  w.put(e.sym_id);
  std::vector<float> coords;
  std::vector<uint8_t> mask;
  for (int i = 0; i < e.n_tokens(); ++i) {
    const size_t k = static_cast<size_t>(i) * kMaxAtomsPerToken;
    const int slots = stored_slots(e, i);
    coords.insert(coords.end(), e.coords.begin() + 3 * k, e.coords.begin() + 3 * (k + slots));
    mask.insert(mask.end(), e.atom_mask.begin() + k, e.atom_mask.begin() + k + slots);
  }
  w.put(coords);
  w.put(mask);
  w.put(e.component);
  w.put<uint64_t>(e.components.size());
  for (const std::string& c : e.components) w.put(c);
  std::vector<TokenAtom> atoms;  // of the per-atom tokens only
  for (int i = 0; i < e.n_tokens(); ++i)
    if (e.per_atom(i)) atoms.push_back(e.token_atoms[i]);
  w.put(atoms);
  w.put(e.bonds);
  for (const std::string& c : e.chain_ids) w.put(c);
  w.put<uint64_t>(e.msas.size());
  for (const Msa& m : e.msas) {
    w.put<int64_t>(m.depth);
    w.put<int64_t>(m.length);
    w.put(m.tokens);
    w.put(m.deletions);
    w.put<uint8_t>(m.species.empty() ? 0 : 1);
    if (!m.species.empty()) w.put(m.species);
    w.put<uint8_t>(m.profile.empty() ? 0 : 1);
    if (!m.profile.empty()) {
      w.put(m.profile);
      w.put(m.deletion_mean);
    }
  }
  // Templates: per chain a count, then per template its name and its residue arrays (each
  // template spans its chain's residues, which the decoder counts from the tokens: checked
  // here, so that a wrong length names the entry now rather than a damaged file later).
  w.put<uint64_t>(e.templates.size());
  const std::vector<int64_t> residues = e.templates.empty() ? std::vector<int64_t>{} : chain_residue_counts(e);
  for (size_t c = 0; c < e.templates.size(); ++c) {
    const std::vector<ChainTemplate>& chain = e.templates[c];
    w.put<uint64_t>(chain.size());
    for (const ChainTemplate& t : chain) {
      MF_CHECK(t.size() == residues[c] && t.coords.size() == t.restype.size() * kTemplateAtoms * 3 &&
                   t.mask.size() == t.restype.size() * kTemplateAtoms,
               e.name, ": template ", t.name, " of chain ", e.chain_ids[c], " spans ", t.size(), " residues, the chain has ",
               residues[c]);
      w.put(t.name);
      w.put(t.restype);
      w.put(t.coords);
      w.put(t.mask);
    }
  }
  w.put<int32_t>(e.dropped_residues);
  w.put<int32_t>(e.dropped_hydrogens);
  const std::string& payload = w.bytes();
  Writer head;
  for (char c : kMagic) head.put(c);
  head.put<uint32_t>(kCacheVersion);
  head.put<uint32_t>(crc_of(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()));
  head.put<uint64_t>(payload.size());
  return head.bytes() + payload;
}

Entry decode_entry(const unsigned char* data, size_t size, const std::string& origin) {
  if (size < kHeader || std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    throw Error(origin + ": not a megafold cache entry (bad magic or shorter than its header)");
  Reader head(data + 8, kHeader - 8, origin);
  const auto version = head.get<uint32_t>();
  const auto crc = head.get<uint32_t>();
  const auto bytes = head.get<uint64_t>();
  if (version != kCacheVersion)
    throw Error(origin + ": cache entry version " + std::to_string(version) + ", this build reads version " +
                std::to_string(kCacheVersion) + "; rebuild the cache with megafold cache");
  if (bytes != size - kHeader)
    throw Error(origin + ": truncated cache entry (" + std::to_string(size - kHeader) + " payload bytes of " +
                std::to_string(bytes) + "); rebuild it with megafold cache");
  if (crc_of(data + kHeader, bytes) != crc)
    throw Error(origin + ": cache entry checksum mismatch (corrupted file); rebuild it with megafold cache");
  Reader r(data + kHeader, bytes, origin);
  Entry e;
  e.name = r.str();
  e.path = r.str();
  const auto n = r.get<uint64_t>(), chains = r.get<uint64_t>();
  e.restype = r.vec<int8_t>(n);
  e.mol_type = r.vec<int8_t>(n);
  e.residue_index = r.vec<int32_t>(n);
  e.author_index = r.vec<int32_t>(n);
  const auto icodes = r.vec<char>(n);
  e.insertion_codes.assign(icodes.begin(), icodes.end());
  e.asym_id = r.vec<int32_t>(n);
  e.entity_id = r.vec<int32_t>(n);
  e.sym_id = r.vec<int32_t>(n);
  const uint64_t n_coords = r.get<uint64_t>();
  const std::vector<float> coords = r.raw<float>(n_coords);
  const std::vector<uint8_t> mask = r.vec<uint8_t>(n_coords / 3);
  e.component = r.vec<int32_t>(n);
  const auto n_components = r.get<uint64_t>();
  for (uint64_t c = 0; c < n_components; ++c) e.components.push_back(r.str());
  int64_t per_atom = 0;
  for (const int32_t c : e.component) {
    if (c >= static_cast<int64_t>(n_components)) throw Error(origin + ": corrupt cache entry (component index)");
    per_atom += c >= 0;
  }
  const std::vector<TokenAtom> atoms = r.vec<TokenAtom>(per_atom);
  e.bonds = r.vec<Bond>(r.peek_count());
  for (const Bond& b : e.bonds)
    if (b.i < 0 || b.j >= static_cast<int64_t>(n) || b.i >= b.j || b.slot_i < 0 || b.slot_i >= kMaxAtomsPerToken ||
        b.slot_j < 0 || b.slot_j >= kMaxAtomsPerToken)
      throw Error(origin + ": corrupt cache entry (bond)");
  // Back to the dense layout.
  e.coords.assign(n * kMaxAtomsPerToken * 3, 0.f);
  e.atom_mask.assign(n * kMaxAtomsPerToken, 0);
  e.token_atoms.assign(n, TokenAtom{});
  size_t at = 0, next_atom = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (e.restype[i] < 0 || e.restype[i] >= kNumResidueTypes) throw Error(origin + ": corrupt cache entry (token type)");
    const int slots = stored_slots(e, static_cast<int>(i));
    if (3 * (at + slots) > coords.size()) throw Error(origin + ": corrupt cache entry (atom count)");
    std::copy_n(coords.begin() + 3 * at, 3 * slots, e.coords.begin() + 3 * i * kMaxAtomsPerToken);
    std::copy_n(mask.begin() + at, slots, e.atom_mask.begin() + i * kMaxAtomsPerToken);
    if (e.per_atom(static_cast<int>(i))) {
      e.token_atoms[i] = atoms[next_atom++];
      if (e.token_atoms[i].element > kMaxElement) throw Error(origin + ": corrupt cache entry (atomic number)");
    }
    at += slots;
  }
  if (3 * at != coords.size()) throw Error(origin + ": corrupt cache entry (atom count)");
  for (const Bond& b : e.bonds)
    if (b.slot_i >= stored_slots(e, b.i) || b.slot_j >= stored_slots(e, b.j))
      throw Error(origin + ": corrupt cache entry (a bond to an atom slot its token does not have)");
  for (uint64_t c = 0; c < chains; ++c) e.chain_ids.push_back(r.str());
  const auto msas = r.get<uint64_t>();
  if (msas != 0 && msas != chains) throw Error(origin + ": corrupt cache entry (MSA count)");
  for (uint64_t c = 0; c < msas; ++c) {
    Msa m;
    m.depth = r.get<int64_t>();
    m.length = r.get<int64_t>();
    m.tokens = r.vec<int8_t>(m.depth * m.length);
    m.deletions = r.vec<uint8_t>(m.depth * m.length);
    if (r.get<uint8_t>() != 0) m.species = r.vec<uint64_t>(m.depth);
    if (r.get<uint8_t>() != 0) {
      m.profile = r.vec<float>(m.length * kNumTokenTypes);
      m.deletion_mean = r.vec<float>(m.length);
    }
    e.msas.push_back(std::move(m));
  }
  const auto template_chains = r.get<uint64_t>();
  if (template_chains != 0 && template_chains != chains) throw Error(origin + ": corrupt cache entry (template chain count)");
  if (template_chains != 0) {
    for (const int32_t a : e.asym_id)
      if (a < 0 || a >= static_cast<int64_t>(chains)) throw Error(origin + ": corrupt cache entry (chain number)");
    const std::vector<int64_t> residues = chain_residue_counts(e);
    for (uint64_t c = 0; c < template_chains; ++c) {
      const auto count = r.get<uint64_t>();
      std::vector<ChainTemplate> list;
      for (uint64_t k = 0; k < count; ++k) {
        ChainTemplate t;
        t.name = r.str();
        const auto n_res = static_cast<uint64_t>(residues[c]);
        t.restype = r.vec<int8_t>(n_res);
        t.coords = r.vec<float>(n_res * kTemplateAtoms * 3);
        t.mask = r.vec<uint8_t>(n_res * kTemplateAtoms);
        for (const int8_t x : t.restype)
          if (x != kGapToken && (x < 0 || x > kUnknownAminoAcid)) throw Error(origin + ": corrupt cache entry (template residue type)");
        list.push_back(std::move(t));
      }
      e.templates.push_back(std::move(list));
    }
  }
  e.dropped_residues = r.get<int32_t>();
  e.dropped_hydrogens = r.get<int32_t>();
  if (!r.done()) throw Error(origin + ": corrupt cache entry (trailing bytes)");
  return e;
}

Entry read_entry_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open cache entry: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(path + ": cannot stat cache entry");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw Error(path + ": empty cache entry; rebuild it with megafold cache");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw Error(path + ": cannot map cache entry: " + std::strerror(errno));
  try {
    Entry e = decode_entry(static_cast<const unsigned char*>(map), size, path);
    ::munmap(map, size);
    return e;
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
}

bool is_cache_dir(const std::string& dir) { return fs::is_regular_file(fs::path(dir) / "index.tsv"); }

namespace {

// What happened to one input.
struct Outcome {
  std::string name, file, source, error;  // error: why the input was skipped ("" = cached)
  std::vector<std::string> warnings;      // MSAs that could not be used
  bool reused = false;
  std::string inputs;  // the key of what the entry was built from (input_key)
  uint64_t bytes = 0;
  uint32_t crc = 0;
  int64_t tokens = 0, chains = 0, msa_rows = 0, templates = 0;
  EntryUnits units;  // AF3 sampling units, for units.tsv
};

// A reason as one row of skipped.tsv: tabs and line breaks (gemmi's messages span lines)
// become spaces.
std::string one_line(std::string why) {
  std::replace_if(why.begin(), why.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  return why;
}

// The CCD table's source and size, or "no CCD" (a malformed table counts as none).
std::string ccd_identity() {
  const Ccd* c = usable_default_ccd(nullptr);
  return c ? c->source() + ":" + std::to_string(c->size()) : "no CCD";
}

// What an entry is built from, as one key: the source file's bytes, each of its MSA files' and
// template hit lists' names and bytes, and the template options (the mmCIF directory, the date
// filter). An entry is reused only when its key is the one its index row records, so a changed
// source, a new, changed or removed MSA or hit list, or other template options rebuild it.
std::string input_key(const std::string& source, const std::vector<std::string>& msa_files,
                      const std::vector<std::string>& template_files, const TemplateOptions& templates) {
  uint32_t crc = file_crc32(source);
  // Which CCD table parsed it (ligands and modified residues come from it; none: skipped), so
  // an entry built without the table, or with another, is rebuilt once a table is there.
  const std::string ccd = ccd_identity();
  crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(ccd.data()), static_cast<uInt>(ccd.size())));
  auto add_text = [&](const std::string& text) {
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
  };
  for (const std::string& f : msa_files) {
    add_text(fs::path(f).filename().string());
    crc = file_crc32(f, crc);
  }
  if (!templates.hits.empty()) {  // entries built without templates keep the key they had
    add_text("templates:" + templates.mmcif + "|" + templates.max_release_date);
    for (const std::string& f : template_files) {
      add_text(fs::path(f).filename().string());
      crc = file_crc32(f, crc);
    }
  }
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", crc);
  return text;
}

// Files of each entry name in `dir` named <entry>_<chain><ext> for one of `exts`, sorted: the
// MSAs (.a3m[.gz]) or template hit lists (.a3m, .sto, .m8, each optionally .gz).
std::map<std::string, std::vector<std::string>> files_by_entry(const std::string& dir,
                                                               const std::vector<const char*>& exts) {
  std::map<std::string, std::vector<std::string>> out;
  if (dir.empty()) return out;
  for (const auto& it : fs::directory_iterator(dir)) {
    std::string stem = it.path().filename().string();
    for (const char* ext : exts)
      if (stem.size() > std::strlen(ext) && stem.compare(stem.size() - std::strlen(ext), std::strlen(ext), ext) == 0) {
        stem.resize(stem.size() - std::strlen(ext));
        const auto cut = stem.rfind('_');
        if (cut != std::string::npos && cut > 0) out[stem.substr(0, cut)].push_back(it.path().string());
        break;
      }
  }
  for (auto& [name, files] : out) std::sort(files.begin(), files.end());
  return out;
}

// `previous`: the inputs key the existing index records for this name ("" if none).
Outcome cache_one(const std::string& path, const std::string& name, const CacheOptions& opts,
                  const std::vector<std::string>& msa_files, const std::vector<std::string>& template_files,
                  const std::string& previous, TemplateStructureCache& structures) {
  Outcome o;
  o.name = name;
  o.source = path;
  o.file = entry_file_name(name);
  try {
    o.inputs = input_key(path, msa_files, template_files, opts.templates);
  } catch (const std::exception& ex) {
    o.error = ex.what();
    return o;
  }
  const std::string target = (fs::path(opts.out) / "entries" / o.file).string();
  auto record = [&](const Entry& e, const std::string& bytes) {
    o.tokens = e.n_tokens();
    o.chains = e.n_chains();
    o.msa_rows = msa_rows(e);
    o.templates = template_count(e);
    o.units = entry_units(e);
    o.bytes = bytes.size();
    o.crc = crc_of(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  };
  if (fs::exists(target) && !previous.empty() && previous == o.inputs) {
    // Read once: the same bytes are checked (decoded) and summed for the index.
    std::ifstream in(target, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), {}};
    try {
      const Entry e = decode_entry(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), target);
      MF_CHECK(e.name == name, target, " holds entry '", e.name, "'");
      record(e, bytes);
      o.reused = true;
      return o;
    } catch (const std::exception&) {
      // invalid, from another version or another entry: rebuilt below
    }
  }
  try {
    Entry e = load_entry(path);
    for (const std::string& w : e.warnings)  // the row names the source already
      o.warnings.push_back(w.rfind(path + ": ", 0) == 0 ? w.substr(path.size() + 2) : w);
    e.name = name;
    attach_msas(e, opts.msa, o.warnings);
    attach_templates(e, opts.templates, o.warnings, &structures);
    const std::string bytes = encode_entry(e);
    write_file_atomically(target, bytes);
    record(e, bytes);
  } catch (const std::exception& ex) {
    o.error = ex.what();
  }
  return o;
}

}  // namespace

CacheSummary write_synthetic_cache(const std::vector<Entry>& sources, int64_t count, int64_t msa_rows_per_chain,
                                   const std::string& out) {
  MF_CHECK(!sources.empty() && count > 0 && msa_rows_per_chain >= 1, "synthetic cache: sources, a count and >= 1 MSA row");
  const auto t0 = std::chrono::steady_clock::now();
  fs::create_directories(fs::path(out) / "entries");
  std::ostringstream index;
  index << "# megafold feature cache v" << kCacheVersion
        << "\nname\tfile\tbytes\tcrc32\ttokens\tchains\tmsa_rows\tsource\tinputs\n";
  std::ostringstream units;
  units << units_tsv_header();
  std::vector<EntryUnits> source_units;  // entry i's are those of its source
  for (const Entry& e : sources) source_units.push_back(entry_units(e));
  CacheSummary s;
  const int width = static_cast<int>(std::to_string(count - 1).size());
  for (int64_t i = 0; i < count; ++i) {
    Entry e = sources[static_cast<size_t>(i) % sources.size()];
    const std::string source = e.path;
    std::string id = std::to_string(i);
    e.name = "x" + std::string(static_cast<size_t>(width) - id.size(), '0') + id;
    std::mt19937_64 rng(mix_seed(0x73796e, static_cast<uint64_t>(i)));
    e.msas.assign(e.n_chains(), Msa{});
    for (int c = 0; c < e.n_chains(); ++c) {
      Msa& m = e.msas[c];
      for (int t = 0; t < e.n_tokens(); ++t)
        if (e.asym_id[t] == c) m.tokens.push_back(e.restype[t]), ++m.length;
      m.depth = msa_rows_per_chain;
      m.deletions.assign(m.depth * m.length, 0);
      for (int64_t x = m.length; x < m.depth * m.length; ++x) {
        m.tokens.push_back(static_cast<int8_t>(rng() % 21));
        m.deletions[x] = static_cast<uint8_t>(rng() % 4 == 0 ? rng() % 3 : 0);
      }
      MsaProfile p = msa_profile(m);
      m.profile = std::move(p.profile);
      m.deletion_mean = std::move(p.deletion_mean);
    }
    const std::string bytes = encode_entry(e);
    const std::string file = entry_file_name(e.name);
    write_file_atomically((fs::path(out) / "entries" / file).string(), bytes);
    const uint32_t crc = crc_of(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    index << e.name << "\t" << file << "\t" << bytes.size() << "\t" << crc << "\t" << e.n_tokens() << "\t"
          << e.n_chains() << "\t" << msa_rows(e) << "\t" << source << "\tsynthetic\n";
    units << units_tsv_rows(e.name, crc, source_units[static_cast<size_t>(i) % sources.size()]);
    ++s.entries, ++s.built;
    s.tokens += e.n_tokens(), s.chains += e.n_chains(), s.msa_rows += msa_rows(e);
    s.bytes += static_cast<int64_t>(bytes.size());
  }
  write_file_atomically((fs::path(out) / "skipped.tsv").string(), "source\treason\n");
  write_file_atomically((fs::path(out) / kUnitsFile).string(), units.str());
  write_file_atomically((fs::path(out) / "index.tsv").string(), index.str());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

CacheSummary build_cache(const CacheOptions& opts, const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> passed_over;
  const std::vector<std::string> paths = list_structure_files(opts.input, &passed_over);
  MF_CHECK(opts.msa.empty() || fs::is_directory(opts.msa), "MSA directory '", opts.msa, "' does not exist");
  const TemplateOptions& tpl = opts.templates;
  MF_CHECK(tpl.hits.empty() || fs::is_directory(tpl.hits), "template hit directory '", tpl.hits, "' does not exist");
  MF_CHECK(tpl.hits.empty() || fs::is_directory(tpl.mmcif), "template mmCIF directory '", tpl.mmcif,
           "' does not exist (template hits need the structures they name)");
  // An MSA directory read as hit lists would make every MSA row a template hit.
  MF_CHECK(tpl.hits.empty() || opts.msa.empty() || !fs::equivalent(tpl.hits, opts.msa),
           "the template hit directory and the MSA directory are one ('", tpl.hits, "'): keep hit lists apart");
  MF_CHECK(tpl.max_release_date.empty() || is_release_date(tpl.max_release_date), "maximum template release date '",
           tpl.max_release_date, "' is not YYYY-MM-DD");
  fs::create_directories(fs::path(opts.out) / "entries");
  // Names are decided up front, in path order: a later file with the same name is skipped.
  std::vector<std::string> names(paths.size());
  std::map<std::string, size_t> first;
  std::vector<Outcome> outcomes(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    names[i] = entry_name(paths[i]);
    auto [it, inserted] = first.emplace(names[i], i);
    if (inserted) continue;
    outcomes[i].name = names[i];
    outcomes[i].source = paths[i];
    outcomes[i].error = "duplicate entry name '" + names[i] + "' (also " + paths[it->second] + ")";
  }
  // What the existing index says each entry was built from (an index without the column, or
  // no index, rebuilds everything).
  std::map<std::string, std::string> previous;
  if (is_cache_dir(opts.out))
    for (const CacheIndexRow& row : read_cache_index(opts.out)) previous[row.name] = row.inputs;
  const auto msa_files = files_by_entry(opts.msa, {".a3m.gz", ".a3m"});
  const auto template_files =
      files_by_entry(tpl.hits, {".a3m.gz", ".a3m", ".sto.gz", ".sto", ".m8.gz", ".m8"});
  const std::vector<std::string> no_files;
  const int jobs = opts.jobs > 0 ? opts.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex progress_mutex;
  TemplateStructureCache structures;  // shared: a template many entries' hits name is read once
  auto worker = [&] {
    for (size_t i = next++; i < paths.size(); i = next++) {
      if (outcomes[i].error.empty()) {
        const auto m = msa_files.find(names[i]);
        const auto t = template_files.find(names[i]);
        const auto p = previous.find(names[i]);
        outcomes[i] = cache_one(paths[i], names[i], opts, m == msa_files.end() ? no_files : m->second,
                                t == template_files.end() ? no_files : t->second,
                                p == previous.end() ? std::string() : p->second, structures);
      }
      const int64_t d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(d, static_cast<int64_t>(paths.size()));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < std::min<int>(jobs, static_cast<int>(std::max<size_t>(paths.size(), 1))); ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();

  CacheSummary s;
  std::vector<const Outcome*> cached;
  std::ostringstream skipped;
  skipped << "source\treason\n";
  for (const std::string& why : passed_over) {
    skipped << opts.input << "\t" << one_line(why) << "\n";
    std::cerr << "warning: " << one_line(why) << "\n";
    ++s.skipped;
  }
  for (const Outcome& o : outcomes) {
    for (const std::string& w : o.warnings) {
      skipped << o.source << "\t" << one_line(w) << "\n";
      std::cerr << "warning: " << o.source << ": " << one_line(w) << "\n";
      ++s.warnings;
    }
    if (!o.error.empty()) {
      skipped << o.source << "\t" << one_line(o.error) << "\n";
      ++s.skipped;
      continue;
    }
    cached.push_back(&o);
  }
  std::ostringstream index, units;
  index << "# megafold feature cache v" << kCacheVersion
        << "\nname\tfile\tbytes\tcrc32\ttokens\tchains\tmsa_rows\tsource\tinputs\n";
  units << units_tsv_header();
  for (const Outcome* o : cached) {
    index << o->name << "\t" << o->file << "\t" << o->bytes << "\t" << o->crc << "\t" << o->tokens << "\t" << o->chains
          << "\t" << o->msa_rows << "\t" << o->source << "\t" << o->inputs << "\n";
    units << units_tsv_rows(o->name, o->crc, o->units);
    ++s.entries;
    (o->reused ? s.reused : s.built) += 1;
    s.tokens += o->tokens;
    s.chains += o->chains;
    s.msa_rows += o->msa_rows;
    s.templates += o->templates;
    s.bytes += static_cast<int64_t>(o->bytes);
  }
  write_file_atomically((fs::path(opts.out) / "skipped.tsv").string(), skipped.str());
  write_file_atomically((fs::path(opts.out) / kUnitsFile).string(), units.str());
  write_file_atomically((fs::path(opts.out) / "index.tsv").string(), index.str());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

std::vector<CacheIndexRow> read_cache_index(const std::string& dir) {
  const std::string index_path = (fs::path(dir) / "index.tsv").string();
  std::ifstream in(index_path);
  MF_CHECK(in.good(), index_path, ": cannot read the cache index");
  std::vector<CacheIndexRow> rows;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty() || line[0] == '#' || line.rfind("name\t", 0) == 0) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, '\t');) f.push_back(x);
    // Indexes written before the inputs column have 8 fields (their entries are rebuilt by a
    // rerun of megafold cache, and read as they are).
    MF_CHECK(f.size() == 8 || f.size() == 9, index_path, ":", line_no, ": expected 9 tab-separated fields, got ",
             f.size());
    rows.push_back({f[0], (fs::path(dir) / "entries" / f[1]).string(), f[2], f.size() == 9 ? f[8] : std::string(), f[3]});
  }
  return rows;
}

CacheEntries read_cache(const std::string& dir) {
  CacheEntries out;
  for (const CacheIndexRow& row : read_cache_index(dir)) {
    try {
      Entry e = read_entry_file(row.path);
      if (e.name != row.name) throw Error(row.path + ": holds entry '" + e.name + "', the index says '" + row.name + "'");
      const auto size = std::to_string(fs::file_size(row.path));
      if (size != row.bytes)
        throw Error(row.path + ": " + size + " bytes, the index says " + row.bytes + " (changed since indexed)");
      out.entries.push_back(std::move(e));
    } catch (const std::exception& ex) {
      out.skipped.push_back("cache entry " + row.name + ": " + ex.what());
    }
  }
  return out;
}

}  // namespace megafold::data
