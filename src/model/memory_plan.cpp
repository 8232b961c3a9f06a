#include "model/memory_plan.h"

#include <algorithm>

#include "core/check.h"

namespace megafold::model {
namespace {

// Pairs per chunk of the row-chunked ops: at N = 1024 one chunk (no split), at 2048 four, at
// 3072 five; a chunk of the triangle attention then holds ~2 GB of projections and gradients,
// and its kernels still fill the GPU.
constexpr int64_t kChunkPairs = int64_t{1} << 21;
// Token-samples of diffusion per recomputed chunk outside fast mode, where the transformer
// blocks keep only their inputs: 16 samples at 768 tokens (~1 GB of block inputs, the windowed
// atom attention's ~2 GB working set), 8 at 1536.
constexpr int64_t kDiffusionTokenSamples = 16 * 768;

}  // namespace

MemoryMode parse_memory_mode(const std::string& name) {
  if (name == "fast") return MemoryMode::kFast;
  if (name == "balanced") return MemoryMode::kBalanced;
  if (name == "frontier") return MemoryMode::kFrontier;
  throw Error("model.memory '" + name + "' is not a memory mode; use fast, balanced or frontier");
}

const char* memory_mode_name(MemoryMode mode) {
  switch (mode) {
    case MemoryMode::kFast: return "fast";
    case MemoryMode::kBalanced: return "balanced";
    case MemoryMode::kFrontier: return "frontier";
  }
  return "?";
}

MemoryPlan memory_plan(const ModelConfig& cfg) {
  MemoryPlan p;
  p.mode = parse_memory_mode(cfg.memory);
  p.checkpoint_blocks = cfg.checkpoint_blocks;
  if (p.mode == MemoryMode::kFast) return p;
  p.checkpoint_blocks = true;
  p.bf16_boundary = true;
  p.offload = cfg.memory_offload;
  p.chunk_pairs = cfg.memory_chunk_pairs > 0 ? cfg.memory_chunk_pairs : kChunkPairs;
  p.recompute_ops = p.mode == MemoryMode::kFrontier;
  p.recompute_diffusion_blocks = true;
  return p;
}

int64_t MemoryPlan::chunk_rows(int64_t n) const {
  if (chunk_pairs <= 0 || n <= 0) return std::max<int64_t>(n, 1);
  return std::clamp<int64_t>(chunk_pairs / n, 1, n);
}

std::string MemoryPlan::describe() const {
  std::string s = std::string("memory mode ") + memory_mode_name(mode) + ": ";
  if (mode == MemoryMode::kFast)
    return s + (checkpoint_blocks ? "blocks recomputed in backward from fp32 inputs" : "every activation kept for backward") +
           " (the fastest step; model.memory balanced or frontier trade time for memory)";
  s += "blocks recomputed in backward from bf16 inputs (z rounded to bf16 at block boundaries)";
  if (offload) s += ", trunk block inputs in pinned host memory";
  s += ", row-chunked transitions and outer product means, diffusion transformer blocks recomputed in backward";
  if (recompute_ops) s += ", each pair-stack op recomputed on row chunks in backward";
  // Measured on an H200 against fast (docs/memory.md): the 48-block trunk at 1024 tokens and
  // the whole model at crop 768.
  return s + (recompute_ops ? " (+4-6% step time)" : " (+1-3% step time)");
}

int64_t diffusion_sample_chunk(const ModelConfig& cfg, int64_t n_tokens) {
  const int64_t samples = cfg.diffusion.samples;
  if (memory_plan(cfg).mode == MemoryMode::kFast || samples <= 0) return cfg.diffusion.sample_chunk;
  return std::clamp<int64_t>(kDiffusionTokenSamples / std::max<int64_t>(n_tokens, 1), 1, samples);
}

}  // namespace megafold::model
