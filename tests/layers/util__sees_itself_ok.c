/* util sees only itself: must build. */
#include "err.h"
#include "heap.h"
#include "strbuf.h"
#include "utf8.h"
#include "ydoc.h"
int probe_util_ok(void) { return TS_ERR_OK; }
