#pragma once
// Model sizes. Symbols follow the AF3 SI (c_s, c_z, N_head, ...). Defaults are AF3's trunk.
#include <cstdint>

namespace megafold::model {

// Diffusion module sizes (AF3 SI Sec. 3.7, Alg. 20-26). Defaults are AF3's.
struct DiffusionConfig {
  int64_t c_token = 768;        // token-level diffusion transformer channels
  int64_t n_blocks = 24;        // diffusion transformer blocks
  int64_t heads = 16;           // attention heads of the diffusion transformer
  int64_t fourier_dim = 256;    // noise-level embedding (Alg. 22)
  int64_t transition_factor = 2;  // n of the conditioning and conditioned transitions
  double sigma_data = 16.0;     // EDM data standard deviation, Angstrom
  int64_t c_atom = 128;         // atom single channels (Alg. 5)
  int64_t c_atompair = 16;      // atom pair channels
  int64_t atom_blocks = 3;      // atom transformer blocks in the encoder and in the decoder
  int64_t atom_heads = 4;
  // Training and sampling. samples = 0 leaves the module out of the model (trunk and
  // distogram only); AF3 trains with 48 samples per trunk pass.
  int64_t samples = 0;          // noisy copies per example per step
  double weight = 4.0;          // alpha_diffusion (AF3 SI Sec. 4.2)
  int64_t sampler_steps = 200;  // Alg. 18 steps when sampling (validation, prediction)
};

struct ModelConfig {
  int64_t c_s = 384;                 // single representation channels
  int64_t c_z = 128;                 // pair representation channels
  int64_t n_blocks = 48;             // Pairformer blocks
  int64_t tri_attn_heads = 4;        // triangle attention heads (AF3 Alg. 14)
  int64_t tri_attn_head_dim = 32;
  int64_t tri_mul_hidden = 128;      // c in AF3 Alg. 12/13
  int64_t single_attn_heads = 16;    // attention with pair bias (AF3 Alg. 24)
  int64_t single_attn_head_dim = 24; // c_s / N_head in AF3
  int64_t transition_factor = 4;     // n in AF3 Alg. 11
  double dropout = 0.25;             // pair-stack dropout rate (AF3 Alg. 17)
  int64_t relpos_r_max = 32;         // AF3 Alg. 3
  int64_t relpos_s_max = 2;
  int64_t distogram_bins = 64;       // AF3: 64 bins, 2..22 Angstrom
  double distogram_min = 2.0;
  double distogram_max = 22.0;
  bool checkpoint_blocks = false;    // recompute each block in backward (activation checkpointing)
  DiffusionConfig diffusion;         // structure module (off unless diffusion.samples > 0)
};


}  // namespace megafold::model
