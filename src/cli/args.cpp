#include "cli/args.h"

#include <sstream>

#include "core/check.h"

namespace megafold::cli {

Args::Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs) {
  auto find = [&](const std::string& name) -> const OptionSpec* {
    for (const auto& s : specs)
      if (s.name == name) return &s;
    return nullptr;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "' (see --help)");
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* spec = find(name);
    if (!spec) {
      std::string valid;
      for (const auto& s : specs) valid += " --" + s.name;
      throw Error("unknown option '--" + name + "'; valid options:" + valid);
    }
    if (!spec->value.empty() && !inline_value) {
      if (i + 1 >= argv.size()) throw Error("option --" + name + " needs a value " + spec->value);
      value = argv[++i];
    }
    values_[name] = value;
    if (spec->repeatable) repeated_[name].push_back(value);
  }
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

OptionSpec set_option() {
  return {"set", "KEY=VALUE",
          "set one config key, dotted (optim.lr=1e-4, model.memory=frontier); repeatable, applied last", true};
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  const auto v = get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const int64_t x = std::stoll(*v, &used);
    if (used == v->size()) return x;
  } catch (const std::exception&) {
  }
  throw Error("option --" + name + " expects an integer, got '" + *v + "'");
}

std::string usage(const std::string& command, const std::string& summary,
                  const std::vector<OptionSpec>& specs) {
  std::ostringstream os;
  os << "usage: megafold " << command << " [options]\n\n" << summary << "\n\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.value.empty() ? "" : " " + s.value);
    if (left.size() < 26) left.resize(26, ' ');
    os << left << " " << s.help << "\n";
  }
  return os.str();
}

}  // namespace megafold::cli
