#include "config/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <concepts>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "core/check.h"
#include "model/memory_plan.h"
#include "config/builtin_configs.h"

namespace megafold::config {
namespace {

// The largest width (channels, crop tokens) a config may ask for.
constexpr int64_t kMaxWidth = 8192;

using nlohmann::json;

// Reads `key` of object `j` into `out` when present. Type errors name origin and key; an
// integer key takes only a whole number that fits (2.5 is not truncated, 2^32 + 384 does not
// wrap), a boolean only true or false.
template <typename T>
void read(const json& j, const char* key, T& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return;
  auto wrong = [&](const std::string& why) { throw Error(where + ": key '" + key + "' " + why + ", got " + it->dump()); };
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) wrong("has the wrong type (true or false expected)");
    out = it->get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (it->is_number_float()) {
      const double v = it->get<double>();
      if (!(std::floor(v) == v)) wrong("must be a whole number");
      if (!(v >= static_cast<double>(std::numeric_limits<T>::min()) && v <= static_cast<double>(std::numeric_limits<T>::max())))
        wrong("is out of range");
      out = static_cast<T>(v);
    } else if (it->is_number_unsigned()) {
      const uint64_t v = it->get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) wrong("is out of range");
      out = static_cast<T>(v);
    } else if (it->is_number_integer()) {
      const int64_t v = it->get<int64_t>();
      if (std::is_unsigned_v<T> && v < 0) wrong("must not be negative");
      out = static_cast<T>(v);
    } else {
      wrong("has the wrong type (a whole number expected)");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) wrong("has the wrong type (a number expected)");
    out = it->get<T>();
  } else {
    try {
      out = it->get<T>();
    } catch (const json::exception&) {
      wrong("has the wrong type");
    }
  }
}

// ---- every key once ----
// keys(section, f) calls f("name", member) for each key of a config section. Reading (with the
// unknown-key check) and writing both derive from these lists; a member that is itself a
// section is a nested JSON object. Range checks are in validate() below.
template <typename T, typename U>
concept Is = std::same_as<std::remove_const_t<T>, U>;

template <typename S>
  requires Is<S, model::TemplateConfig>
void keys(S& t, auto&& f) {
  f("n_blocks", t.n_blocks), f("c", t.c), f("tri_attn_heads", t.tri_attn_heads);
  f("tri_attn_head_dim", t.tri_attn_head_dim), f("tri_mul_hidden", t.tri_mul_hidden);
  f("transition_factor", t.transition_factor), f("distogram_bins", t.distogram_bins);
  f("distogram_min", t.distogram_min), f("distogram_max", t.distogram_max);
}

template <typename S>
  requires Is<S, model::MsaConfig>
void keys(S& m, auto&& f) {
  f("n_blocks", m.n_blocks), f("c_m", m.c_m), f("opm_hidden", m.opm_hidden), f("heads", m.heads);
  f("head_dim", m.head_dim), f("dropout", m.dropout);
}

template <typename S>
  requires Is<S, model::DiffusionConfig>
void keys(S& d, auto&& f) {
  f("c_token", d.c_token), f("n_blocks", d.n_blocks), f("heads", d.heads), f("fourier_dim", d.fourier_dim);
  f("transition_factor", d.transition_factor), f("sigma_data", d.sigma_data), f("c_atom", d.c_atom);
  f("c_atompair", d.c_atompair), f("atom_blocks", d.atom_blocks), f("atom_heads", d.atom_heads);
  f("samples", d.samples), f("weight", d.weight), f("sampler_steps", d.sampler_steps);
  f("sample_chunk", d.sample_chunk), f("bond_weight", d.bond_weight);
  f("reflect_mirror_images", d.reflect_mirror_images);
}

template <typename S>
  requires Is<S, model::ConfidenceConfig>
void keys(S& c, auto&& f) {
  f("n_blocks", c.n_blocks), f("plddt_bins", c.plddt_bins), f("distance_bins", c.distance_bins);
  f("distance_min", c.distance_min), f("distance_max", c.distance_max), f("rollout_steps", c.rollout_steps);
  f("every", c.every), f("weight", c.weight), f("error_bins", c.error_bins), f("error_max", c.error_max);
  f("pae_weight", c.pae_weight);
}

template <typename S>
  requires Is<S, model::ModelConfig>
void keys(S& m, auto&& f) {
  f("c_s", m.c_s), f("c_z", m.c_z), f("n_blocks", m.n_blocks), f("tri_attn_heads", m.tri_attn_heads);
  f("tri_attn_head_dim", m.tri_attn_head_dim), f("tri_mul_hidden", m.tri_mul_hidden);
  f("single_attn_heads", m.single_attn_heads), f("single_attn_head_dim", m.single_attn_head_dim);
  f("transition_factor", m.transition_factor), f("dropout", m.dropout), f("relpos_r_max", m.relpos_r_max);
  f("relpos_s_max", m.relpos_s_max), f("distogram_bins", m.distogram_bins), f("distogram_min", m.distogram_min);
  f("distogram_max", m.distogram_max), f("checkpoint_blocks", m.checkpoint_blocks), f("memory", m.memory);
  f("memory_chunk_pairs", m.memory_chunk_pairs), f("memory_offload", m.memory_offload);
  f("recycles", m.recycles), f("templates", m.templates), f("msa", m.msa), f("diffusion", m.diffusion), f("confidence", m.confidence);
}

template <typename S>
  requires Is<S, DataConfig>
void keys(S& d, auto&& f) {
  f("dir", d.dir), f("crop_size", d.crop_size), f("batch_size", d.batch_size), f("val_crop_size", d.val_crop_size);
  f("overfit", d.overfit), f("crop_contiguous", d.crop_contiguous), f("crop_spatial", d.crop_spatial);
  f("crop_spatial_interface", d.crop_spatial_interface), f("weights", d.weights), f("split", d.split);
  f("clusters", d.clusters), f("sampling", d.sampling), f("chain_clusters", d.chain_clusters);
  f("msa_rows", d.msa_rows), f("max_templates", d.max_templates), f("workers", d.workers), f("prefetch", d.prefetch);
}

template <typename S>
  requires Is<S, OptimConfig>
void keys(S& o, auto&& f) {
  f("lr", o.lr), f("beta1", o.beta1), f("beta2", o.beta2), f("eps", o.eps), f("weight_decay", o.weight_decay);
  f("warmup_steps", o.warmup_steps), f("decay_every", o.decay_every), f("decay_factor", o.decay_factor);
  f("clip_grad_norm", o.clip_grad_norm), f("ema_decay", o.ema_decay);
}

template <typename S>
  requires Is<S, TrainConfig>
void keys(S& c, auto&& f) {
  f("name", c.name), f("model", c.model), f("data", c.data), f("optim", c.optim), f("steps", c.steps);
  f("seed", c.seed), f("device", c.device), f("bf16", c.bf16), f("threads", c.threads);
  f("log_every", c.log_every), f("val_every", c.val_every), f("checkpoint_every", c.checkpoint_every);
  f("keep_checkpoints", c.keep_checkpoints), f("max_skipped_steps", c.max_skipped_steps);
}

template <typename T>
constexpr bool kSection = Is<T, model::TemplateConfig> || Is<T, model::MsaConfig> || Is<T, model::DiffusionConfig> ||
                          Is<T, model::ConfidenceConfig> || Is<T, model::ModelConfig> || Is<T, DataConfig> ||
                          Is<T, OptimConfig> || Is<T, TrainConfig>;

// Unknown keys of section s in object j (besides `extra`) are errors naming `where` and the key.
template <typename S>
void reject_unknown(const json& j, const S& s, const std::string& where, std::initializer_list<const char*> extra = {}) {
  if (!j.is_object()) throw Error(where + ": must be a JSON object, got " + j.dump());
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* e : extra) known = known || it.key() == e;
    keys(s, [&](const char* k, const auto&) { known = known || it.key() == k; });
    if (!known) throw Error(where + ": unknown key '" + it.key() + "' (check the spelling; see configs/)");
  }
}

// Reads the keys present in j into s, nested sections included.
template <typename S>
void read_section(const json& j, S& s, const std::string& where) {
  reject_unknown(j, s, where);
  keys(s, [&](const char* k, auto& member) {
    if constexpr (kSection<std::remove_cvref_t<decltype(member)>>) {
      if (auto it = j.find(k); it != j.end()) read_section(*it, member, where + " [" + k + "]");
    } else {
      read(j, k, member, where);
    }
  });
}

template <typename S>
json write_section(const S& s) {
  json out = json::object();
  keys(s, [&](const char* k, const auto& member) {
    if constexpr (kSection<std::remove_cvref_t<decltype(member)>>) out[k] = write_section(member);
    else out[k] = member;
  });
  return out;
}

namespace fs = std::filesystem;

void apply(const json& j, TrainConfig& c, const std::string& origin, int depth, const fs::path& dir);

// Parses a config text; a key given twice in one object is an error (JSON parsers keep one
// silently, so the other setting would be lost without a word).
json parse_json(const std::string& text, const std::string& origin) {
  std::vector<std::set<std::string>> open;  // the keys seen in each enclosing object
  std::string duplicate;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open.emplace_back();
    else if (event == json::parse_event_t::object_end && !open.empty()) open.pop_back();
    else if (event == json::parse_event_t::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(text, check);
  } catch (const json::parse_error& ex) {
    throw Error(origin + ": invalid JSON: " + ex.what());
  }
  MF_CHECK(duplicate.empty(), origin, ": key '", duplicate, "' is given twice in one object; keep one");
  return j;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  MF_CHECK(in.good(), path.string(), ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  MF_CHECK(in.good() || in.eof(), path.string(), ": cannot read config file");
  return ss.str();
}

std::string builtin_names() {
  std::string names;
  for (const auto& [n, t] : builtin_configs()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// dir: where a relative 'base' path is looked up (the directory of the file being applied).
void apply(const json& j, TrainConfig& c, const std::string& origin, int depth, const fs::path& dir) {
  MF_CHECK(j.is_object(), origin, ": a config must be a JSON object");
  reject_unknown(j, c, origin, {"base"});
  if (auto it = j.find("base"); it != j.end()) {
    MF_CHECK(depth < 8, origin, ": 'base' chain is too deep (a cycle?)");
    MF_CHECK(it->is_string(), origin, ": 'base' must be a built-in config name or a file path, got ", it->dump());
    const std::string base = it->get<std::string>();
    const auto& builtin = builtin_configs();
    if (auto b = builtin.find(base); b != builtin.end()) {
      apply(json::parse(b->second), c, "config '" + base + "'", depth + 1, fs::current_path());
    } else {
      const fs::path path = fs::path(base).is_absolute() ? fs::path(base) : dir / base;
      if (!fs::is_regular_file(path))
        throw Error(origin + ": base '" + base + "' is neither a built-in config (" + builtin_names() +
                    ") nor a file (looked for " + path.string() + ")");
      apply(parse_json(read_text(path), path.string()), c, path.string(), depth + 1, path.parent_path());
    }
  }
  json own = j;
  own.erase("base");
  read_section(own, c, origin);
}

void validate(const TrainConfig& c, const std::string& origin) {
  auto positive = [&](int64_t v, const char* key) {
    if (v <= 0) throw Error(origin + ": '" + key + "' must be > 0, got " + std::to_string(v));
  };
  positive(c.model.c_s, "model.c_s");
  positive(c.model.c_z, "model.c_z");
  positive(c.model.n_blocks, "model.n_blocks");
  positive(c.model.tri_attn_heads, "model.tri_attn_heads");
  positive(c.model.tri_attn_head_dim, "model.tri_attn_head_dim");
  positive(c.model.tri_mul_hidden, "model.tri_mul_hidden");
  positive(c.model.single_attn_heads, "model.single_attn_heads");
  positive(c.model.single_attn_head_dim, "model.single_attn_head_dim");
  positive(c.model.transition_factor, "model.transition_factor");
  positive(c.data.crop_size, "data.crop_size");
  positive(c.data.msa_rows, "data.msa_rows");
  positive(c.data.workers, "data.workers");
  positive(c.data.prefetch, "data.prefetch");
  if (!(c.data.crop_contiguous >= 0 && c.data.crop_spatial >= 0 && c.data.crop_spatial_interface >= 0) ||
      !(c.data.crop_contiguous + c.data.crop_spatial + c.data.crop_spatial_interface > 0))
    throw Error(origin + ": 'data.crop_contiguous', 'crop_spatial' and 'crop_spatial_interface' must be >= 0, not all 0");
  positive(c.data.batch_size, "data.batch_size");
  positive(c.steps, "steps");
  positive(c.log_every, "log_every");
  positive(c.checkpoint_every, "checkpoint_every");
  positive(c.keep_checkpoints, "keep_checkpoints");
  auto non_negative = [&](int64_t v, const char* key) {
    if (v < 0) throw Error(origin + ": '" + key + "' must be >= 0, got " + std::to_string(v));
  };
  non_negative(c.model.relpos_r_max, "model.relpos_r_max");
  non_negative(c.model.relpos_s_max, "model.relpos_s_max");
  non_negative(c.data.val_crop_size, "data.val_crop_size");
  non_negative(c.data.max_templates, "data.max_templates");
  non_negative(c.optim.warmup_steps, "optim.warmup_steps");
  non_negative(c.optim.decay_every, "optim.decay_every");
  if (c.val_every < -1) throw Error(origin + ": 'val_every' must be >= -1 (0: only at the end, -1: never)");
  non_negative(c.threads, "threads");
  if (!c.data.weights.empty() && !c.data.clusters.empty())
    throw Error(origin + ": 'data.weights' and 'data.clusters' both set; give one (clusters derive the weights)");
  if (c.data.sampling != "entry" && c.data.sampling != "af3")
    throw Error(origin + ": 'data.sampling' must be \"entry\" (whole entries) or \"af3\" (AF3's chains and " +
                "interfaces), got \"" + c.data.sampling + "\"");
  if (c.data.sampling == "af3" && (!c.data.weights.empty() || !c.data.clusters.empty()))
    throw Error(origin + ": 'data.sampling' af3 weighs chains and interfaces (AF3 SI 2.5.1) and '" +
                (c.data.weights.empty() ? "data.clusters" : "data.weights") +
                "' weighs whole entries: set data.sampling=entry to keep it, or drop it (chain clusters for af3 "
                "go in 'data.chain_clusters')");
  if (!c.data.chain_clusters.empty() && c.data.sampling != "af3")
    throw Error(origin + ": 'data.chain_clusters' is read by data.sampling af3 only (it is \"" + c.data.sampling +
                "\"): set data.sampling=af3 or drop it");
  non_negative(c.max_skipped_steps, "max_skipped_steps");
  auto in_range = [&](double v, double lo, double hi, const char* key, const char* range) {
    if (!(v >= lo && v <= hi)) throw Error(origin + ": '" + key + "' must be in " + range + ", got " + std::to_string(v));
  };
  in_range(c.model.dropout, 0.0, 0.999999, "model.dropout", "[0, 1)");
  in_range(c.optim.ema_decay, 0.0, 1.0, "optim.ema_decay", "[0, 1]");
  in_range(c.optim.beta1, 0.0, 0.999999, "optim.beta1", "[0, 1)");
  in_range(c.optim.beta2, 0.0, 0.999999, "optim.beta2", "[0, 1)");
  in_range(c.optim.decay_factor, 0.0, 1.0, "optim.decay_factor", "[0, 1]");
  if (!(c.optim.lr > 0)) throw Error(origin + ": 'optim.lr' must be > 0");
  if (!(c.optim.eps > 0)) throw Error(origin + ": 'optim.eps' must be > 0 (AdamW divides by sqrt(v) + eps)");
  // Widths far beyond any AF3-class model are typos (c_z 200000 would ask for ~160 GB of
  // parameters before training starts).
  auto width = [&](int64_t v, const char* key) {
    if (v > kMaxWidth)
      throw Error(origin + ": '" + key + "' " + std::to_string(v) + " is beyond " + std::to_string(kMaxWidth) +
                  " (AF3: c_s 384, c_z 128, c_m 64, c_token 768); a typo?");
  };
  width(c.model.c_s, "model.c_s"), width(c.model.c_z, "model.c_z"), width(c.model.msa.c_m, "model.msa.c_m");
  width(c.model.tri_mul_hidden, "model.tri_mul_hidden"), width(c.model.diffusion.c_token, "model.diffusion.c_token");
  width(c.model.diffusion.c_atom, "model.diffusion.c_atom"), width(c.model.msa.opm_hidden, "model.msa.opm_hidden");
  width(c.model.tri_attn_heads * c.model.tri_attn_head_dim, "model.tri_attn_heads x tri_attn_head_dim");
  width(c.model.single_attn_heads * c.model.single_attn_head_dim, "model.single_attn_heads x single_attn_head_dim");
  width(c.data.crop_size, "data.crop_size"), width(c.data.val_crop_size, "data.val_crop_size");
  if (c.optim.clip_grad_norm < 0) throw Error(origin + ": 'optim.clip_grad_norm' must be >= 0 (0 disables)");
  if (c.model.distogram_bins < 2) throw Error(origin + ": 'model.distogram_bins' must be >= 2");
  if (!(c.model.distogram_min < c.model.distogram_max))
    throw Error(origin + ": 'model.distogram_min' must be below 'model.distogram_max'");
  const model::DiffusionConfig& d = c.model.diffusion;
  non_negative(d.samples, "model.diffusion.samples");
  if (d.samples > 0) {
    positive(d.c_token, "model.diffusion.c_token");
    positive(d.n_blocks, "model.diffusion.n_blocks");
    positive(d.heads, "model.diffusion.heads");
    positive(d.fourier_dim, "model.diffusion.fourier_dim");
    positive(d.transition_factor, "model.diffusion.transition_factor");
    positive(d.c_atom, "model.diffusion.c_atom");
    positive(d.c_atompair, "model.diffusion.c_atompair");
    positive(d.atom_blocks, "model.diffusion.atom_blocks");
    positive(d.atom_heads, "model.diffusion.atom_heads");
    positive(d.sampler_steps, "model.diffusion.sampler_steps");
    if (d.c_token % d.heads != 0 || d.c_atom % d.atom_heads != 0)
      throw Error(origin + ": 'model.diffusion.c_token' and 'c_atom' must be multiples of 'heads' and 'atom_heads'");
    if (!(d.sigma_data > 0) || !(d.weight >= 0))
      throw Error(origin + ": 'model.diffusion.sigma_data' must be > 0 and 'weight' >= 0");
    non_negative(d.sample_chunk, "model.diffusion.sample_chunk");
    non_negative(d.bond_weight, "model.diffusion.bond_weight");
  }
  positive(c.model.recycles, "model.recycles");
  non_negative(c.model.memory_chunk_pairs, "model.memory_chunk_pairs");
  try {
    model::parse_memory_mode(c.model.memory);
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
  const model::MsaConfig& msa = c.model.msa;
  non_negative(msa.n_blocks, "model.msa.n_blocks");
  if (msa.n_blocks > 0) {
    positive(msa.c_m, "model.msa.c_m");
    positive(msa.opm_hidden, "model.msa.opm_hidden");
    positive(msa.heads, "model.msa.heads");
    positive(msa.head_dim, "model.msa.head_dim");
    if (!(msa.dropout >= 0 && msa.dropout < 1)) throw Error(origin + ": 'model.msa.dropout' must be in [0, 1)");
  }
  const model::TemplateConfig& t = c.model.templates;
  non_negative(t.n_blocks, "model.templates.n_blocks");
  if (t.n_blocks > 0) {
    positive(t.c, "model.templates.c");
    positive(t.tri_attn_heads, "model.templates.tri_attn_heads");
    positive(t.tri_attn_head_dim, "model.templates.tri_attn_head_dim");
    positive(t.tri_mul_hidden, "model.templates.tri_mul_hidden");
    positive(t.transition_factor, "model.templates.transition_factor");
    if (t.distogram_bins < 2 || !(t.distogram_min < t.distogram_max))
      throw Error(origin + ": 'model.templates' needs distogram_bins >= 2 and distogram_min < distogram_max");
  }
  const model::ConfidenceConfig& k = c.model.confidence;
  non_negative(k.n_blocks, "model.confidence.n_blocks");
  if (k.n_blocks > 0) {
    if (d.samples == 0)
      throw Error(origin + ": 'model.confidence' needs the diffusion module ('model.diffusion.samples' > 0)");
    positive(k.plddt_bins, "model.confidence.plddt_bins");
    positive(k.rollout_steps, "model.confidence.rollout_steps");
    positive(k.every, "model.confidence.every");
    if (k.distance_bins < 2 || !(k.distance_min < k.distance_max) || !(k.weight >= 0))
      throw Error(origin + ": 'model.confidence' needs distance_bins >= 2, distance_min < distance_max and weight >= 0");
    if (k.error_bins < 2 || !(k.error_max > 0) || !(k.pae_weight >= 0))
      throw Error(origin + ": 'model.confidence' needs error_bins >= 2, error_max > 0 and pae_weight >= 0");
  }
}

// One "a.b.c=value" assignment as the object {"a": {"b": {"c": value}}}: value parsed as JSON
// (numbers, true/false, null, arrays, "quoted strings"), or kept as the plain string it is.
json assignment_json(const std::string& text, bool as_string) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--set " + text + ": expected KEY=VALUE with a dotted key, e.g. optim.lr=1e-4");
  const std::string key = text.substr(0, eq), value = text.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (parts.back().empty()) throw Error("--set " + text + ": empty part in the key '" + key + "'");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.front() == "base") throw Error("--set " + text + ": 'base' is not a setting; pass the config with --config");
  json v = value;
  if (!as_string) {
    try {
      v = json::parse(value);
    } catch (const json::parse_error&) {
      v = value;
    }
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) v = json{{*it, v}};
  return v;
}

}  // namespace

void apply_assignments(TrainConfig& c, const std::vector<std::string>& assignments) {
  for (const std::string& a : assignments) {
    const std::string origin = "--set " + a;
    const json parsed = assignment_json(a, false), plain = assignment_json(a, true);
    TrainConfig trial = c;
    try {
      apply(parsed, trial, origin, 0, fs::current_path());
    } catch (const Error&) {
      // A value that reads as JSON of another type may be meant as text (name=2024): retry it
      // as a string, and report the first error if that fails too.
      if (parsed == plain) throw;
      trial = c;
      try {
        apply(plain, trial, origin, 0, fs::current_path());
      } catch (const Error&) {
        apply(parsed, trial, origin, 0, fs::current_path());  // rethrows the first error
      }
    }
    c = trial;
  }
}

std::vector<std::string> builtin_config_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtin_configs()) names.push_back(name);
  return names;
}

std::string default_config_name(bool cuda_available) {
  return cuda_available ? "gpu-small" : "cpu-tiny";
}

namespace {

// A config object resolved (base chain, its keys, then the assignments) and validated; `dir`
// is where a relative base path is looked up.
TrainConfig resolve(const json& j, const std::string& origin, const fs::path& dir,
                    const std::vector<std::string>& assignments) {
  TrainConfig c;
  apply(j, c, origin, 0, dir);
  apply_assignments(c, assignments);
  validate(c, assignments.empty() ? origin : origin + " with --set");
  return c;
}

}  // namespace

TrainConfig parse_config(const std::string& json_text, const std::string& origin,
                         const std::vector<std::string>& assignments) {
  return resolve(parse_json(json_text, origin), origin, fs::current_path(), assignments);
}

TrainConfig load_config(const std::string& file_or_name, const std::vector<std::string>& assignments) {
  if (fs::is_regular_file(file_or_name)) {
    const fs::path path(file_or_name);
    return resolve(parse_json(read_text(path), file_or_name), file_or_name, path.parent_path(), assignments);
  }
  const auto& builtin = builtin_configs();
  auto it = builtin.find(file_or_name);
  if (it == builtin.end())
    throw Error("config '" + file_or_name + "' is neither a file nor a built-in config (" + builtin_names() + ")");
  return parse_config(it->second, "config '" + file_or_name + "'", assignments);
}

std::string resume_mismatch(const TrainConfig& saved, const TrainConfig& now) {
  const json a = json::parse(to_json(saved)), b = json::parse(to_json(now));
  std::string diff;
  for (const char* section : {"model", "data"})
    for (auto it = a[section].begin(); it != a[section].end(); ++it)
      if (it.key() != "dir" && it.key() != "workers" && it.key() != "prefetch" && it.key().rfind("memory", 0) != 0 &&
          b[section][it.key()] != it.value())
        diff += std::string(diff.empty() ? "" : ", ") + section + "." + it.key() + " " +
                it.value().dump() + " -> " + b[section][it.key()].dump();
  if (a["seed"] != b["seed"]) diff += std::string(diff.empty() ? "" : ", ") + "seed";
  return diff;
}

std::string to_json(const TrainConfig& c) { return write_section(c).dump(2) + "\n"; }

}  // namespace megafold::config
