// The forward pass of the LLaMA-style block that LLaDA and its relatives share, recorded as an
// op plan: straight-line code with every intermediate named.
#include "model/model.h"

namespace llada::model {

runtime::Plan Model::build_plan(int64_t max_rows, int64_t max_out, Head head,
                                runtime::PlanOptions options) const {
    const Hparams& hp = hp_;
    runtime::PlanBuilder b(max_rows, max_out, options);
    int x = b.embed(token_embd_);
    for (int l = 0; l < hp.n_layer; ++l) {
        const LayerWeights& L = layers_[l];
        const std::string p = "blk." + std::to_string(l) + ".";
        int h = b.rms_norm(x, L.attn_norm.data(), hp.eps, p + "attn_norm");
        int q = b.matmul(h, L.wq, p + "attn_q");
        int k = b.matmul(h, L.wk, p + "attn_k");
        int v = b.matmul(h, L.wv, p + "attn_v");
        if (!L.bq.empty()) q = b.add_bias(q, L.bq.data(), p + "attn_q.bias");
        if (!L.bk.empty()) k = b.add_bias(k, L.bk.data(), p + "attn_k.bias");
        if (!L.bv.empty()) v = b.add_bias(v, L.bv.data(), p + "attn_v.bias");
        if (hp.qk_norm) {
            q = b.rms_norm_heads(q, L.q_norm.data(), hp.head_dim, hp.eps, p + "attn_q_norm");
            k = b.rms_norm_heads(k, L.k_norm.data(), hp.head_dim, hp.eps, p + "attn_k_norm");
        }
        q = b.rope(q, hp.n_head, hp.head_dim, hp.n_rot, hp.rope_style, rope_cos_.data(),
                   rope_sin_.data(), hp.n_ctx, p + "attn_q.rope");
        k = b.rope(k, hp.n_kv_head, hp.head_dim, hp.n_rot, hp.rope_style, rope_cos_.data(),
                   rope_sin_.data(), hp.n_ctx, p + "attn_k.rope");
        b.store_kv(l, k, v);
        // In the last layer only the rows whose prediction is wanted go on past the K/V store
        // (as llama.cpp gathers its output rows there): every row's K/V is kept, but attention,
        // the output projection and the FFN run on the output rows alone.
        const bool gather = options.gather_last_layer && l == hp.n_layer - 1;
        if (gather) {
            q = b.gather_output_rows(q, p + "attn_q.out_rows");
            x = b.gather_output_rows(x, p + "out_rows");
        }
        const int64_t block =
            options.attention_block > 0 ? options.attention_block : hp.attention_block;
        int attn = b.attention(l, q, hp.n_head, hp.n_kv_head, hp.head_dim, hp.causal, p + "attn",
                               hp.attention_block > 0 ? block : 0);
        int o = b.matmul(attn, L.wo, p + "attn_output");
        x = b.add(x, o, p + "attn_residual");
        h = b.rms_norm(x, L.ffn_norm.data(), hp.eps, p + "ffn_norm");
        int down;
        if (L.moe()) {
            int router = b.matmul(h, L.router, p + "ffn_gate_inp");
            down = b.moe_ffn(h, router, L.experts, p + "ffn_moe");
            if (hp.n_ff_shexp > 0) {  // the shared expert, added ungated
                int gate = b.matmul(h, L.sh_gate, p + "ffn_gate_shexp");
                int up = b.matmul(h, L.sh_up, p + "ffn_up_shexp");
                int act = b.swiglu(gate, up, p + "ffn_act_shexp");
                int sh = b.matmul(act, L.sh_down, p + "ffn_down_shexp");
                down = b.add(down, sh, p + "ffn_moe_shexp");
            }
        } else {
            int gate = b.matmul(h, L.w_gate, p + "ffn_gate");
            int up = b.matmul(h, L.w_up, p + "ffn_up");
            int act = b.swiglu(gate, up, p + "ffn_act");
            down = b.matmul(act, L.w_down, p + "ffn_down");
        }
        x = b.add(x, down, p + "ffn_residual");
    }
    // Only the rows whose logits are wanted go through the final norm and the output head.
    if (!options.gather_last_layer || hp.n_layer == 0) x = b.gather_output_rows(x, "out_rows");
    x = b.rms_norm(x, output_norm_.data(), hp.eps, "output_norm");
    b.set_output(head == Head::Logits ? b.matmul(x, output_, "logits")
                                      : b.lm_head_reduce(x, output_, "logits.stats"));
    return b.finish();
}

}  // namespace llada::model
