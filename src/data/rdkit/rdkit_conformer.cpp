// The RDKit plugin: SMILES -> heavy atoms, bonds and an ETKDGv3 conformer (AF3 SI Sec. 2.8).
// Built only where RDKit is installed (Debian librdkit-dev); the data layer loads it on demand.
#include <GraphMol/DistGeomHelpers/Embedder.h>
#include <GraphMol/GraphMol.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/SmilesParse/SmilesParse.h>
#include <RDGeneral/RDLog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/rdkit/rdkit_abi.h"

namespace {

int fail(char* error, size_t size, const std::string& why) {
  if (size > 0) {
    const size_t n = std::min(why.size(), size - 1);
    std::memcpy(error, why.data(), n);
    error[n] = '\0';
  }
  return -1;
}

}  // namespace

extern "C" int megafold_rdkit_conformer(const char* smiles, uint64_t seed, MfRdkitAtom* atoms, int atom_capacity,
                                        int32_t* bonds, int bond_capacity, int* n_bonds, char* error,
                                        size_t error_size) {
  try {
    RDLog::LogStateSetter quiet;  // RDKit's own messages would go to stderr; the caller names the problem
    std::unique_ptr<RDKit::RWMol> mol(RDKit::SmilesToMol(smiles));
    if (!mol) return fail(error, error_size, "RDKit cannot parse the SMILES");
    RDKit::MolOps::addHs(*mol);  // in place: ETKDG embeds with explicit hydrogens
    RDKit::RWMol* with_h = mol.get();
    RDKit::DGeomHelpers::EmbedParameters params = RDKit::DGeomHelpers::ETKDGv3;
    params.randomSeed = static_cast<int>(seed & 0x7fffffff);
    int conformer = RDKit::DGeomHelpers::EmbedMolecule(*with_h, params);
    if (conformer < 0) {
      params.useRandomCoords = true;
      conformer = RDKit::DGeomHelpers::EmbedMolecule(*with_h, params);
    }
    if (conformer < 0) return fail(error, error_size, "RDKit could not embed a conformer (ETKDGv3, random starts too)");
    const RDKit::Conformer& conf = with_h->getConformer(conformer);
    std::vector<int> index(with_h->getNumAtoms(), -1);
    std::map<std::string, int> ordinal;
    int n = 0;
    for (const RDKit::Atom* a : with_h->atoms()) {
      if (a->getAtomicNum() <= 1) continue;
      if (n == atom_capacity) return fail(error, error_size, "more heavy atoms than the caller allows");
      MfRdkitAtom& out = atoms[n];
      std::memset(&out, 0, sizeof out);
      std::string symbol = a->getSymbol();
      std::transform(symbol.begin(), symbol.end(), symbol.begin(), [](unsigned char c) { return std::toupper(c); });
      const std::string name = (symbol + std::to_string(++ordinal[symbol])).substr(0, 4);
      std::memcpy(out.name, name.data(), name.size());
      out.element = static_cast<uint8_t>(a->getAtomicNum());
      out.charge = static_cast<int8_t>(a->getFormalCharge());
      const RDGeom::Point3D& p = conf.getAtomPos(a->getIdx());
      out.pos[0] = static_cast<float>(p.x), out.pos[1] = static_cast<float>(p.y), out.pos[2] = static_cast<float>(p.z);
      index[a->getIdx()] = n++;
    }
    if (n == 0) return fail(error, error_size, "the SMILES has no heavy atom");
    int nb = 0;
    for (const RDKit::Bond* b : with_h->bonds()) {
      const int i = index[b->getBeginAtomIdx()], j = index[b->getEndAtomIdx()];
      if (i < 0 || j < 0) continue;
      if (nb == bond_capacity) return fail(error, error_size, "more bonds than the caller allows");
      bonds[2 * nb] = i, bonds[2 * nb + 1] = j;
      ++nb;
    }
    *n_bonds = nb;
    return n;
  } catch (const std::exception& ex) {
    return fail(error, error_size, std::string("RDKit: ") + ex.what());
  } catch (...) {
    return fail(error, error_size, "RDKit failed");
  }
}
