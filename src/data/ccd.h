#pragma once
// The wwPDB Chemical Component Dictionary (CCD) as a memory-mapped binary table: every
// component's heavy atoms (name, element, formal charge, leaving flag, ideal coordinates) and
// bonds. Ligands, ions and non-standard polymer residues take their tokens, reference
// conformers (AF3 SI Sec. 2.8) and intra-component bonds from it; the standard residues use the
// embedded table of reference_atoms.h and do not need it.
//
// The table is written once per machine by data/reference/make_ccd.py (scripts/setup.sh) from
// the CCD in the biotite wheel. Layout, little-endian:
//   header (64 B): magic "MFCCD\0\0\1", u32 version, u32 components, u32 atoms, u32 bonds,
//                  char[40] source
//   components (32 B each, sorted by id): char[8] id, char[8] parent (mon_nstd_parent_comp_id,
//                  first of a list), u32 first atom, u32 first bond, u16 atoms, u16 bonds,
//                  u8 kind (CcdKind), char one-letter code ('\0' for none), 2 B padding
//   atoms (20 B each): char[4] name, u8 atomic number, i8 charge, u8 flags (1 leaving, 2 ideal
//                  coordinates missing: model coordinates used, 4 no coordinates), 1 B padding,
//                  f32 x, y, z (Angstrom)
//   bonds (4 B each): u16, u16 atom indices within the component
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megafold::data {

enum class CcdKind : uint8_t { kNonPolymer = 0, kPeptide = 1, kRna = 2, kDna = 3, kSaccharide = 4, kOther = 5 };

struct CcdAtom {
  char name[4];  // NUL-padded
  uint8_t element;
  int8_t charge;
  uint8_t flags;
  uint8_t pad;
  float pos[3];
  std::string_view atom_name() const;
  bool leaving() const { return flags & 1; }
  bool has_coordinates() const { return !(flags & 4); }
};
static_assert(sizeof(CcdAtom) == 20);

struct CcdBond {
  uint16_t a, b;
};

struct CcdComponent {
  std::string_view id;
  std::string_view parent;  // "" when the component has no standard parent
  CcdKind kind = CcdKind::kNonPolymer;
  char letter = '\0';
  std::span<const CcdAtom> atoms;  // heavy atoms in CCD order
  std::span<const CcdBond> bonds;  // between heavy atoms, indices into `atoms`
  // Index of the atom named `name` in `atoms`, -1 if none.
  int atom_index(std::string_view name) const;
};

class Ccd {
 public:
  // Maps the table at `path`. Throws megafold::Error naming the file when it is missing, not a
  // table of this version, or truncated.
  explicit Ccd(const std::string& path);
  ~Ccd();
  Ccd(const Ccd&) = delete;
  Ccd& operator=(const Ccd&) = delete;

  // The component with this id, or nullptr.
  const CcdComponent* find(std::string_view id) const;
  const std::string& path() const { return path_; }
  const std::string& source() const { return source_; }
  size_t size() const { return components_.size(); }

 private:
  std::string path_, source_;
  const unsigned char* map_ = nullptr;
  size_t bytes_ = 0;
  std::vector<CcdComponent> components_;  // sorted by id
};

// Where the table is looked for: $MEGAFOLD_CCD, else $MEGAFOLD_CACHE/ccd/components.mfccd, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/megafold/ccd/components.mfccd (where setup writes it).
std::string default_ccd_path();

// The table at default_ccd_path(), mapped on first use and shared; nullptr when there is no
// file there (a malformed file still throws). Thread-safe.
const Ccd* default_ccd();

// default_ccd(), or nullptr with the reason in *why (when given) for a malformed table: for
// callers that go on without one (protein-only inputs never need it).
const Ccd* usable_default_ccd(std::string* why);

}  // namespace megafold::data
