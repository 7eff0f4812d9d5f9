/* core sees util: must build. */
#include "err.h"
#include "heap.h"
#include "sched.h"
int probe_core_ok(void) { return TS_ERR_OK + SCHED_MAX_TIERS; }
