/* sstep.c - the simulator's step-time models; see sstep.h. */
#include "sstep.h"

#include "cost.h"

void sst_batch_of(const sched_plan *p, sst_batch *b) {
    /* In locals: an item's bytes may alias *b for all the compiler knows. */
    double prefill = 0, decodes = 0, attended = 0, kv_read = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        if (it->is_prefill) prefill += it->n_tokens;
        else decodes += 1;
        attended += cost_attended(it->pos, it->n_tokens);
        kv_read += (double)it->pos + it->n_tokens;
    }
    *b = (sst_batch){.prefill = prefill, .decodes = decodes, .attended = attended, .kv_read = kv_read,
                     .copy_blocks = (double)p->n_swap_out + p->n_swap_in};
}

void sst_roofline(sst_model *out, const perf_model *m, const perf_slice *s, const perf_opts *o) {
    *out = (sst_model){0};
    out->kind = SST_ROOFLINE;
    out->params = m->params;
    out->weight_bytes = perf_weight_bytes(m);
    out->kv_per_pos = perf_kv_per_token(m);
    out->attn_flops = 4.0 * m->layers * (double)(m->heads > 0 ? m->heads : m->kv_heads) * m->head_dim;
    out->flops = s->flops;
    out->bw = s->bw;
    out->gpu_bw = s->bw;
    out->eff_c = o->eff_compute;
    out->eff_b = o->eff_bw;
    out->overhead_us = o->step_overhead_s * 1e6;
    out->share_mode = SST_DEDICATED;
    out->share = 1.0;
}

/* The roofline step alone on its slice, with bandwidth bw. */
static double roof_us(const sst_model *m, const sst_batch *b, double bw) {
    double flops = 2.0 * m->params * (b->prefill + b->decodes) + m->attn_flops * b->attended;
    double bytes = m->weight_bytes + m->kv_per_pos * b->kv_read;
    double tc = m->flops > 0 ? flops / (m->flops * m->eff_c) : 0;
    double tm = bw > 0 ? bytes / (bw * m->eff_b) : 0;
    return (tc > tm ? tc : tm) * 1e6 + m->overhead_us;
}

double sst_step_us(const sst_model *m, const sst_batch *b, int k, double busy_share, double block_bytes) {
    if (k < 1) k = 1;
    double t;
    if (m->kind == SST_LINEAR) {
        t = (m->theta[0] + m->theta[1] * b->prefill + m->theta[2] * b->decodes + m->theta[3] * b->attended) *
            cost_shape_factor(&m->shape, b->prefill, b->decodes);
    } else if (m->share_mode == SST_MPS) {
        double f = busy_share > m->share ? m->share / busy_share : 1.0;
        t = roof_us(m, b, m->gpu_bw * f);
    } else if (m->share_mode == SST_TIMESLICE) {
        t = k * roof_us(m, b, m->bw) + (k > 1 ? m->switch_us : 0);
    } else {
        t = roof_us(m, b, m->bw);
    }
    if (m->host_bytes_per_us > 0 && b->copy_blocks > 0)
        t += b->copy_blocks * block_bytes / m->host_bytes_per_us;
    if (!(t <= SST_MAX_US)) return SST_MAX_US;
    return t > 1.0 ? t : 1.0;
}

void sst_seed(const sst_model *m, double out[4]) {
    if (m->kind == SST_LINEAR) {
        for (int i = 0; i < 4; i++) out[i] = m->theta[i];
        return;
    }
    /* A small decode step streams the weights (memory-bound); each token
     * beyond is compute: the linearisation around such a step. */
    double fe = m->flops * m->eff_c, be = m->bw * m->eff_b;
    out[0] = m->overhead_us + (be > 0 ? m->weight_bytes / be * 1e6 : 0);
    out[1] = fe > 0 ? 2.0 * m->params / fe * 1e6 : 0;
    out[2] = out[1];
    out[3] = fe > 0 ? m->attn_flops / fe * 1e6 : 0;
}
