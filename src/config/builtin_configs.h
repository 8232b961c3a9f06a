#pragma once
// configs/*.json embedded at build time (generated builtin_configs.cpp), keyed by file stem.
#include <map>
#include <string>

namespace megafold::config {
const std::map<std::string, std::string>& builtin_configs();
}
