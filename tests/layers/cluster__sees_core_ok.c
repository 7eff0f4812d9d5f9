/* cluster sees core and util: must build. */
#include "plan.h"
#include "sched.h"
#include "fq.h"
#include "strbuf.h"
int probe_cluster_ok(void) { return SCHED_MAX_TIERS; }
