#pragma once
// How the model trades step time for GPU memory: `model.memory` names a mode, and the plan
// below is what the mode turns on. The modules read the plan; nothing else changes with it.
//
//   fast      what the config says: model.checkpoint_blocks and model.diffusion.sample_chunk as
//             given, block boundaries in fp32, every op's activations kept for backward.
//   balanced  every Pairformer block (trunk, MSA module, confidence head) recomputed in
//             backward from its input; the pair representation is rounded to bf16 at block
//             boundaries and held so; the trunk's block inputs live in pinned host memory
//             between forward and backward (copied out and back on a side stream, one block
//             ahead, overlapping compute; placed on the GPU when the host has no room). Ops that
//             keep nothing but their inputs run on row chunks (pair transition), the outer
//             product mean is recomputed on row chunks, the diffusion and atom transformer
//             blocks keep only their inputs (recomputed in backward), and the diffusion loss
//             picks its sample chunk from the crop.
//   frontier  balanced, and inside a block's recomputation each pair-stack op keeps only its
//             input: its own backward recomputes it on row chunks of ~chunk_pairs pairs, so a
//             block's backward holds a small multiple of z.
//
// Numerics: the bf16 boundary is part of the model's function in balanced and frontier (it
// is applied identically in forward, in recomputation and at inference), so those modes
// compute a slightly different function from fast; chunking and offload change where values
// live and the order of some float sums, not the function. The run prints the plan at start.
#include <cstdint>
#include <string>

#include "model/config.h"

namespace megafold::model {

enum class MemoryMode { kFast, kBalanced, kFrontier };

struct MemoryPlan {
  MemoryMode mode = MemoryMode::kFast;
  bool checkpoint_blocks = false;  // recompute each block in backward from its input
  bool bf16_boundary = false;      // z rounded to (and held in) bf16 between blocks
  bool offload = false;            // trunk block inputs held in pinned host memory
  int64_t chunk_pairs = 0;         // > 0: row-chunked ops run on about this many pairs at a time
  bool recompute_ops = false;      // pair-stack ops keep only their inputs (frontier)
  bool recompute_diffusion_blocks = false;  // diffusion and atom transformer blocks keep only their inputs

  // Rows per chunk for an [N, N] pair tensor (all N rows when chunking is off).
  int64_t chunk_rows(int64_t n) const;
  // One line for the start of a run: the mode and what it turns on.
  std::string describe() const;
};

// "fast" | "balanced" | "frontier"; anything else is an error naming the value.
MemoryMode parse_memory_mode(const std::string& name);
const char* memory_mode_name(MemoryMode mode);

// The plan of cfg.memory for this model.
MemoryPlan memory_plan(const ModelConfig& cfg);

// Samples per recomputed chunk of the diffusion loss: the configured sample_chunk in fast mode,
// otherwise the largest count whose window activations stay near a fixed budget at n tokens.
int64_t diffusion_sample_chunk(const ModelConfig& cfg, int64_t n_tokens);

}  // namespace megafold::model
