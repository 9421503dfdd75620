/* Strata of CPU-sampled sessions: the rules are in fo_session.h
 * (fo_session_set_cpu_strata). A stratum's samples are noted as they are
 * counted; when it ends its time is shared among them there and then, and
 * they are marked settled so the trace-wide share at the end
 * (fo_session_cpu_settle) leaves them and that time out. */
#include "fo_session_parts.h"

void fo_session_set_cpu_strata(fo_session *s, uint64_t min_ns, uint64_t gap_ns)
{
    s->cpu_stratum_ns = min_ns;
    s->cpu_stratum_gap_ns = gap_ns;
}

int fo_s_running_frame(uint32_t frame)
{
    return frame != FO_FRAME_SLEEP && frame != FO_FRAME_WAITING && frame != FO_FRAME_ATTRIBUTED &&
           frame != FO_FRAME_GC_MINOR && frame != FO_FRAME_GC_MAJOR && frame != FO_FRAME_RUNNABLE;
}

void fo_s_cpu_count(fo_session *s, fo_proc *p, uint32_t node)
{
    fo_tree_count_samples(&s->tree, node, 1, 0);
    if (s->cpu_stratum_ns == 0 || p->stratum_spilled || !fo_s_running_frame(s->tree.nodes[node].frame))
        return;
    for (uint32_t i = 0; i < p->stratum_used; i++) {
        if (p->stratum_nodes[i] == node) {
            p->stratum_counts[i]++;
            return;
        }
    }
    if (p->stratum_used == FO_CPU_STRATUM_NODES) {
        p->stratum_spilled = 1;
        return;
    }
    p->stratum_nodes[p->stratum_used] = node;
    p->stratum_counts[p->stratum_used++] = 1;
}

void fo_s_stratum_end(fo_session *s, fo_proc *p)
{
    uint64_t ns = p->cpu_ns > p->stratum_base ? p->cpu_ns - p->stratum_base : 0;
    uint64_t samples = 0;
    uint32_t busiest = 0;
    for (uint32_t i = 0; i < p->stratum_used; i++) {
        samples += p->stratum_counts[i];
        if (p->stratum_counts[i] > p->stratum_counts[busiest])
            busiest = i;
    }
    if (s->cpu_stratum_ns > 0 && !p->stratum_spilled && samples > 0 && ns >= s->cpu_stratum_ns) {
        uint64_t given = 0;
        for (uint32_t i = 0; i < p->stratum_used; i++) {
            unsigned __int128 share = (unsigned __int128)ns * p->stratum_counts[i];
            uint64_t part = (uint64_t)(share / samples);
            fo_tree_charge(&s->tree, p->stratum_nodes[i], part);
            s->tree.nodes[p->stratum_nodes[i]].settled += p->stratum_counts[i];
            given += part;
        }
        fo_tree_charge(&s->tree, p->stratum_nodes[busiest], ns - given);
        p->cpu_ns = p->stratum_base;
        s->stats.cpu_strata++;
    }
    p->stratum_base = p->cpu_ns;
    p->stratum_used = 0;
    p->stratum_spilled = 0;
}

void fo_s_stratum_event(fo_session *s, fo_proc *p, const fo_event *ev)
{
    if (s->cpu_stratum_ns == 0)
        return;
    switch (ev->kind) {
    case FO_EV_OUT:
        p->out_ts = ev->ts_ns;
        break;
    case FO_EV_IN:
        if (p->out_ts != 0 && ev->ts_ns >= p->out_ts &&
            (uint64_t)(ev->ts_ns - p->out_ts) >= s->cpu_stratum_gap_ns)
            fo_s_stratum_end(s, p);
        p->out_ts = 0;
        break;
    case FO_EV_EXIT:
        fo_s_stratum_end(s, p);
        p->out_ts = 0;
        break;
    default:
        break;
    }
}
