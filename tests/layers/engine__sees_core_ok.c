/* engine sees core and util: must build. */
#include "model.h"
#include "sched.h"
#include "strbuf.h"
int probe_engine_ok(void) { return 0; }
