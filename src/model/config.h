#pragma once
// Model sizes. Symbols follow the AF3 SI (c_s, c_z, N_head, ...). Defaults are AF3's trunk.
#include <cstdint>
#include <string>

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
  double bond_weight = 0.0;     // alpha_bond (AF3 SI Eq. 5-6): 0 in initial training, 1 when fine-tuning
  int64_t sampler_steps = 200;  // Alg. 18 steps when sampling (validation, prediction)
  // Reflect sampled structures whose stereocentres mostly have the opposite hand to their
  // reference conformers' (model/chirality.h): in validation, prediction and the confidence
  // head's rollouts. Not in AF3, whose authors advise filtering samples by chirality.
  bool reflect_mirror_images = true;
  // Samples per chunk of the training loss: each chunk's module activations are recomputed in
  // backward, so memory holds one chunk at a time (AF3 runs 48 samples); 0 = all at once.
  int64_t sample_chunk = 0;
};

// Confidence head: pLDDT, PAE, PDE and experimentally-resolved (AF3 SI Alg. 31 and Sec. 4.3).
// It needs the diffusion module: it is trained on the model's own structure from a short
// sampler rollout, with gradients stopped at its inputs (trunk and rollout), so it never
// changes what the trunk learns.
struct ConfidenceConfig {
  int64_t n_blocks = 0;         // Pairformer blocks of the head (AF3: 4); 0 = no head
  int64_t plddt_bins = 50;      // bins over lDDT in [0, 1]
  int64_t error_bins = 64;      // PAE and PDE bins over [0, error_max] Angstrom (AF3: 64, 32 A);
  double error_max = 32.0;      //   the last bin takes every larger error
  double pae_weight = 1.0;      // alpha_pae (AF3: 0 in initial training, 1 in fine-tuning)
  int64_t distance_bins = 39;   // one-hot of predicted representative-atom distances,
  double distance_min = 3.375;  //   edges from distance_min to distance_max (AF3: 3 3/8 .. 21 3/8 A)
  double distance_max = 21.375;
  int64_t rollout_steps = 20;   // sampler steps of the training rollout (AF3: 20)
  int64_t every = 1;            // train the head every `every` optimiser steps (rollouts are costly)
  double weight = 1e-4;         // alpha_confidence (AF3 SI Sec. 4.2)
};

// Template embedder (AF3 SI Sec. 2.4 and Alg. 16): each template's pair features (pseudo-beta
// distogram, unit vectors in the backbone frames, masks, residue types) meet a projection of
// the trunk's z, run through a pair-only Pairformer stack, and their mean is added to z before
// every trunk pass. n_blocks = 0 leaves it out. Defaults are AF3's.
struct TemplateConfig {
  int64_t n_blocks = 0;          // Pairformer (pair-only) blocks per template (AF3: 2)
  int64_t c = 64;                // template pair channels
  int64_t tri_attn_heads = 4;    // triangle attention of the template stack
  int64_t tri_attn_head_dim = 16;
  int64_t tri_mul_hidden = 64;
  int64_t transition_factor = 2;
  int64_t distogram_bins = 39;   // pseudo-beta distance bins with lower edges from
  double distogram_min = 3.25;   //   distogram_min to distogram_max, Angstrom (AF3 Table 5)
  double distogram_max = 50.75;
};

// MSA module (AF3 SI Alg. 8-10): the MSA rows the loader drew update the pair representation
// through outer-product means before every trunk pass. n_blocks = 0 leaves it out.
struct MsaConfig {
  int64_t n_blocks = 4;      // AF3: 4
  int64_t c_m = 64;          // MSA channels
  int64_t opm_hidden = 32;   // c of the outer product mean (Alg. 9)
  int64_t heads = 8;         // pair-weighted averaging (Alg. 10)
  int64_t head_dim = 8;
  double dropout = 0.15;     // row-wise dropout of the pair-weighted averaging (Alg. 8)
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
  // Memory mode: "fast" | "balanced" | "frontier" (model/memory_plan.h says what each turns on),
  // and two of its settings: the pairs per chunk of the row-chunked ops (0: the mode's default,
  // 2^21) and whether block inputs may go to host memory (balanced and frontier; turn it off on
  // a host without spare memory).
  std::string memory = "fast";
  int64_t memory_chunk_pairs = 0;
  bool memory_offload = true;
  // Trunk passes (AF3 N_cycle; AF3 uses 4). Each pass adds the previous pass's s and z through
  // LayerNorm + linear (Alg. 1 lines 8-11). Training draws 1..recycles passes per step from the
  // step seed and backpropagates through the last only; inference always runs `recycles`.
  int64_t recycles = 1;
  TemplateConfig templates;          // template embedder (off when templates.n_blocks == 0)
  MsaConfig msa;                     // MSA module (off when msa.n_blocks == 0)
  DiffusionConfig diffusion;         // structure module (off unless diffusion.samples > 0)
  ConfidenceConfig confidence;       // pLDDT head (off unless confidence.n_blocks > 0)
};


}  // namespace megafold::model
