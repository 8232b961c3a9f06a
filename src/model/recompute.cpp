#include "model/recompute.h"

#include <torch/autograd.h>

#include "model/autocast.h"

namespace megafold::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  // Inputs after ctx: block (not a tensor), s, z, token_mask, pair_mask, seed (not a tensor).
  // Parameter gradients are not routed through this node: the recomputation in backward
  // runs a nested backward that accumulates them into the parameters' .grad directly.
  static variable_list forward(AutogradContext* ctx, PairformerBlockImpl* block,
                               const at::Tensor& s, const at::Tensor& z,
                               const at::Tensor& token_mask, const at::Tensor& pair_mask,
                               int64_t seed) {
    const at::DeviceType dev = z.device().type();
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(dev);
    ctx->saved_data["autocast_dtype"] = at::autocast::get_autocast_dtype(dev);
    ctx->save_for_backward({s, z, token_mask, pair_mask});
    // Outputs that do not reach the loss (the last block's single track) then arrive as
    // undefined gradients, and their recomputed graph is not differentiated.
    ctx->set_materialize_grads(false);
    const PairformerState out =
        block->forward({s, z}, token_mask, pair_mask, static_cast<uint64_t>(seed));
    return {out.s, out.z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* block = reinterpret_cast<PairformerBlockImpl*>(ctx->saved_data["block"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor s = saved[0].detach().requires_grad_(true);
    const at::Tensor z = saved[1].detach().requires_grad_(true);
    PairformerState out;
    {
      at::AutoGradMode grad_on(true);
      AutocastScope autocast(z.device().type(), ctx->saved_data["autocast"].toBool(),
                             ctx->saved_data["autocast_dtype"].toScalarType());
      out = block->forward({s, z}, saved[2], saved[3],
                           static_cast<uint64_t>(ctx->saved_data["seed"].toInt()));
    }
    // An undefined output gradient means that output does not reach the loss.
    variable_list outputs, grads;
    for (int i = 0; i < 2; ++i) {
      if (!grad_out[i].defined()) continue;
      outputs.push_back(i == 0 ? out.s : out.z);
      grads.push_back(grad_out[i]);
    }
    torch::autograd::backward(outputs, grads);
    return {at::Tensor(), s.grad(), z.grad(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

PairformerState checkpointed_block(PairformerBlockImpl& block, const PairformerState& in,
                                   const at::Tensor& token_mask, const at::Tensor& pair_mask,
                                   uint64_t dropout_seed) {
  const variable_list out =
      CheckpointedBlock::apply(&block, in.s, in.z, token_mask, pair_mask,
                               static_cast<int64_t>(dropout_seed));
  return {out[0], out[1]};
}

}  // namespace megafold::model
