#include "data/elements.h"

#include <array>
#include <cctype>
#include <string>

namespace megafold::data {
namespace {

// Index = atomic number; upper case as the PDB and the CCD write them.
constexpr std::array<std::string_view, kMaxElement + 1> kSymbols = {
    "X",  "H",  "HE", "LI", "BE", "B",  "C",  "N",  "O",  "F",  "NE", "NA", "MG", "AL", "SI", "P",  "S",
    "CL", "AR", "K",  "CA", "SC", "TI", "V",  "CR", "MN", "FE", "CO", "NI", "CU", "ZN", "GA", "GE", "AS",
    "SE", "BR", "KR", "RB", "SR", "Y",  "ZR", "NB", "MO", "TC", "RU", "RH", "PD", "AG", "CD", "IN", "SN",
    "SB", "TE", "I",  "XE", "CS", "BA", "LA", "CE", "PR", "ND", "PM", "SM", "EU", "GD", "TB", "DY", "HO",
    "ER", "TM", "YB", "LU", "HF", "TA", "W",  "RE", "OS", "IR", "PT", "AU", "HG", "TL", "PB", "BI", "PO",
    "AT", "RN", "FR", "RA", "AC", "TH", "PA", "U",  "NP", "PU", "AM", "CM", "BK", "CF", "ES", "FM", "MD",
    "NO", "LR", "RF", "DB", "SG", "BH", "HS", "MT", "DS", "RG", "CN", "NH", "FL", "MC", "LV", "TS", "OG"};

}  // namespace

int atomic_number(std::string_view symbol) {
  if (symbol.empty() || symbol.size() > 2) return 0;
  std::string up(symbol);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (up == "D") return 1;
  for (int z = 1; z <= kMaxElement; ++z)
    if (kSymbols[z] == up) return z;
  return 0;
}

std::string_view element_symbol(int z) { return z >= 1 && z <= kMaxElement ? kSymbols[z] : kSymbols[0]; }

}  // namespace megafold::data
