#pragma once
// The op API the model is built from. Each op lives in its own folder with its contract
// (header), ATen reference (<op>_ref.cpp, also the CPU path), dispatcher entry and
// torch.ops.megafold registration (<op>.cpp), and tests (<op>_test.cpp).
#include "ops/attention_pair_bias/attention_pair_bias.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "ops/residual_update/residual_update.h"
#include "ops/swiglu_transition/swiglu_transition.h"
#include "ops/triangle_attention/triangle_attention.h"
#include "ops/triangle_multiplication/triangle_multiplication.h"
