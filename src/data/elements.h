#pragma once
// Chemical elements by atomic number (AF3's ref_element is a one-hot over 128 classes).
#include <string_view>

namespace megafold::data {

inline constexpr int kMaxElement = 118;

// Atomic number of an element symbol, either case ("C", "Se", "SE", "MG"); 0 for anything else
// (including "X" and "" for unknown atoms). Deuterium "D" counts as hydrogen.
int atomic_number(std::string_view symbol);

// Symbol of atomic number z in the PDB's upper case ("C", "SE", "MG"); "X" outside [1, 118].
std::string_view element_symbol(int z);

}  // namespace megafold::data
