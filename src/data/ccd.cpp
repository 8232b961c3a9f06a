#include "data/ccd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/check.h"
#include "data/elements.h"

namespace megafold::data {
namespace {

constexpr char kMagic[8] = {'M', 'F', 'C', 'C', 'D', 0, 0, 1};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 64, kComponentBytes = 32;

std::string_view fixed(const char* p, size_t n) { return {p, strnlen(p, n)}; }

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::string_view CcdAtom::atom_name() const { return fixed(name, sizeof name); }

int CcdComponent::atom_index(std::string_view name) const {
  for (size_t i = 0; i < atoms.size(); ++i)
    if (atoms[i].atom_name() == name) return static_cast<int>(i);
  return -1;
}

Ccd::Ccd(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open the CCD table: " + std::strerror(errno) + " (scripts/setup.sh writes it)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeader)) {
    ::close(fd);
    throw Error(path + ": not a CCD table (shorter than its header); rerun scripts/setup.sh");
  }
  bytes_ = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw Error(path + ": cannot map the CCD table: " + std::strerror(errno));
  map_ = static_cast<const unsigned char*>(map);
  auto fail = [&](const std::string& why) {
    ::munmap(const_cast<unsigned char*>(map_), bytes_);
    map_ = nullptr;
    throw Error(path + ": " + why + "; rerun scripts/setup.sh (or data/reference/make_ccd.py) to rewrite it");
  };
  if (std::memcmp(map_, kMagic, sizeof kMagic) != 0) fail("not a CCD table (bad magic)");
  const auto version = load<uint32_t>(map_ + 8);
  if (version != kVersion) fail("CCD table version " + std::to_string(version) + ", this build reads " + std::to_string(kVersion));
  const uint64_t n_comp = load<uint32_t>(map_ + 12), n_atoms = load<uint32_t>(map_ + 16), n_bonds = load<uint32_t>(map_ + 20);
  source_ = std::string(fixed(reinterpret_cast<const char*>(map_ + 24), 40));
  const size_t atoms_at = kHeader + n_comp * kComponentBytes, bonds_at = atoms_at + n_atoms * sizeof(CcdAtom);
  if (bonds_at + n_bonds * sizeof(CcdBond) != bytes_)
    fail("truncated or corrupt CCD table (" + std::to_string(bytes_) + " bytes, the header implies " +
         std::to_string(bonds_at + n_bonds * sizeof(CcdBond)) + ")");
  // The atom and bond arrays are 4-byte aligned (mmap is page-aligned, the offsets multiples of 4).
  const auto* atoms = reinterpret_cast<const CcdAtom*>(map_ + atoms_at);
  const auto* bonds = reinterpret_cast<const CcdBond*>(map_ + bonds_at);
  components_.reserve(n_comp);
  for (uint64_t k = 0; k < n_comp; ++k) {
    const unsigned char* rec = map_ + kHeader + k * kComponentBytes;
    const auto first_atom = load<uint32_t>(rec + 16), first_bond = load<uint32_t>(rec + 20);
    const auto count_atoms = load<uint16_t>(rec + 24), count_bonds = load<uint16_t>(rec + 26);
    if (uint64_t{first_atom} + count_atoms > n_atoms || uint64_t{first_bond} + count_bonds > n_bonds || rec[28] > 5)
      fail("corrupt component record " + std::to_string(k));
    CcdComponent c;
    c.id = fixed(reinterpret_cast<const char*>(rec), 8);
    c.parent = fixed(reinterpret_cast<const char*>(rec + 8), 8);
    c.kind = static_cast<CcdKind>(rec[28]);
    c.letter = static_cast<char>(rec[29]);
    c.atoms = {atoms + first_atom, count_atoms};
    c.bonds = {bonds + first_bond, count_bonds};
    for (const CcdBond& b : c.bonds)
      if (b.a >= count_atoms || b.b >= count_atoms) fail("corrupt bond of component " + std::string(c.id));
    for (const CcdAtom& a : c.atoms)
      if (a.element > kMaxElement) fail("atomic number " + std::to_string(a.element) + " in component " + std::string(c.id));
    if (!components_.empty() && !(components_.back().id < c.id)) fail("components not sorted by id");
    components_.push_back(c);
  }
}

Ccd::~Ccd() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), bytes_);
}

const CcdComponent* Ccd::find(std::string_view id) const {
  const auto it = std::lower_bound(components_.begin(), components_.end(), id,
                                   [](const CcdComponent& c, std::string_view key) { return c.id < key; });
  return it != components_.end() && it->id == id ? &*it : nullptr;
}

std::string default_ccd_path() {
  if (const char* p = std::getenv("MEGAFOLD_CCD"); p && *p) return p;
  std::string cache;
  if (const char* c = std::getenv("MEGAFOLD_CACHE"); c && *c) {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    cache = std::string(x) + "/megafold";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    cache = std::string(h) + "/.cache/megafold";
  } else {
    return "";
  }
  return cache + "/ccd/components.mfccd";
}

const Ccd* default_ccd() {
  // Opened once: a malformed table's error is kept and raised again on every call rather than
  // the file being read again (call_once would retry after a throw).
  static std::once_flag once;
  static std::unique_ptr<Ccd> ccd;
  static std::string failure;
  std::call_once(once, [] {
    const std::string path = default_ccd_path();
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec)) return;
    try {
      ccd = std::make_unique<Ccd>(path);
    } catch (const Error& ex) {
      failure = ex.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
  return ccd.get();
}

const Ccd* usable_default_ccd(std::string* why) {
  try {
    return default_ccd();
  } catch (const Error& ex) {
    if (why) *why = ex.what();
    return nullptr;
  }
}

}  // namespace megafold::data
