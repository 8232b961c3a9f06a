#include "data/smiles.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "core/check.h"
#include "data/rdkit/rdkit_abi.h"

namespace megafold::data {
namespace {

constexpr int kMaxLigandAtoms = 2048, kMaxLigandBonds = 4096;

// The plugin's entry point, loaded once; nullptr with the reason in *why when it cannot be.
MfRdkitConformerFn plugin(std::string* why) {
  static std::once_flag once;
  static MfRdkitConformerFn fn = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const std::string path = rdkit_plugin_path();
    if (path.empty()) {
      error = "this build has no RDKit plugin (RDKit was not found at build time; scripts/setup.sh installs "
              "librdkit-dev)";
      return;
    }
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = "cannot load the RDKit plugin " + path + " (" + (e ? e : "unknown error") + ")";
      return;
    }
    fn = reinterpret_cast<MfRdkitConformerFn>(dlsym(lib, "megafold_rdkit_conformer"));
    if (fn == nullptr) error = path + " has no megafold_rdkit_conformer";
  });
  if (fn == nullptr && why) *why = error;
  return fn;
}

}  // namespace

std::string rdkit_plugin_path() {
  if (const char* p = std::getenv("MEGAFOLD_RDKIT_PLUGIN"); p && *p) return p;
#ifdef MEGAFOLD_RDKIT_PLUGIN_PATH
  return MEGAFOLD_RDKIT_PLUGIN_PATH;
#else
  return "";
#endif
}

SmilesLigand smiles_ligand(const std::string& smiles, uint64_t seed) {
  std::string why;
  const MfRdkitConformerFn fn = plugin(&why);
  if (fn == nullptr) throw Error("SMILES ligands need RDKit: " + why);
  std::vector<MfRdkitAtom> atoms(kMaxLigandAtoms);
  std::vector<int32_t> bonds(2 * kMaxLigandBonds);
  int n_bonds = 0;
  char error[512] = {};
  const int n = fn(smiles.c_str(), seed, atoms.data(), kMaxLigandAtoms, bonds.data(), kMaxLigandBonds, &n_bonds, error,
                   sizeof error);
  if (n < 0) throw Error(std::string(error));
  SmilesLigand out;
  for (int k = 0; k < n; ++k) {
    TokenAtom t;
    std::copy(atoms[k].name, atoms[k].name + 4, t.name);
    t.element = atoms[k].element;
    t.charge = atoms[k].charge;
    std::copy(atoms[k].pos, atoms[k].pos + 3, t.ref_pos);
    out.atoms.push_back(t);
  }
  for (int b = 0; b < n_bonds; ++b) out.bonds.push_back({bonds[2 * b], bonds[2 * b + 1]});
  return out;
}

}  // namespace megafold::data
